"""Check gspo on an NVIDIA GPU with the PyTorch runtime, in one command, into benchmarks/gpu/.

    python benchmarks/gpu_check.py [-o benchmarks/gpu] [--dry-run] [--steps PART|a,b] [--rehearse]

For the GPU machines gspo is checked on (PyTorch with CUDA, cuda-python, no onnxruntime-gpu, no
network): nothing is installed but gspo itself (``pip install --no-deps -e .``). Steps, each
recorded with its numbers and pass/fail, the report rewritten after every step (a run cut short
keeps what it measured):

  environment  the GPU, driver, torch/CUDA/cuDNN/cuda-python versions, the runtime chosen
  convert      every zoo model (tiny, and the branched ones plus ResNet-50 and BERT at full size,
               batch 1): which runtime ran each piece (torch on the GPU, or onnxruntime's CPU
               provider for an op torch cannot run, with the reason), outputs against
               onnxruntime's CPU provider with TF32 off (gspo's verify criterion)
  streams      the branched models on Nimble's streams (at most 4): outputs against the CPU,
               100 repeats (bit-identical or not, worst difference), per-piece CUDA-event
               timings and the measured stream overlap
  calibrate    a short ``gspo calibrate --gpu NAME`` on the torch runtime: the GPU profile
  figure5      ``gspo optimize --device cuda`` of Inception-v3, NASNet-A Mobile and NasRNN (full
               size, batch 1): joint, rules-only and streams-only, timed interleaved (CUDA
               events, medians) against the model on one stream (plain PyTorch eager on the same
               converted model) and against CUDA-graph replay: the paper's Figure 5 on this GPU
  cost_model   the GPU profile's estimate against the measured time of each partition piece
  cpu16        the same models on the machine's CPU cores: gspo's multi-stream CPU executor
               (Nimble's streams) against onnxruntime at one session of all cores
  cli          ``gspo optimize``, ``gspo run`` and ``gspo bench`` with ``--device cuda
               --cuda-runtime torch`` on NasRNN, and its output through ``gspo.InferenceSession``
  peers1       the peers of the figure5 models (peers2: ResNet-50 and BERT), full size: plain
               PyTorch eager on one stream, the same replayed from a CUDA graph, torch.compile
               "reduce-overhead" and "max-autotune-no-cudagraphs" (replayed from a CUDA graph) of
               the same converted program (benchmarks/gpu/gpu_peers.py), each compile's seconds,
               against gspo's joint result: its time and ratio to the best torch.compile
  precision    ``gspo optimize --device cuda --cuda-runtime torch --precision fp16,bf16,tf32
               --max-error nmse=1e-3`` of ResNet-50, BERT and Inception-v3 (full size, 8+8
               random-input samples): the fp32 median (CUDA graph), TF32's, the pick's, its
               speedup over fp32 and over TF32, its error per output on the validation data, the
               seconds the optimize took (benchmarks/gpu/gpu_precision.py)
  corpusN      real exports of benchmarks/realworld carried without weights (benchmarks/gpu/
               corpus/, filled from a seed): equivalence against onnxruntime's CPU provider, the
               ops that fell back to the CPU and why, eager / CUDA graph / torch.compile
               reduce-overhead / ``gspo optimize --device cuda``'s output, medians

Each part (``--steps check``, the default; ``peers1``, ``peers2``, ``precision``, ``corpus1``, ...) is one GPU
machine's run, estimated under 480 s on an H100; the environment step is run first in every
one. A part's report is named after it (``gpu_check_peers1.md``; ``check`` keeps
``gpu_check.md``). A step stops at its estimated share (its deadline), writing what it has.

``--dry-run`` lists the steps (all of them unless ``--steps`` says) with their estimated seconds
(on an H100), the parts, and ends with ``total: N s``. ``--rehearse`` runs every step on torch's
CPU device with tiny models and short budgets, to check this script before spending GPU time:
its report says so and is never a GPU result.
Exit 0 when every check passed, 1 when one failed (see the report), 2 (one line) where no CUDA
runtime works.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
BRANCHED = ("inception_v3", "nasnet_mobile", "nasrnn")
FULL = BRANCHED + ("resnet50", "bert")
STREAMS = 4
REPEATS = 100
TIME_BUDGET = 20.0  # seconds per gspo optimize (nine of them)
RUNS = 30  # interleaved timed rounds
#: Estimated seconds of each step on an H100 machine (16 cores), torch already imported.
ESTIMATES = {"environment": 15, "convert": 50, "streams": 40, "calibrate": 50, "figure5": 200,
             "cost_model": 20, "cpu16": 40, "cli": 40, "peers1": 450, "peers2": 450, "precision": 420}
#: One GPU machine's run: its steps' estimates add up to less than this.
PART_LIMIT_S = 480
CHECK = ("convert", "streams", "calibrate", "figure5", "cost_model", "cpu16", "cli")
PEERS = {"peers1": ("nasrnn", "inception_v3", "nasnet_mobile"), "peers2": ("resnet50", "bert")}
#: The zoo models whose converted program dynamo is asked about (at tiny size: where it breaks
#: is a matter of the ops, not of the sizes).
EXPLAIN = ("bert", "inception_v3")
#: The last GPU report's profile: the gspo optimize of a part without a calibrate step uses it.
COMMITTED_PROFILE = HERE / "gpu" / "gpu_check_profile.json"
sys.path.insert(0, str(HERE / "gpu"))
import gpu_corpus  # noqa: E402  (benchmarks/gpu/)
import gpu_peers  # noqa: E402
import gpu_precision  # noqa: E402

CORPUS_PARTS = gpu_corpus.parts(gpu_corpus.load_manifest())
ESTIMATES.update({part: gpu_corpus.part_estimate_s(models) for part, models in CORPUS_PARTS.items()})
ABLATIONS = {"joint": {}, "rules_only": {"use_streams": False}, "streams_only": {"use_rules": False}}


class Ctx:
    """What the steps share: options, the report, the work folder."""

    def __init__(self, args, work: Path):
        self.args, self.work, self.out = args, work, Path(args.output)
        self.rehearse = args.rehearse
        self.size_full = "tiny" if args.rehearse else "full"
        self.budget = 4.0 if args.rehearse else args.time_budget
        self.runs = 5 if args.rehearse else RUNS
        self.report: dict = {"rehearsal": args.rehearse, "steps": {}}
        self.profile: Path | None = None
        self.optimized: dict = {}
        self.deadline = float("inf")  # the running step's (time.perf_counter())

    def left(self) -> float:
        """Seconds left in the running step's share."""
        return self.deadline - time.perf_counter()

    def profile_path(self) -> str:
        """The calibrate step's GPU profile, else the committed one of the last GPU run."""
        return str(self.profile if self.profile is not None else COMMITTED_PROFILE)

    def foreign_profile(self) -> bool:
        """Whether optimize takes the committed profile (its torch version may differ from this
        machine's: the measured times decide in the end, the profile only guides the search)."""
        return Path(self.profile_path()) == COMMITTED_PROFILE


