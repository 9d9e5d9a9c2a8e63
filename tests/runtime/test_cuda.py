"""The CUDA backend. These machines have no GPU: what the CPU can check runs against recording
stand-ins for onnxruntime-gpu and cuda-python (tests/runtime/fake_cuda.py); the GPU tests skip
with the reason."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from gspo.errors import GspoError
from gspo.runtime import make_executor, make_session, random_inputs, run
from gspo.runtime.cuda import (
    CudaConfig,
    CudaError,
    CudaExecutor,
    PieceTime,
    check,
    cuda_provider_options,
    gpu_status,
    stream_overlap,
)
from gspo.runtime.cuda import status as cuda_mod
from gspo.streams import assign_streams
from gspo.zoo import build
from tests.helpers import branchy
from tests.runtime import fake_cuda
from tests.runtime.fake_cuda import CPU, CUDA, FakeCudart, FakeOrt

HAVE_GPU, WHY = gpu_status()


def fakes(monkeypatch, **ort_kwargs):
    log: list = []
    return fake_cuda.install(monkeypatch, FakeOrt(log, **ort_kwargs), FakeCudart(log), log)


def kinds(log, kind):
    return [entry for entry in log if entry[0] == kind]


# ------------------------------------------------------------- no GPU here
def test_cuda_without_a_gpu_is_a_clear_error(monkeypatch):
    """No device visible (injected: the stand-ins, with the torch runtime out of reach), whatever this machine has."""
    log: list = []
    no_device = FakeCudart(log, devices=0, device_error=FakeCudart.cudaError_t.cudaErrorNoDevice)
    fake_cuda.install(monkeypatch, FakeOrt(log), no_device, log)
    with pytest.raises(GspoError, match="^--device cuda: no CUDA runtime works here ") as info:
        make_executor(build("resnet50", "tiny"), None, "cuda")
    text = str(info.value)
    assert "\n" not in text and "onnxruntime: no usable CUDA device (cudaErrorNoDevice" in text
    assert "torch: " in text and not [e for e in log if e[0] in ("session", "create_stream")]


def test_a_cpu_onnxruntime_is_told_to_install_the_gpu_extra(monkeypatch):
    fakes(monkeypatch, available=(CPU,))
    ok, why = gpu_status()
    assert not ok and "no CUDAExecutionProvider" in why and "gspo[gpu]" in why


def test_both_runtimes_installed_is_refused_for_cuda(monkeypatch):
    fakes(monkeypatch)
    monkeypatch.setattr(cuda_mod, "installed_runtimes", lambda: ("onnxruntime", "onnxruntime-gpu"))
    ok, why = gpu_status()
    assert not ok and "overwrite each other's onnxruntime module" in why


def test_a_silent_fallback_to_the_cpu_is_an_error_naming_what_is_missing(monkeypatch):
    fakes(monkeypatch, uses=(CPU,))
    ok, why = gpu_status()
    assert not ok and "fell back to the CPU" in why
    assert "libonnxruntime_providers_cuda.so is missing" in why
    with pytest.raises(CudaError, match="--device cuda: onnxruntime fell back to the CPU"):
        CudaExecutor(branchy())


def test_every_session_is_checked_to_run_on_cuda(monkeypatch):
    log, ort, _ = fakes(monkeypatch)
    g = branchy()
    original = ort.InferenceSession

    def second_falls_back(*args, **kwargs):
        session = original(*args, **kwargs)
        if session.index == 2:  # the probe is session 0; the pieces come after
            session.providers = [CPU]
        return session

    ort.InferenceSession = second_falls_back
    with pytest.raises(CudaError, match="piece 1 of"):
        CudaExecutor(g, assign_streams(g))
    assert kinds(log, "destroy_stream"), "a failed start frees what it created"


def test_preload_dlls_is_called_and_its_printing_kept_off_stdout(monkeypatch, capsys):
    log, _, _ = fakes(monkeypatch)
    assert gpu_status()[0]
    assert kinds(log, "preload_dlls") and capsys.readouterr().out == ""


def test_an_old_onnxruntime_without_preload_dlls_still_works(monkeypatch):
    log, ort, _ = fakes(monkeypatch)
    monkeypatch.setattr(FakeOrt, "preload_dlls", property(lambda self: None))
    assert gpu_status()[0] and not kinds(log, "preload_dlls")


def test_a_cuda_python_for_another_cuda_is_refused_before_the_device_is_touched(monkeypatch):
    """cuda-python's version is the stand-in's, not the one installed here."""
    log: list = []
    fake_cuda.install(monkeypatch, FakeOrt(log), FakeCudart(log, cuda_python="13.3.1"), log)
    ok, why = gpu_status()
    assert not ok and "built for CUDA 12 but cuda-python 13.3.1 is for CUDA 13" in why
    assert not kinds(log, "preload_dlls") and not kinds(log, "session")
    fake_cuda.install(monkeypatch, FakeOrt(log), FakeCudart(log, cuda_python="12.9.1"), log)
    assert gpu_status()[0]


def test_cuda_majors_must_match():
    ort = SimpleNamespace(cuda_version="13.0", __version__="1.28.0")
    why = cuda_mod._version_problem(ort, "12.9.1")
    assert why and "CUDA 13" in why and "CUDA 12" in why
    assert cuda_mod._version_problem(SimpleNamespace(cuda_version="12.8", __version__="1.26.0"), "12.9.1") is None
    assert cuda_mod._version_problem(SimpleNamespace(cuda_version="", __version__="1.26.0"), "12.9.1") is None


def test_a_too_old_driver_is_named_with_the_cuda_it_supports(monkeypatch):
    log: list = []
    cudart = FakeCudart(log, device_error=FakeCudart.cudaError_t.cudaErrorInsufficientDriver, driver=11080)
    fake_cuda.install(monkeypatch, FakeOrt(log), cudart, log)
    ok, why = gpu_status()
    assert not ok and "cudaErrorInsufficientDriver" in why and "CUDA 11.8" in why


def test_a_missing_device_id_is_named(monkeypatch):
    fakes(monkeypatch)
    ok, why = gpu_status(CudaConfig(device_id=3))
    assert not ok and "CUDA device 3 does not exist (1 visible)" in why


# ------------------------------------------------------------ cuda-python
def test_check_returns_values_and_raises_on_an_error_code(monkeypatch):
    fakes(monkeypatch)
    ok, bad = FakeCudart.cudaError_t.cudaSuccess, FakeCudart.cudaError_t.cudaErrorNoDevice
    assert check((ok,), "x") is None and check((ok, 5), "x") == 5 and check((ok, 1, 2), "x") == (1, 2)
    with pytest.raises(CudaError, match=r"cudaFoo failed \(cudaErrorNoDevice: text of cudaErrorNoDevice\)"):
        check((bad, 5), "cudaFoo")


def test_provider_options_bind_the_stream_and_keep_tf32_off():
    options = cuda_provider_options(4096, CudaConfig())
    assert options == {"device_id": "0", "use_tf32": "0", "user_compute_stream": "4096",
                       "has_user_compute_stream": "1"}
    assert cuda_provider_options(None, CudaConfig(device_id=1, tf32=True)) == {"device_id": "1", "use_tf32": "1"}


def test_sessions_get_their_streams_native_handle_tf32_off_and_one_shared_arena(monkeypatch):
    log, ort, _ = fakes(monkeypatch)
    g = branchy()
    schedule = assign_streams(g)
    with CudaExecutor(g, schedule) as ex:
        streams = [e[1] for e in kinds(log, "create_stream")]
        assert all(s.flags == FakeCudart.cudaStreamNonBlocking for s in streams)
        pieces = ort.sessions[1:]  # 0 is the probe
        assert len(pieces) == len(ex.plan.segments) and ex.num_streams == schedule.num_streams >= 2
        for seg, s in zip(ex.plan.segments, pieces):
            assert s["options"]["user_compute_stream"] == str(streams[seg.stream].handle)
            assert s["options"]["has_user_compute_stream"] == "1" and s["options"]["use_tf32"] == "0"
            assert s["config"] == {"session.use_env_allocators": "1"}
        assert len(kinds(log, "shared_arena")) == 1
        assert ex.providers() == [[CUDA, CPU]] * len(pieces)
    CudaExecutor(g, schedule).close()
    assert len(kinds(log, "shared_arena")) == 1, "the arena is registered once a process"


# --------------------------------------------------------------- running
def test_inputs_are_uploaded_on_their_stream_and_synchronized_before_any_piece(monkeypatch):
    log, _, _ = fakes(monkeypatch)
    g = branchy()
    with CudaExecutor(g, assign_streams(g)) as ex:
        start = len(log)
        out = ex.run(random_inputs(g))
        upload = ex._upload
        run_log = log[start:]
    assert set(out) == set(g.output_names())
    copies = [i for i, e in enumerate(run_log) if e[0] == "memcpy"]
    assert copies and all(run_log[i][1:] == ("H2D", upload) for i in copies)
    synced = run_log.index(("sync", upload))
    first_run = next(i for i, e in enumerate(run_log) if e[0] == "run")
    assert max(copies) < synced < first_run


def test_cross_stream_dependencies_are_recorded_before_they_are_waited_for(monkeypatch):
    log, _, _ = fakes(monkeypatch)
    g = branchy()
    with CudaExecutor(g, assign_streams(g)) as ex:
        start = len(log)
        ex.run(random_inputs(g))
        run_log = log[start:]
        assert ex.plan.num_events >= 1
    recorded = {e[1].number: i for i, e in enumerate(run_log) if e[0] == "record"}
    waits = [(i, e[2].number) for i, e in enumerate(run_log) if e[0] == "wait"]
    assert waits and all(recorded[ev] < i for i, ev in waits)
    runs = [e for e in run_log if e[0] == "run"]
    assert len({e[2] for e in runs}) >= 2, "pieces ran on more than one stream"


def test_one_stream_puts_every_piece_on_a_single_stream(monkeypatch):
    log, ort, _ = fakes(monkeypatch)
    g = branchy()
    with CudaExecutor(g, assign_streams(g), one_stream=True) as ex:
        ex.run(random_inputs(g))
        assert ex.num_streams == 1 and len(ex.plan.segments) >= 3
    assert len({s["options"]["user_compute_stream"] for s in ort.sessions[1:]}) == 1


def test_timing_uses_events_on_the_streams_and_uploads_once(monkeypatch):
    log, _, _ = fakes(monkeypatch)
    g = branchy()
    with CudaExecutor(g, assign_streams(g)) as ex:
        runner = ex.timed_runner(random_inputs(g))
        copies = len(kinds(log, "memcpy"))
        seconds = [runner() for _ in range(3)]
        assert len(kinds(log, "memcpy")) == copies, "inputs are uploaded once, not per timed run"
        total, pieces = ex.time_run(ex.upload(random_inputs(g)))
    assert all(s > 0 for s in seconds) and total > 0
    assert [p.segment for p in pieces] == list(range(len(ex.plan.segments)))
    assert all(0 < p.start_ms < p.end_ms <= total * 1e3 for p in pieces)
    assert {p.stream for p in pieces} == {seg.stream for seg in ex.plan.segments}


def test_close_frees_sessions_before_the_streams_they_use_and_everything_once(monkeypatch):
    log, _, _ = fakes(monkeypatch)
    g = branchy()
    ex = CudaExecutor(g, assign_streams(g))
    ex.time_run(ex.upload(random_inputs(g)))  # creates the timing events too
    start = len(log)
    ex.close()
    closing = log[start:]
    freed = [i for i, e in enumerate(closing) if e[0] == "session_freed"]
    destroyed_streams = [i for i, e in enumerate(closing) if e[0] == "destroy_stream"]
    synced = [i for i, e in enumerate(closing) if e[0] == "sync"]
    assert len(freed) == len(ex.plan.segments)
    assert max(synced) < min(freed) and max(freed) < min(destroyed_streams)
    created = {e[1].number for e in log[:start] if e[0] in ("create_stream", "create_event")}
    gone = [e[1].number for e in closing if e[0] in ("destroy_stream", "destroy_event")]
    assert sorted(gone) == sorted(created)
    ex.close()  # a second close does nothing
    assert log[start + len(closing):] == []


def test_close_attempts_every_destroy_and_reports_the_first_failure(monkeypatch):
    log: list = []
    cudart = FakeCudart(log)
    fake_cuda.install(monkeypatch, FakeOrt(log), cudart, log)
    g = branchy()
    ex = CudaExecutor(g, assign_streams(g))
    cudart.fail = "cudaEventDestroy"
    with pytest.raises(CudaError, match="cudaEventDestroy failed"):
        ex.close()
    assert len(kinds(log, "destroy_stream")) == ex.plan.num_streams + 1  # + the upload stream


def test_stream_overlap_counts_only_time_two_streams_were_busy():
    assert stream_overlap([]) == 0.0
    assert stream_overlap([PieceTime(0, 0, 0.0, 1.0), PieceTime(1, 1, 1.0, 2.0)]) == 0.0
    assert stream_overlap([PieceTime(0, 0, 0.0, 4.0), PieceTime(1, 1, 1.0, 2.0), PieceTime(2, 2, 1.5, 3.0)]) == 2.0


# -------------------------------------------------------------- on a GPU
@pytest.mark.skipif(not HAVE_GPU, reason=f"no GPU: {WHY}")
@pytest.mark.parametrize("name", ["inception_v3", "nasnet_mobile", "nasrnn"])
def test_cuda_streams_match_plain_onnxruntime(name):
    g = build(name, "tiny")
    feeds = random_inputs(g)
    ref = run(make_session(g), feeds)
    with CudaExecutor(g, assign_streams(g)) as ex:
        assert all(p[0] == CUDA for p in ex.providers())
        got = ex.run(feeds)
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-3, atol=1e-4)
