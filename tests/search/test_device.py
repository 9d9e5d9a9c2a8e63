"""``gspo optimize --device cuda``. No GPU here: the flow runs against the recording stand-ins of
tests/runtime/fake_cuda.py, in the mode where device values hold arrays and each session computes
with onnxruntime's CPU provider (so outputs compare with the CPU's reference)."""

from __future__ import annotations

import dataclasses
import json
import os

import onnx
import pytest
from click.testing import CliRunner

from gspo import ir
from gspo.cli import cli
from gspo.costmodel.profile import ProfileError, find_profile
from gspo.errors import GspoError
from gspo.runtime import random_inputs, runtime_version
from gspo.search import optimize
from gspo.search.candidate import Candidate
from gspo.search.device import CpuDevice, CudaDevice, device_of, newest_gpu_profile
from gspo.search.report_parts import PlacementReport
from gspo.search.strategies import Strategies
from gspo.search.trial import Trial
from gspo.streams import assign_streams
from tests.helpers import branchy, one_line_error
from tests.runtime import fake_cuda
from tests.runtime.fake_cuda import CPU, CUDA, FakeCudart, FakeOrt
from tests.search.fakes import ScriptedTimings


def gpu_profile(path, device="cuda:fake", mtime=None):
    """The shipped CPU profile relabelled as made on a GPU (the numbers do not matter here)."""
    data = json.loads(find_profile("cpu").read_text())
    data.update(device=device, runtime=runtime_version())
    path.write_text(json.dumps(data))
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def fakes(monkeypatch, ort_class=FakeOrt, **kwargs):
    log: list = []
    return fake_cuda.install(monkeypatch, ort_class(log, compute=True, **kwargs), FakeCudart(log), log)