# ------------------------------------------------------------------ helpers
def tolerance():
    from gspo.runtime.verify import Tolerance

    return Tolerance()


def compare(ref: dict, got: dict) -> dict:
    """gspo's verify criterion between two output dicts: equivalent, worst abs and rel."""
    from gspo.runtime import compare_outputs

    tol = tolerance()
    r = compare_outputs(ref, got, tol.rtol, tol.atol, tol.ntol)
    return {"ok": bool(r.equivalent), "max_abs": max((d.max_abs for d in r.outputs), default=0.0),
            "norm_rel": max((d.norm_rel for d in r.outputs), default=0.0)}


def cpu_reference(graph, feeds) -> dict:
    from gspo.runtime import make_session, run

    return run(make_session(graph), feeds)


def executor(graph, schedule=None, cuda_graph=False, one_stream=False):
    from gspo.runtime.torchrt.executor import TorchConfig, TorchExecutor

    device = "cpu" if REHEARSAL else "cuda"
    return TorchExecutor(graph, schedule, TorchConfig(device=device, tf32=False, cuda_graph=cuda_graph),
                         one_stream=one_stream)


def timed(ex, feeds):
    from gspo.runtime import timed_runner

    return timed_runner(ex, feeds)


def interleave(runners: list, runs: int, warmup: int = 5) -> dict:
    """Medians (ms) of runners timed in rotating order, one process, CUDA events."""
    from gspo.runtime import interleaved
    from gspo.search.stats import spread

    timings = interleaved(runners, runs=runs, warmup=warmup)
    return {t.label: {"median_ms": t.median * 1e3, "min_ms": t.min * 1e3, "spread": spread(t)} for t in timings}


REHEARSAL = False


def _rehearsal_patches() -> list:
    """--rehearse: the torch runtime on torch's CPU device stands in for the GPU (never reported
    as a GPU result). Returns what to put back (this process's modules are patched)."""
    import functools

    from gspo.runtime.cuda import status as ort_status
    from gspo.runtime.torchrt import executor as torch_executor
    from gspo.runtime.torchrt import status as torch_status_mod

    patches = [(torch_status_mod, "torch_status", lambda device_id=0: (True, "REHEARSAL on torch's CPU device")),
               (torch_status_mod, "torch_versions",
                lambda device_id=0: {"device": "cuda", "runtime": "torch", "name": "REHEARSAL (cpu)"}),
               (ort_status, "gpu_status", lambda config=None: (False, "rehearsal")),
               (torch_executor, "TorchConfig", functools.partial(torch_executor.TorchConfig, device="cpu"))]
    undo = [(module, name, getattr(module, name)) for module, name, _ in patches]
    for module, name, value in patches:
        setattr(module, name, value)
    return undo


# ------------------------------------------------------------------ steps
def step_environment(ctx: Ctx) -> dict:
    import numpy as np
    import onnxruntime
    import torch

    from gspo.runtime.cuda.choice import cuda_runtime, device_block
    from gspo.runtime.torchrt.executor import TorchConfig, torch_flags

    runtime = cuda_runtime("torch")
    block = device_block(runtime)
    with torch_flags(TorchConfig(tf32=False)):  # what the executors' runs set
        tf32 = {"tf32_matmul": torch.backends.cuda.matmul.allow_tf32, "tf32_cudnn": torch.backends.cudnn.allow_tf32}
    return {"ok": runtime == "torch", "runtime": runtime, "device": block, "python": platform.python_version(),
            "cpu_cores": __import__("os").cpu_count(), "numpy": np.__version__, "onnxruntime": onnxruntime.__version__,
            "torch": torch.__version__, **tf32}


def _convert_row(name: str, size: str) -> dict:
    from gspo.runtime import random_inputs
    from gspo.zoo import build

    g = build(name, size)
    feeds = random_inputs(g, seed=0)
    row: dict = {"model": name, "size": size, "nodes": len(g.nodes)}
    ref = cpu_reference(g, feeds)
    with executor(g) as ex:
        row["runtime"] = ex.providers()
        row["fallbacks"] = [str(f) for _, f in ex.fallbacks]
        row["ops"] = sorted({n.op_type for n in g.nodes})
        row["vs_cpu"] = compare(ref, ex.run(feeds))
    row["ok"] = row["vs_cpu"]["ok"]
    return row


def step_convert(ctx: Ctx) -> dict:
    from gspo.zoo import MODELS

    rows = [_convert_row(name, "tiny") for name in MODELS]
    if not ctx.rehearse:
        rows += [_convert_row(name, "full") for name in FULL]
    on_cpu = sorted({f for r in rows for f in r["fallbacks"]})
    return {"ok": all(r["ok"] for r in rows), "models": rows, "ops_on_cpu": on_cpu}


def _streams_row(name: str, ctx: Ctx) -> dict:
    import numpy as np

    from gspo.runtime import random_inputs
    from gspo.runtime.cuda.executor import stream_overlap
    from gspo.streams import assign_streams
    from gspo.zoo import build

    g = build(name, ctx.size_full)
    feeds = random_inputs(g, seed=0)
    schedule = assign_streams(g, max_streams=STREAMS)
    ref = cpu_reference(g, feeds)
    row: dict = {"model": name, "streams": schedule.num_streams, "syncs": len(schedule.events)}
    with executor(g, schedule) as ex:
        row["segments"] = len(ex.plan.segments)
        first = ex.run(feeds)
        row["vs_cpu"] = compare(ref, first)
        values = ex.upload(feeds)
        identical, worst = True, 0.0
        for _ in range(REPEATS if not ctx.rehearse else 5):
            out = ex.run_device(values)
            again = {k: out[k].float().cpu().numpy() if out[k].is_floating_point() else out[k].cpu().numpy()
                     for k in ex.outputs}
            identical &= all(np.array_equal(again[k], first[k]) for k in again)
            worst = max(worst, compare(first, again)["max_abs"])
        row["repeats"] = {"runs": REPEATS, "bit_identical": identical, "max_abs_vs_first": worst}
        if not ctx.rehearse:
            for _ in range(5):
                ex.time_run(values)
            total, pieces = ex.time_run(values)
            busy = sum(p.end_ms - p.start_ms for p in pieces)
            row["event_timing"] = {"total_ms": total * 1e3, "overlap_ms": stream_overlap(pieces),
                                   "busy_ms": busy, "pieces": [vars(p) for p in pieces]}
    row["graphs"] = _graph_rows(g, schedule, feeds, ref, ctx)
    row["ok"] = (row["vs_cpu"]["ok"] and worst <= tolerance().atol
                 and all(v["ok"] for v in row["graphs"]["vs_cpu"].values()))
    return row


def _graph_rows(g, schedule, feeds, ref, ctx) -> dict:
    """One stream and Nimble's streams, eager and replayed from a CUDA graph, timed interleaved."""
    built = {"eager_one_stream": executor(g), "eager_streams": executor(g, schedule),
             "graph_one_stream": executor(g, cuda_graph=True), "graph_streams": executor(g, schedule, cuda_graph=True)}
    try:
        out = {"vs_cpu": {label: compare(ref, ex.run(feeds)) for label, ex in built.items()},
               "graph_refusal": {label: ex.graph_refusal for label, ex in built.items() if ex.graph_refusal}}
        times = interleave([(label, timed(ex, feeds)) for label, ex in built.items()], ctx.runs)
    finally:
        for ex in built.values():
            ex.close()
    out["median_ms"] = {k: v["median_ms"] for k, v in times.items()}
    out["spread"] = {k: v["spread"] for k, v in times.items()}
    return out


def step_streams(ctx: Ctx) -> dict:
    rows = [_streams_row(name, ctx) for name in BRANCHED]
    return {"ok": all(r["ok"] for r in rows), "models": rows}


def step_calibrate(ctx: Ctx) -> dict:
    from gspo.cli import cli

    out = ctx.work / "gpu-check.json"
    args = ["calibrate", "--gpu", "gpu-check", "--cuda-runtime", "torch", "--budget", "0.25" if ctx.rehearse else "0.6",
            "--passes", "1", "-o", str(out), "--db", str(ctx.work / "calibration.sqlite")]
    start = time.perf_counter()
    try:
        cli.main(args, standalone_mode=False)
        error = None
    except SystemExit as e:
        error = None if not e.code else f"exit {e.code}"
    seconds = time.perf_counter() - start
    ok = out.exists() and error is None
    result = {"ok": ok, "command": "gspo " + " ".join(args[:-4]), "seconds": round(seconds, 1), "error": error}
    if ok:
        ctx.profile = out
        if not ctx.rehearse:
            ctx.out.mkdir(parents=True, exist_ok=True)
            (ctx.out / f"{ctx.args.name}_profile.json").write_text(out.read_text())
        data = json.loads(out.read_text())
        result["profile"] = {k: data.get(k) for k in ("device", "runtime", "reference_s") if k in data}
        result["profile_json"] = data
    return result


def _optimize(ctx: Ctx, name: str, path: Path, kind: str) -> tuple[dict, object]:
    import gspo

    start = time.perf_counter()
    res = gspo.optimize(str(path), device="cuda", cuda_runtime="torch", profile=str(ctx.profile),
                        time_budget=ctx.budget, seed=0, force_profile=ctx.foreign_profile(), **ABLATIONS[kind])
    r = res.report
    row = {"seconds": round(time.perf_counter() - start, 1), "chosen": r.chosen, "streams": r.streams,
           "syncs": r.syncs, "rules": r.substitutions, "speedup_in_optimize": r.speedup, "verdict": r.verdict,
           "max_rel_err": r.max_rel_err, "cpu_fallback": r["device"].get("cpu_fallback")}
    return row, res


def _figure5_row(ctx: Ctx, name: str) -> dict:
    from gspo.ir import save
    from gspo.runtime import random_inputs
    from gspo.zoo import build

    g = build(name, ctx.size_full)
    path = ctx.work / f"{name}.onnx"
    save(g, path)
    row: dict = {"model": name}
    results = {}
    for kind in ABLATIONS:
        try:
            row[kind], results[kind] = _optimize(ctx, name, path, kind)
        except Exception as e:  # one failed ablation is recorded, the others still run
            row[kind] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
    feeds = random_inputs(g, seed=1)  # not the inputs optimize verified on
    ref = cpu_reference(g, feeds)
    built = {"eager_one_stream": executor(g), "cuda_graph": executor(g, cuda_graph=True)}
    for kind, res in results.items():
        built[f"{kind}_eager"] = executor(res.graph, res.schedule)
        built[kind] = executor(res.graph, res.schedule, cuda_graph=True)
    try:
        row["vs_cpu"] = {label: compare(ref, ex.run(feeds)) for label, ex in built.items()}
        row["graph_refusal"] = {label: ex.graph_refusal for label, ex in built.items() if ex.graph_refusal}
        times = interleave([(label, timed(ex, feeds)) for label, ex in built.items()], ctx.runs)
    finally:
        for ex in built.values():
            ex.close()
    base, graph = times["eager_one_stream"]["median_ms"], times["cuda_graph"]["median_ms"]
    row["median_ms"] = {k: v["median_ms"] for k, v in times.items()}
    row["spread"] = {k: v["spread"] for k, v in times.items()}
    row["speedup_over_eager"] = {k: base / v["median_ms"] for k, v in times.items()}
    row["speedup_over_cuda_graph"] = {k: graph / v["median_ms"] for k, v in times.items()}
    row["ok"] = len(results) == len(ABLATIONS) and all(v["ok"] for v in row["vs_cpu"].values())
    ctx.optimized[name] = results
    return row