def gspo(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def ort_keyed(monkeypatch):
    """GPU profiles keyed as on onnxruntime-gpu (what :func:`gpu_profile` writes): the stand-in
    onnxruntime-gpu is the runtime chosen, whichever CUDA runtime works on this machine (on one with
    a CUDA torch, it would be keyed ``torch-X.Y.Z``)."""
    fakes(monkeypatch)


# ------------------------------------------------------------ no CUDA here
def test_optimize_on_cuda_without_its_provider_exits_2_in_one_line(tmp_path, monkeypatch):
    fakes(monkeypatch, available=(CPU,))  # a CPU onnxruntime, and no torch on CUDA, whatever this machine has
    model = ir.save(branchy(), tmp_path / "m.onnx")
    line = one_line_error(gspo("optimize", model, "-o", tmp_path / "o.onnx", "--device", "cuda"))
    assert line.startswith("gspo: error: --device cuda: no CUDA runtime works here ")
    assert "no CUDAExecutionProvider" in line and "gspo[gpu]" in line
    assert not (tmp_path / "o.onnx").exists()


# ----------------------------------------------------------------- profile
def test_the_newest_gpu_profile_in_the_cache_is_chosen(tmp_path, ort_keyed):
    gpu_profile(tmp_path / "old.json", "cuda:v100", mtime=1_000_000)
    gpu_profile(tmp_path / "new.json", "cuda:a100", mtime=2_000_000)
    gpu_profile(tmp_path / "cpu.json", "cpu:xeon", mtime=3_000_000)  # newer, but not a GPU's
    (tmp_path / "junk.json").write_text("not json")
    assert newest_gpu_profile(tmp_path) == tmp_path / "new.json"
    assert CudaDevice().profile(None, False, tmp_path).device == "cuda:a100"
    assert CudaDevice().profile(str(tmp_path / "old.json"), False, tmp_path).device == "cuda:v100"


def test_without_a_gpu_profile_the_error_says_to_calibrate_one(tmp_path, ort_keyed):
    gpu_profile(tmp_path / "cpu.json", "cpu:xeon")
    with pytest.raises(ProfileError, match=r"run `gspo calibrate --gpu NAME` first"):
        CudaDevice().profile(None, False, tmp_path)
    with pytest.raises(ProfileError, match="not a GPU"):
        CudaDevice().profile(str(tmp_path / "cpu.json"), False, tmp_path)


def test_the_cli_says_in_one_line_to_calibrate_when_no_gpu_profile_exists(tmp_path, monkeypatch):
    fakes(monkeypatch)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    model = ir.save(branchy(), tmp_path / "m.onnx")
    line = one_line_error(gspo("optimize", model, "-o", tmp_path / "o.onnx", "--device", "cuda"))
    assert "no GPU profile" in line and "gspo calibrate --gpu NAME" in line


# ---------------------------------------------------------- verification
def test_options_are_verified_against_the_cpu_with_tf32_off(tmp_path, monkeypatch):
    log, ort, _ = fakes(monkeypatch)
    result = optimize(branchy(), device="cuda", profile=str(gpu_profile(tmp_path / "p.json")), time_budget=None,
                      jobs=1, timing_runs=5)
    pieces = result.report["pieces_detail"][0]["candidates"]
    assert {c["label"] for c in pieces} >= {"unmodified", "greedy", "unmodified+streams"}
    assert all(c["rejected"] is None for c in pieces)  # computed on the "device", equal to the CPU's
    assert len(ort.sessions) > 3 and all(s["options"]["use_tf32"] == "0" for s in ort.sessions)
    device = result.report["device"]
    assert result.report["machine"] == "cuda:Fake GPU 16GB" and device["runtime"] == "ort"  # what measured
    assert device["name"] == "Fake GPU 16GB" and device["driver_cuda"] == "12.4" and device["runtime_cuda"] == "12.8"
    assert device["onnxruntime_gpu"] == "1.26.0" and device["onnxruntime_build_cuda"] == "12.8"
    assert "cudnn" in device and "cuda_python" in device
    assert result.report["final_candidates"][0]["measured_ms"] > 0  # from the stand-in's event clock


def test_a_wrong_option_on_the_device_is_rejected(monkeypatch):
    fakes(monkeypatch)
    g, other = branchy(seed=0), branchy(seed=1)  # same structure, other weights
    feeds = [random_inputs(g, 0)]
    with Trial(g, [Candidate(g, label="original"), Candidate(other, label="wrong")], feeds,
               executor=CudaDevice().executor()) as t:
        assert [o.label for o in t.equivalent] == ["original"]
        assert "differs" in t.rejected[0].rejected


class FallsBackWithoutAdd(FakeOrt):
    """Sessions of a model with a Conv but no Add report the CPU provider (onnxruntime's silent fallback)."""

    def InferenceSession(self, model, sess_options=None, providers=()):  # noqa: N802
        session = super().InferenceSession(model, sess_options, providers)
        ops = {n.op_type for n in onnx.load_from_string(model).graph.node}
        if "Conv" in ops and "Add" not in ops:
            session.providers = [CPU]
        return session


def test_an_option_that_falls_back_to_the_cpu_is_refused(tmp_path, monkeypatch):
    fakes(monkeypatch, FallsBackWithoutAdd)
    result = optimize(branchy(), device="cuda", profile=str(gpu_profile(tmp_path / "p.json")), time_budget=None,
                      jobs=1, timing_runs=5)
    piece = result.report["pieces_detail"][0]
    greedy = next(c for c in piece["candidates"] if c["label"] == "greedy")
    assert greedy["rejected"] and "fell back to the CPU" in greedy["rejected"]
    assert piece["chosen"] != "greedy" and piece["note"] == ""


def test_a_model_whose_original_falls_back_is_one_line(tmp_path, monkeypatch):
    log: list = []
    real = FakeOrt(log, compute=True)

    class AllButProbe(FakeOrt):
        def InferenceSession(self, model, sess_options=None, providers=()):  # noqa: N802
            session = real.InferenceSession(model, sess_options, providers)
            if "Conv" in {n.op_type for n in onnx.load_from_string(model).graph.node}:
                session.providers = [CPU]
            return session

    fake_cuda.install(monkeypatch, AllButProbe(log, compute=True), FakeCudart(log), log)
    model = ir.save(branchy(), tmp_path / "m.onnx")
    done = gspo("optimize", model, "-o", tmp_path / "o.onnx", "--device", "cuda", "--profile",
                gpu_profile(tmp_path / "p.json"), "--time-budget", "60")
    errors = [line for line in done.output.splitlines() if not line.startswith("optimizing:")]
    assert done.exit_code == 2 and len(errors) == 1 and errors[0].startswith("gspo: error: "), done.output
    assert "cannot be measured on cuda" in errors[0] and "fell back to the CPU" in errors[0]
    assert not (tmp_path / "o.onnx").exists()


# ------------------------------------------------------------------ order
def rounds(log, streams):
    """The log cut into runs: each ends where the executor synchronizes its last stream."""
    out, current = [], []
    for entry in log:
        current.append(entry)
        if entry[0] == "sync" and entry[1] is streams[-1]:
            out.append(current)
            current = []
    return out


def check_round(entries, plan, streams, events):
    """Every piece runs on its stream after waiting for the events it needs, each recorded
    earlier in the same run on its producer's stream, after the producer ran."""
    handle = {str(s.handle): s for s in streams}
    runs = [e for e in entries if e[0] == "run"]
    assert [handle[r[2]] for r in runs] == [streams[seg.stream] for seg in plan.segments]
    position = {id(r): entries.index(r) for r in runs}
    for k, seg in enumerate(plan.segments):
        at = position[id(runs[k])]
        for e in seg.waits:
            event = events[e]
            wait = next(i for i, x in enumerate(entries[:at]) if x[0] == "wait" and x[2] is event)
            assert entries[wait][1] is streams[seg.stream]
            record = next(i for i, x in enumerate(entries[:wait]) if x[0] == "record" and x[1] is event)
            producer = next(j for j, s in enumerate(plan.segments) if e in s.signals)
            assert entries[record][2] is streams[plan.segments[producer].stream]
            assert position[id(runs[producer])] < record


def test_a_multi_stream_option_uploads_once_then_launches_records_and_waits_in_order(monkeypatch):
    log, _, _ = fakes(monkeypatch)
    g = branchy()
    schedule = assign_streams(g, max_streams=2)
    assert schedule.num_streams == 2
    feeds = [random_inputs(g, 0)]
    with Trial(g, [Candidate(g, label="original"), Candidate(g, schedule, label="streams")], feeds,
               executor=CudaDevice().executor()) as trial:
        ex = next(x for x in trial.executors if getattr(x, "num_streams", 1) == 2)
        assert ex.plan.num_events >= 1
        streams, events = list(ex._streams), list(ex._events)
        start = len(log)
        trial.time(7)
        timing = log[start:]
    uploads = [e for e in timing if e[0] == "memcpy"]
    assert len(uploads) == 2 * len(g.inputs)  # once per option, not once per run
    first_run = next(i for i, e in enumerate(timing) if e[0] == "run")
    assert all(timing.index(u) < first_run for u in uploads)
    mine = [e for e in timing if e[0] != "run" or e[2] in {str(s.handle) for s in streams}]
    runs_of_ex = rounds([e for e in mine if e[0] != "memcpy"], streams)
    assert len(runs_of_ex) == 1 + 3 + 7  # the call that sizes the samples, the warm-up rounds, the timed ones
    for entries in runs_of_ex:
        check_round(entries, ex.plan, streams, events)


# ------------------------------------------------------------- run, bench
def test_the_output_runs_and_benches_on_cuda(tmp_path, monkeypatch):
    log, _, _ = fakes(monkeypatch)
    model = ir.save(branchy(), tmp_path / "m.onnx")
    out, report = tmp_path / "o.onnx", tmp_path / "r.json"
    done = gspo("optimize", model, "-o", out, "--device", "cuda", "--profile", gpu_profile(tmp_path / "p.json"),
                "--report", report, "--time-budget", "60")
    assert done.exit_code == 0, done.output
    assert "measured on Fake GPU 16GB with onnxruntime-gpu (CUDA events, TF32 off)" in done.output
    assert json.loads(report.read_text())["device"]["name"] == "Fake GPU 16GB"
    before = len([e for e in log if e[0] == "run"])
    assert gspo("run", out, "--device", "cuda").exit_code == 0
    assert gspo("bench", out, "--device", "cuda", "--runs", "3").exit_code == 0
    assert len([e for e in log if e[0] == "run"]) > before
    assert CUDA in FakeOrt([]).available


def test_backends_with_cuda_is_one_line(tmp_path):
    model = ir.save(branchy(), tmp_path / "m.onnx")
    line = one_line_error(gspo("optimize", model, "-o", tmp_path / "o.onnx", "--device", "cuda", "--backends", "ort"))
    assert "--backends places pieces on the cpu device" in line


def test_the_pieces_joint_streams_are_a_whole_model_option(tmp_path, monkeypatch):
    """Each piece picks its option on streams: the whole model is then also tried on those streams."""
    from gspo.zoo import build

    fakes(monkeypatch)
    timings = ScriptedTimings({"unmodified+streams": (0.5,) * 30})  # each piece on its streams measures fastest
    result = optimize(build("nasnet_mobile", "tiny"), device="cuda", profile=str(gpu_profile(tmp_path / "p.json")),
                      time_budget=None, jobs=1, timing_runs=5, budget=2, threshold=40, use_rules=False,
                      strategies=Strategies(measure=timings))
    assert result.report["pieces"] > 1 and timings.pieces
    final = {c["label"]: c for c in result.report["final_candidates"]}
    assert "optimized+joint" in final and final["optimized+joint"]["rejected"] is None


def test_the_device_names_its_profile_executor_streams_and_report_block():
    """``--device`` picks a Device strategy; the CPU's changes nothing (the CPU executor, a stream per core)."""
    from gspo.search.device import CUDA_STREAMS

    cpu, cuda = device_of("cpu"), device_of("cuda", "torch")
    assert isinstance(cpu, CpuDevice) and isinstance(cuda, CudaDevice) and cuda.runtime == "torch"
    assert cpu.executor() is None and cpu.streams(6) == 6 and cuda.streams(6) == CUDA_STREAMS
    assert cpu.report().to_json()["device"] == "cpu" and cpu.profile(None, True).device.startswith("cpu:")
    assert cpu.machine == cpu.report().to_json()["name"] and cpu.machine.startswith("cpu:")


# ------------------------------------------------------------------ the runtime travels on the device
def test_the_runtime_is_read_once_when_the_device_is_made(monkeypatch):
    """``--cuda-runtime``, else ``$GSPO_CUDA_RUNTIME``, else auto, checked when the device is made."""
    monkeypatch.setenv("GSPO_CUDA_RUNTIME", "torch")
    from_env, asked = CudaDevice(), CudaDevice("ort")
    monkeypatch.setenv("GSPO_CUDA_RUNTIME", "ort")
    assert from_env.runtime == "torch" and asked.runtime == "ort" and device_of("cuda").runtime == "ort"
    monkeypatch.delenv("GSPO_CUDA_RUNTIME")
    assert CudaDevice().runtime == "auto" and CudaDevice(" Torch ").runtime == "torch"
    with pytest.raises(GspoError, match=r"^--cuda-runtime takes auto, ort, torch \(got 'tensorrt'\)$"):
        CudaDevice("tensorrt")


def test_the_device_chooses_its_runtime_once_and_its_executors_run_on_it(monkeypatch):
    from gspo.runtime.cuda import choice
    from gspo.runtime.cuda.executor import CudaExecutor

    fakes(monkeypatch)
    probes: list = []
    status = choice._ort_status
    monkeypatch.setattr(choice, "_ort_status", lambda device_id: probes.append(device_id) or status(device_id))
    device = CudaDevice()
    assert device.chosen == "ort" and device.executor().keywords == {"runtime": "ort"}
    g = branchy()
    with device.executor()(g, None) as ex:
        assert type(ex) is CudaExecutor
    assert device.machine == "cuda:Fake GPU 16GB" and device.report().to_json()["runtime"] == "ort"
    assert probes == [0], "the runtime is chosen once per device, not per executor or report"
    torch_asked = CudaDevice("torch")  # the stand-ins refuse torch: its executors are never made on ort
    with pytest.raises(GspoError, match=r"^--device cuda --cuda-runtime torch: ") as refused:
        torch_asked.executor()
    assert torch_asked.report().to_json() == {"device": "cuda", "error": str(refused.value)}
    assert torch_asked.machine == "cuda"


# ------------------------------------------------------------------ whole-model behaviour
def test_the_cpu_places_and_threads_the_whole_model_a_gpu_takes_it_as_it_is():
    """What the device does with the final comparison's pool: the CPU asks the driver to place it
    on the other backends and adds each option at the thread counts worth trying, and keeps time
    for them; a GPU takes the pool as it is and keeps only the final comparison's share."""
    from gspo.runtime.settings import thread_counts
    from gspo.search.report_parts import PlacementReport
    from gspo.timing import Deadline

    g = branchy()
    pool = [Candidate(g, label="original", kind="original")]
    asked: list = []

    def placed(options):
        asked.append([o.label for o in options])
        return options + [Candidate(branchy(seed=1), label="placed", kind="merged")], PlacementReport(["ort", "x"])

    options, report = CpuDevice().whole_model_options(pool, placed, Deadline(None))
    assert asked == [["original"]] and report.backends == ["ort", "x"]
    threaded = [f"{label}[threads={t}]" for label in ("original", "placed") for t in thread_counts()]
    assert [o.label for o in options] == ["original", "placed", *threaded]
    options, report = CudaDevice("ort").whole_model_options(pool, placed, Deadline(None))
    assert options == pool and report.backends == ["cuda"] and len(asked) == 1
    assert CpuDevice().final_reserve(lambda: 3.5) == 3.5 and CudaDevice("ort").final_reserve(lambda: 3.5) == 0.0


@dataclasses.dataclass(frozen=True)
class AsIsCpu(CpuDevice):
    """The CPU with a GPU's whole-model behaviour (the pool as it is, no time kept), noting its calls."""

    calls: list = dataclasses.field(default_factory=list, compare=False)

    def final_reserve(self, estimate):
        self.calls.append("final_reserve")
        return 0.0

    def whole_model_options(self, options, placed, deadline):
        self.calls.append("whole_model_options")
        return options, PlacementReport(["ort"])


def test_optimize_asks_the_device_what_the_final_comparison_measures():
    """The driver branches on no flag: what the device answers is what the final comparison times."""
    device = AsIsCpu()
    result = optimize(branchy(), time_budget=None, jobs=1, timing_runs=5,
                      strategies=Strategies(measure=ScriptedTimings(), device=device))
    assert device.calls == ["final_reserve", "whole_model_options"]
    labels = [c["label"] for c in result.report["final_candidates"]]
    assert "original" in labels and not [x for x in labels if "threads=" in x or "@" in x], labels
    assert result.report["placement"]["backends"] == ["ort"]