def step_figure5(ctx: Ctx) -> dict:
    if ctx.profile is None:
        return {"ok": False, "skipped": "no GPU profile: the calibrate step failed or did not run"}
    rows = []
    for name in BRANCHED:
        try:
            rows.append(_figure5_row(ctx, name))
        except Exception as e:
            rows.append({"model": name, "ok": False, "error": f"{type(e).__name__}: {e}",
                         "traceback": traceback.format_exc()[-3000:]})
    return {"ok": all(r["ok"] for r in rows), "models": rows, "time_budget_s": ctx.budget, "runs": ctx.runs}


def step_cost_model(ctx: Ctx) -> dict:
    if ctx.profile is None:
        return {"ok": False, "skipped": "no GPU profile"}
    from gspo.costmodel import CostModel, load_profile
    from gspo.partition import partition
    from gspo.runtime import median_seconds, random_inputs
    from gspo.runtime.bench import Repeats
    from gspo.zoo import build

    model = CostModel(load_profile(str(ctx.profile), None, None, force=True))
    rows = []
    for name in BRANCHED:
        g = build(name, ctx.size_full)
        for k, piece in enumerate(partition(g).pieces[:12]):
            feeds = random_inputs(piece.graph, seed=0)
            with executor(piece.graph, cuda_graph=True) as ex:
                measured = median_seconds(timed(ex, feeds), Repeats(min_runs=5, max_runs=20, target_s=0.05))
            estimated = model.cost(piece.graph)
            rows.append({"model": name, "piece": k, "nodes": len(piece.graph.nodes), "measured_ms": measured * 1e3,
                         "estimated_ms": estimated * 1e3, "rel_err": abs(estimated - measured) / measured})
    errs = sorted(r["rel_err"] for r in rows)
    return {"ok": bool(rows), "pieces": rows, "mape": statistics.mean(errs) if errs else None,
            "median_rel_err": statistics.median(errs) if errs else None, "spearman": _spearman(rows)}


def _spearman(rows: list) -> float | None:
    """Spearman's rank correlation of the estimates with the measured times (as calibrate --evaluate)."""
    if len(rows) < 3:
        return None
    from scipy.stats import spearmanr

    return float(spearmanr([r["estimated_ms"] for r in rows], [r["measured_ms"] for r in rows]).statistic)


def step_cpu16(ctx: Ctx) -> dict:
    import os

    from gspo.runtime import CpuExecutor, SessionConfig, random_inputs
    from gspo.streams import assign_streams
    from gspo.zoo import build

    cores = os.cpu_count() or 1
    rows = []
    for name in BRANCHED:
        g = build(name, ctx.size_full)
        feeds = random_inputs(g, seed=0)
        schedule = assign_streams(g, max_streams=STREAMS)
        per_stream = max(1, cores // max(1, schedule.num_streams))
        ref = CpuExecutor(g, None, SessionConfig(intra_op_threads=cores))
        multi = CpuExecutor(g, schedule, SessionConfig(intra_op_threads=per_stream))
        try:
            same = compare(ref.run(feeds), multi.run(feeds))
            times = interleave([(f"onnxruntime_{cores}_threads", timed(ref, feeds)),
                                (f"gspo_{schedule.num_streams}_streams_x_{per_stream}_threads", timed(multi, feeds))],
                               ctx.runs, warmup=3)
        finally:
            ref.close()
            multi.close()
        medians = {k: v["median_ms"] for k, v in times.items()}
        a, b = medians.values()
        rows.append({"model": name, "cores": cores, "streams": schedule.num_streams, "median_ms": medians,
                     "speedup_over_onnxruntime": a / b, "vs_onnxruntime": same, "ok": same["ok"]})
    return {"ok": all(r["ok"] for r in rows), "models": rows}


def _cli(args: list[str]) -> dict:
    """One gspo command, in this process (its patches, its CUDA context): exit code, output tail, seconds."""
    from click.testing import CliRunner

    from gspo.cli import cli

    start = time.perf_counter()
    done = CliRunner().invoke(cli, [str(a) for a in args])
    row = {"command": "gspo " + " ".join(str(a) for a in args), "exit": done.exit_code,
           "seconds": round(time.perf_counter() - start, 1), "output": done.output[-3000:]}
    if done.exception is not None and not isinstance(done.exception, SystemExit):
        row["exception"] = f"{type(done.exception).__name__}: {done.exception}"
    return row


def step_cli(ctx: Ctx) -> dict:
    """The commands and the deploy API on the GPU: optimize, run, bench, InferenceSession."""
    if ctx.profile is None:
        return {"ok": False, "skipped": "no GPU profile: the calibrate step failed or did not run"}
    import numpy as np

    from gspo.ir import save
    from gspo.runtime import random_inputs
    from gspo.runtime.deploy import InferenceSession
    from gspo.zoo import build

    g = build("nasrnn", ctx.size_full)
    work = ctx.work / "cli"  # its own folder: figure5 leaves its own nasrnn.onnx in ctx.work
    work.mkdir(exist_ok=True)
    model, out, report = work / "nasrnn.onnx", work / "nasrnn_gspo.onnx", work / "report.json"
    save(g, model)
    cuda = ["--device", "cuda", "--cuda-runtime", "torch"]
    rows = [_cli(["optimize", model, "-o", out, *cuda, "--profile", ctx.profile, "--time-budget", ctx.budget,
                  "--report", report, "--force"])]
    result: dict = {"commands": rows}
    if rows[0]["exit"] == 0:
        r = json.loads(report.read_text())
        result["optimize"] = {k: r.get(k) for k in ("chosen", "streams", "syncs", "speedup", "verdict", "device")}
        rows.append(_cli(["run", out, *cuda]))
        rows.append(_cli(["bench", model, out, *cuda, "--streams", "1,auto", "--runs", "30", "--json"]))
        feeds = random_inputs(g, seed=2)
        ref = cpu_reference(g, feeds)
        with InferenceSession(str(out), device="cuda", cuda_runtime="torch") as sess:
            got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
            result["inference_session"] = {"streams": sess.num_streams, "vs_cpu": compare(ref, got),
                                           "finite": bool(all(np.isfinite(v).all() for v in got.values()))}
    result["ok"] = (all(r["exit"] == 0 for r in rows) and len(rows) == 3
                    and result.get("inference_session", {}).get("vs_cpu", {}).get("ok", False))
    return result


# ------------------------------------------------------------------ peers and the corpus
def _compile_cost(ctx: Ctx, nodes: int):
    scale = 3.0 if ctx.rehearse else 1.0  # inductor's C++ backend on a few CPU cores is slower
    return lambda mode: scale * gpu_corpus.compile_cost_s(nodes, mode)


def _peer_runs(ctx: Ctx, built: dict, peers: dict, feeds: dict, args: list, program, ref: dict, row: dict) -> None:
    """Outputs against the CPU and interleaved medians of the executors ``built`` and the compiled
    ``peers`` into ``row``."""
    dev = gpu_peers.device_of(ctx.rehearse)
    row["vs_cpu"] = {label: compare(ref, ex.run(feeds)) for label, ex in built.items()}
    row["vs_cpu"].update({label: compare(ref, gpu_peers.outputs(fn, args, program.outputs, mode))
                          for label, (fn, mode) in peers.items()})
    row["graph_refusal"] = {label: ex.graph_refusal for label, ex in built.items() if ex.graph_refusal}
    runners = [(label, timed(ex, feeds)) for label, ex in built.items()]
    runners += [(label, gpu_peers.runner(fn, args, dev, mode)) for label, (fn, mode) in peers.items()]
    times = interleave(runners, ctx.runs)
    row["median_ms"] = {k: v["median_ms"] for k, v in times.items()}
    row["spread"] = {k: v["spread"] for k, v in times.items()}
    best = min((v for k, v in row["median_ms"].items() if k.startswith("compile_")), default=None)
    mine = row["median_ms"].get("gspo")
    row["best_compile_ms"] = best
    row["gspo_over_best_compile"] = best / mine if best and mine else None  # > 1: gspo's output is faster


def _joint(ctx: Ctx, name: str, g):
    """gspo's joint result for a zoo model: figure5's of this run, else optimized now."""
    from gspo.ir import save

    done = ctx.optimized.get(name, {}).get("joint")
    if done is not None:
        return {"from": "figure5"}, done
    path = ctx.work / f"peers_{name}.onnx"
    save(g, path)
    if ctx.profile is None:
        ctx.profile = COMMITTED_PROFILE
    row, res = _optimize(ctx, name, path, "joint")
    return row, res


def _peers_row(ctx: Ctx, name: str, modes) -> dict:
    import torch

    from gspo.runtime import random_inputs
    from gspo.runtime.torchrt.convert import convert
    from gspo.zoo import build

    torch._dynamo.reset()
    dev = gpu_peers.device_of(ctx.rehearse)
    g = build(name, ctx.size_full)
    row: dict = {"model": name, "size": ctx.size_full, "nodes": len(g.nodes)}
    if name in EXPLAIN and ctx.left() > 60:
        tiny = build(name, "tiny")
        small = convert(tiny, dev)
        row["dynamo_on_program"] = gpu_peers.where_dynamo_breaks(small, gpu_peers.inputs_on(
            small, random_inputs(tiny, seed=0), dev))
        torch._dynamo.reset()
    row["optimize"], res = _joint(ctx, name, g)
    feeds = random_inputs(g, seed=1)  # not the inputs optimize verified on
    ref = cpu_reference(g, feeds)
    program = convert(g, dev)
    args = gpu_peers.inputs_on(program, feeds, dev)
    info = gpu_peers.build_peers(program, args, dev, modes, ctx.left, _compile_cost(ctx, len(g.nodes)))
    peers = info.pop("peers")
    row["torch_compile"] = info
    built = {"eager_one_stream": executor(g), "cuda_graph": executor(g, cuda_graph=True),
             "gspo": executor(res.graph, res.schedule, cuda_graph=True)}
    try:
        _peer_runs(ctx, built, peers, feeds, args, program, ref, row)
    finally:
        for ex in built.values():
            ex.close()
    row["ok"] = all(v["ok"] for v in row["vs_cpu"].values())
    return row


def step_peers(ctx: Ctx, part: str = "peers1") -> dict:
    """torch.compile and the model on one stream, eager and from a CUDA graph, against gspo's joint result."""
    rows = []
    for name in PEERS[part]:
        if rows and ctx.left() < 30:
            rows.append({"model": name, "ok": False, "skipped": f"deadline: {ctx.left():.0f} s left"})
            continue
        try:
            rows.append(_peers_row(ctx, name, gpu_peers.MODES))
        except Exception as e:
            rows.append({"model": name, "ok": False, "error": f"{type(e).__name__}: {e}",
                         "traceback": traceback.format_exc()[-3000:]})
    return {"ok": all(r["ok"] for r in rows), "models": rows, "profile": ctx.profile_path(), "runs": ctx.runs,
            "modes": list(gpu_peers.MODES)}


def _filled(ctx: Ctx, entry: dict):
    """A corpus skeleton filled from its seed, saved in the work folder, and loaded: (path, graph)."""
    import onnx
    import skeleton

    from gspo.ir import load

    model = skeleton.fill(skeleton.load_skeleton(gpu_corpus.CORPUS / entry["skeleton"]))
    path = ctx.work / f"corpus_{entry['name']}.onnx"
    onnx.save(model, str(path))
    return path, load(path, entry.get("input_shapes"))


def _corpus_optimize(ctx: Ctx, entry: dict, path: Path):
    import gspo

    start = time.perf_counter()
    res = gspo.optimize(str(path), device="cuda", cuda_runtime="torch", profile=ctx.profile_path(),
                        force_profile=ctx.foreign_profile(), time_budget=2.0 if ctx.rehearse else gpu_corpus.OPTIMIZE_BUDGET, seed=0,
                        input_shapes=entry.get("input_shapes"))
    r = res.report
    return {"seconds": round(time.perf_counter() - start, 1), "chosen": r.chosen, "streams": r.streams,
            "rules": r.substitutions, "verdict": r.verdict}, res


def _corpus_row(ctx: Ctx, entry: dict) -> dict:
    import torch

    from gspo.runtime import random_inputs
    from gspo.runtime.torchrt.convert import convert

    torch._dynamo.reset()
    dev = gpu_peers.device_of(ctx.rehearse)
    path, g = _filled(ctx, entry)
    row: dict = {"model": entry["name"], "exporter": entry.get("exporter"), "nodes": len(g.nodes)}
    feeds = random_inputs(g, seed=1)
    ref = cpu_reference(g, feeds)
    program = convert(g, dev)
    row["fallbacks"] = [str(f) for f in program.fallbacks]
    args = gpu_peers.inputs_on(program, feeds, dev)
    info = gpu_peers.build_peers(program, args, dev, gpu_peers.MODES[:1], ctx.left, _compile_cost(ctx, len(g.nodes)))
    peers = info.pop("peers")
    row["torch_compile"] = info
    built = {"eager_one_stream": executor(g), "cuda_graph": executor(g, cuda_graph=True)}
    try:
        row["optimize"], res = _corpus_optimize(ctx, entry, path)
        built["gspo"] = executor(res.graph, res.schedule, cuda_graph=True)
    except Exception as e:  # recorded; the peers are still timed
        row["optimize"] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
    try:
        _peer_runs(ctx, built, peers, feeds, args, program, ref, row)
    finally:
        for ex in built.values():
            ex.close()
    row["equivalent"] = row["vs_cpu"]["eager_one_stream"]["ok"]
    row["ok"] = all(v["ok"] for v in row["vs_cpu"].values()) and "error" not in row["optimize"]
    return row


def step_corpus(ctx: Ctx, part: str = "corpus1") -> dict:
    """Real exports carried without weights: equivalence, CPU fallbacks, eager / CUDA graph / torch.compile / gspo."""
    rows = []
    for entry in CORPUS_PARTS.get(part, []):
        if rows and ctx.left() < entry["estimate_s"] / (1 if not ctx.rehearse else 3):
            rows.append({"model": entry["name"], "ok": False, "skipped": f"deadline: {ctx.left():.0f} s left"})
            continue
        try:
            rows.append(_corpus_row(ctx, entry))
        except Exception as e:
            rows.append({"model": entry["name"], "ok": False, "error": f"{type(e).__name__}: {e}",
                         "traceback": traceback.format_exc()[-3000:]})
    return {"ok": bool(rows) and all(r["ok"] for r in rows), "models": rows, "profile": ctx.profile_path(),
            "optimize_budget_s": gpu_corpus.OPTIMIZE_BUDGET, "runs": ctx.runs}


STEPS = {"environment": step_environment, "convert": step_convert, "streams": step_streams,
         "calibrate": step_calibrate, "figure5": step_figure5, "cost_model": step_cost_model, "cpu16": step_cpu16, "cli": step_cli}
STEPS.update({part: functools.partial(step_peers, part=part) for part in PEERS})


def step_precision(ctx: Ctx) -> dict:
    """Reduced precision on the GPU: fp16, bf16, TF32 within nmse=1e-3 against fp32 and TF32."""
    check = types.SimpleNamespace(cpu_reference=cpu_reference, executor=executor, compare=compare,
                                  interleave=interleave, timed=timed)
    return gpu_precision.step_precision(ctx, check)


STEPS["precision"] = step_precision
STEPS.update({part: functools.partial(step_corpus, part=part) for part in CORPUS_PARTS})
#: What one GPU machine runs (``--steps PART``): the environment step first, then these.
PARTS = {"check": CHECK, **{part: (part,) for part in (*PEERS, "precision", *CORPUS_PARTS)}}


# ------------------------------------------------------------------ report
def _ms(row: dict, label: str) -> str:
    v = row.get("median_ms", {}).get(label)
    return f"{v:.3f}" if v is not None else "-"


def _ratio(v) -> str:
    return f"{v:.2f}x" if v else "-"


def _peers_md(step: dict) -> list[str]:
    labels = ["eager_one_stream", "cuda_graph", "compile_reduce_overhead", "compile_max_autotune_no_cudagraphs_graph",
              "gspo"]
    lines = ["", "## Peers: torch.compile of the same converted program, TF32 off: median ms", "",
             "`compile_*`: torch.compile of the torch runtime's program traced to one FX graph (make_fx); "
             "max-autotune-no-cudagraphs replayed from a CUDA graph; `gspo`: gspo's joint result replayed from a "
             "CUDA graph; `gspo vs best compile` > 1: gspo's is faster.", "",
             "| model | " + " | ".join(labels) + " | gspo vs best compile | compile s |", "|---" * (len(labels) + 3) + "|"]
    for r in step["models"]:
        if "median_ms" not in r:
            lines.append(f"| {r['model']} | " + (r.get("error") or r.get("skipped") or "failed")[:200] + " |")
            continue
        secs = ", ".join(f"{k} {v}" for k, v in r.get("torch_compile", {}).get("compile_s", {}).items()) or "-"
        lines.append(f"| {r['model']} | " + " | ".join(_ms(r, k) for k in labels)
                     + f" | {_ratio(r.get('gspo_over_best_compile'))} | {secs} |")
    notes = [f"- {r['model']}: dynamo on the program itself: {r['dynamo_on_program']}" for r in step["models"]
             if "dynamo_on_program" in r]
    notes += [f"- {r['model']}: {what}: {why}" for r in step["models"]
              for what, why in {**r.get("torch_compile", {}).get("skipped", {}),
                                **r.get("torch_compile", {}).get("refused", {})}.items()]
    return lines + ([""] + notes if notes else [])


def _corpus_md(name: str, step: dict) -> list[str]:
    labels = ["eager_one_stream", "cuda_graph", "compile_reduce_overhead", "gspo"]
    lines = ["", f"## The corpus on the GPU ({name}): real exports, weights filled from a seed, median ms", "",
             "`equivalent`: the torch runtime on the GPU against onnxruntime's CPU provider on the same filled "
             "model, TF32 off; `gspo`: `gspo optimize --device cuda`'s output replayed from a CUDA graph.", "",
             "| model | exporter | nodes | equivalent | ops on the CPU | " + " | ".join(labels)
             + " | gspo vs compile |", "|---" * (len(labels) + 6) + "|"]
    for r in step["models"]:
        if "median_ms" not in r:
            lines.append(f"| {r['model']} | " + (r.get("error") or r.get("skipped") or "failed")[:200] + " |")
            continue
        lines.append(f"| {r['model']} | {r.get('exporter')} | {r['nodes']} | {r.get('equivalent')} | "
                     f"{len(r.get('fallbacks', []))} | " + " | ".join(_ms(r, k) for k in labels)
                     + f" | {_ratio(r.get('gspo_over_best_compile'))} |")
    notes = [f"- {r['model']}: on the CPU: {f}" for r in step["models"] for f in r.get("fallbacks", [])[:5]]
    notes += [f"- {r['model']}: CUDA graph of {k}: {v}" for r in step["models"]
              for k, v in r.get("graph_refusal", {}).items()]
    notes += [f"- {r['model']}: {what}: {why}" for r in step["models"]
              for what, why in {**r.get("torch_compile", {}).get("skipped", {}),
                                **r.get("torch_compile", {}).get("refused", {}),
                                **({"optimize": r["optimize"]["error"]} if "error" in r.get("optimize", {}) else {})
                                }.items()]
    return lines + ([""] + notes if notes else [])


def markdown(report: dict) -> str:
    """The report as tables (what the README and docs/gpu.md quote)."""
    steps = report["steps"]
    env = steps.get("environment", {})
    dev = env.get("device", {})
    lines = [f"# gspo on a GPU: {dev.get('name', '?')}" + (" (REHEARSAL on the CPU, not a GPU result)"
                                                          if report.get("rehearsal") else ""), "",
             f"Measured {report.get('date', '?')} with `{report.get('command', '')}`: torch {env.get('torch')}"
             f" (CUDA {dev.get('torch_cuda')}, cuDNN {dev.get('cudnn')}), driver {dev.get('driver')}"
             f" (CUDA {dev.get('driver_cuda')}), cuda-python {dev.get('cuda_python')}, runtime {env.get('runtime')},"
             f" TF32 off, {env.get('cpu_cores')} CPU cores.", "",
             "| step | ok | seconds |", "|---|---|---|"]
    lines += [f"| {k} | {v.get('ok')} | {v.get('seconds')} |" for k, v in steps.items()]
    conv = steps.get("convert", {})
    if conv.get("models"):
        lines += ["", "## Outputs against onnxruntime's CPU provider (TF32 off)", "",
                  "| model | size | nodes | equivalent | max abs | ops on the CPU |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['model']} | {r['size']} | {r['nodes']} | {r['vs_cpu']['ok']} | {r['vs_cpu']['max_abs']:.2e} "
                  f"| {len(r['fallbacks'])} |" for r in conv["models"]]
    st = steps.get("streams", {})
    if st.get("models"):
        lines += ["", f"## Nimble's streams (at most {STREAMS}): repeats and overlap", "",
                  "| model | streams | segments | equivalent | 100 runs bit-identical | run ms | overlap ms |",
                  "|---|---|---|---|---|---|---|"]
        for r in st["models"]:
            ev = r.get("event_timing", {})
            lines.append(f"| {r['model']} | {r['streams']} | {r['segments']} | {r['vs_cpu']['ok']} | "
                         f"{r['repeats']['bit_identical']} | {ev.get('total_ms', float('nan')):.3f} | "
                         f"{ev.get('overlap_ms', float('nan')):.3f} |")
    if st.get("models") and all("graphs" in r for r in st["models"]):
        labels = ["eager_one_stream", "eager_streams", "graph_one_stream", "graph_streams"]
        lines += ["", "## Nimble's streams, eager and replayed from a CUDA graph: median ms", "",
                  "| model | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
        lines += [f"| {r['model']} | " + " | ".join(f"{r['graphs']['median_ms'][k]:.3f}" for k in labels) + " |"
                  for r in st["models"]]
    f5 = steps.get("figure5", {})
    if f5.get("models"):
        labels = ["eager_one_stream", "cuda_graph", "rules_only", "streams_only", "joint"]
        lines += ["", "## Figure 5 on this GPU: median ms (speedup over the model on one stream, CUDA-graph replay)",
                  "", "gspo's outputs replayed from CUDA graphs as the torch runtime runs them; "
                  "`eager_one_stream`: plain PyTorch eager on the same converted model.", "",
                  "| model | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
        for r in f5["models"]:
            if "median_ms" not in r:
                lines.append(f"| {r['model']} | " + r.get("error", "failed") + " |")
                continue
            cells = [f"{r['median_ms'][k]:.3f} ({r['speedup_over_cuda_graph'][k]:.2f}x)" if k in r["median_ms"]
                     else "-" for k in labels]
            lines.append(f"| {r['model']} | " + " | ".join(cells) + " |")
        lines += ["", "| model | ablation | chosen | streams | rules | optimize s |", "|---|---|---|---|---|---|"]
        for r in f5["models"]:
            for kind in ABLATIONS:
                o = r.get(kind, {})
                lines.append(f"| {r['model']} | {kind} | {o.get('chosen', o.get('error', '-'))} | {o.get('streams', '-')} "
                             f"| {sum((o.get('rules') or {}).values())} | {o.get('seconds', '-')} |")
    cm = steps.get("cost_model", {})
    if cm.get("pieces"):
        lines += ["", f"## Cost model on GPU pieces: {len(cm['pieces'])} pieces, mean relative error "
                      f"{100 * cm['mape']:.1f}%, median {100 * cm['median_rel_err']:.1f}%, Spearman {cm['spearman']}"]
    cl = steps.get("cli", {})
    if cl.get("commands"):
        lines += ["", "## The commands on the GPU", "", "| command | exit | seconds |", "|---|---|---|"]
        lines += [f"| `{r['command']}` | {r['exit']} | {r['seconds']} |" for r in cl["commands"]]
        if "inference_session" in cl:
            s = cl["inference_session"]
            lines += ["", f"gspo.InferenceSession(device='cuda'): {s['streams']} streams, equivalent to onnxruntime's "
                          f"CPU outputs: {s['vs_cpu']['ok']} (max abs {s['vs_cpu']['max_abs']:.2e})"]
    c16 = steps.get("cpu16", {})
    if c16.get("models"):
        lines += ["", "## The CPU cores: gspo's multi-stream CPU executor against onnxruntime", "",
                  "| model | cores | streams | median ms | speedup over onnxruntime |", "|---|---|---|---|---|"]
        lines += [f"| {r['model']} | {r['cores']} | {r['streams']} | "
                  + ", ".join(f"{k} {v:.2f}" for k, v in r["median_ms"].items())
                  + f" | {r['speedup_over_onnxruntime']:.3f} |" for r in c16["models"]]
    for name, step in steps.items():
        if name.startswith("peers") and step.get("models"):
            lines += _peers_md(step)
        elif name.startswith("corpus") and step.get("models"):
            lines += _corpus_md(name, step)
        elif name == "precision" and step.get("models"):
            lines += gpu_precision.markdown(step)
    return "\n".join(lines) + "\n"


def write(report: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    stem = ("rehearsal_" if report.get("rehearsal") else "") + report.get("name", "gpu_check")
    if report.get("rehearsal") and stem == "rehearsal_gpu_check":
        stem = "rehearsal"
    (out / f"{stem}.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    (out / f"{stem}.md").write_text(markdown(report))


def dry_run(steps: list[str]) -> int:
    for name in steps:
        step = STEPS[name]
        doc = (step.func if isinstance(step, functools.partial) else step).__doc__ or _summary(name)
        models = PEERS.get(name) or (gpu_precision.MODELS if name == "precision" else
                                     [m["name"] for m in CORPUS_PARTS.get(name, [])])
        print(f"{name:<12} ~{ESTIMATES[name]:>4} s  {doc}" + (f" [{', '.join(models)}]" if models else ""))
    chosen = [(part, ESTIMATES["environment"] + sum(ESTIMATES[s] for s in members))
              for part, members in PARTS.items() if set(members) & set(steps)]
    print(f"parts (one GPU machine each, under {PART_LIMIT_S} s): "
          + "; ".join(f"--steps {part} ~{seconds} s" for part, seconds in chosen))
    print(f"total: {sum(ESTIMATES[s] for s in steps)} s")
    return 0


def selected(spec: str) -> list[str]:
    """The steps ``--steps`` names (steps and parts), in their order, the environment first."""
    steps = ["environment"]
    for item in (s for s in spec.split(",") if s):
        for name in PARTS.get(item, (item,)):
            if name not in steps:
                steps.append(name)
    return steps


def default_name(steps: list[str]) -> str:
    """The report's name: gpu_check for the check part's steps, gpu_check_PART... otherwise."""
    rest = [s for s in steps if s not in CHECK and s != "environment"]
    return "_".join(["gpu_check", *rest])


def _summary(name: str) -> str:
    for line in __doc__.splitlines():
        if line.strip().startswith(name + " ") or name.startswith("corpus") and line.strip().startswith("corpusN "):
            return line.strip()[len(name):].strip()
    return ""


def main(argv=None) -> int:
    global REHEARSAL
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", default=str(HERE / "gpu"), help="folder of the report [benchmarks/gpu]")
    parser.add_argument("--steps", default=None, help="comma-separated steps or parts (" + ", ".join(PARTS)
                        + ", all) [check; the dry run: all]")
    parser.add_argument("--time-budget", type=float, default=TIME_BUDGET, help="seconds per gspo optimize")
    parser.add_argument("--dry-run", action="store_true", help="list the steps and their estimated seconds")
    parser.add_argument("--name", default=None,
                        help="the report's file name, without extension [gpu_check, gpu_check_PART for a part]")
    parser.add_argument("--rehearse", action="store_true", help="run on torch's CPU device (not a GPU result)")
    args = parser.parse_args(argv)
    args.steps = args.steps or ("all" if args.dry_run else "check")
    if args.steps == "all":
        args.steps = ",".join(STEPS)
    unknown = [s for s in args.steps.split(",") if s and s not in STEPS and s not in PARTS]
    if unknown:
        print(f"gpu_check: unknown step {unknown[0]!r} (steps: {', '.join(STEPS)}; parts: {', '.join(PARTS)})",
              file=sys.stderr)
        return 2
    steps = selected(args.steps)
    args.name = args.name or default_name(steps)
    if args.dry_run:
        return dry_run(steps)
    REHEARSAL = args.rehearse
    undo = []
    if REHEARSAL:
        undo = _rehearsal_patches()
    else:
        from gspo.runtime.torchrt.status import torch_status

        ok, why = torch_status()
        if not ok:
            print(f"gpu_check: the torch runtime cannot run on a GPU here: {why}", file=sys.stderr)
            return 2
    try:
        return _run(args, steps, argv)
    finally:
        for module, name, value in undo:
            setattr(module, name, value)


def _run(args, steps: list[str], argv) -> int:
    out = Path(args.output)
    with tempfile.TemporaryDirectory() as d:
        ctx = Ctx(args, Path(d))
        ctx.report.update(name=args.name, date=time.strftime("%Y-%m-%d"), command="python benchmarks/gpu_check.py "
                          + " ".join(argv if argv is not None else sys.argv[1:]), estimates=ESTIMATES)
        started = time.perf_counter()
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(ctx.work / "inductor"))  # compiles measured cold
        for name in steps:
            t0 = time.perf_counter()
            ctx.deadline = t0 + ESTIMATES[name] * (3 if ctx.rehearse else 1)
            print(f"gpu_check: {name} (~{ESTIMATES[name]} s) ...", flush=True)
            try:
                result = STEPS[name](ctx)
            except Exception as e:
                result = {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-4000:]}
            result["seconds"] = round(time.perf_counter() - t0, 1)
            ctx.report["steps"][name] = result
            ctx.report["seconds"] = round(time.perf_counter() - started, 1)
            write(ctx.report, out)
            print(f"gpu_check: {name}: {'ok' if result.get('ok') else 'FAILED'} in {result['seconds']} s", flush=True)
    ctx.report["ok"] = all(s.get("ok") for s in ctx.report["steps"].values())
    write(ctx.report, out)
    print(f"gpu_check: {'all checks passed' if ctx.report['ok'] else 'a check FAILED'}; report in {out}")
    return 0 if ctx.report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
