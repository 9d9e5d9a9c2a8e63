"""The one dispatcher from a device to its executor, and what ``gspo run`` gives it."""

from __future__ import annotations

import numpy as np
import pytest

from gspo import ir
from gspo.errors import GspoError
from gspo.runtime import (
    CpuExecutor,
    Executor,
    device_executor,
    make_executor,
    make_session,
    random_inputs,
    run,
)
from gspo.runtime import executor as executor_mod
from gspo.runtime.cuda import CudaError, CudaExecutor
from gspo.streams import Placement, assign_streams
from tests.helpers import branchy
from tests.runtime import fake_cuda
from tests.runtime.fake_cuda import CPU, FakeCudart, FakeOrt


@pytest.fixture
def cuda_fakes(monkeypatch):
    """onnxruntime-gpu and cuda-python stand-ins, and the process's CUDA status not yet checked."""
    import gspo.runtime.backends as backends

    monkeypatch.setattr(backends, "_cuda_checked", {})
    log: list = []
    return fake_cuda.install(monkeypatch, FakeOrt(log), FakeCudart(log), log)


def test_cpu_gets_the_cpu_executor_with_the_schedule_and_computes_what_onnxruntime_does():
    g = branchy()
    schedule = assign_streams(g)
    feeds = random_inputs(g)
    with device_executor(g, schedule, "cpu") as ex:
        assert type(ex) is CpuExecutor and isinstance(ex, Executor)
        assert ex.schedule == schedule and ex.num_streams == schedule.num_streams >= 2
        got = ex.run(feeds)
    want = run(make_session(g), feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)


def test_cuda_gets_the_cuda_executor_on_the_schedules_streams(cuda_fakes, monkeypatch):
    from gspo.runtime.cuda.choice import cuda_runtime

    monkeypatch.setenv("GSPO_CUDA_RUNTIME", "ort")  # the runtime tested: onnxruntime-gpu's, the stand-in
    assert cuda_runtime() == "ort"
    g = branchy()
    schedule = assign_streams(g)
    with device_executor(g, schedule, "cuda") as ex:
        assert type(ex) is CudaExecutor and isinstance(ex, Executor)
        assert ex.num_streams == schedule.num_streams
    with device_executor(g, schedule, "cuda", one_stream=True) as ex:
        assert ex.num_streams == 1


def test_an_unknown_device_or_a_setting_its_executor_does_not_take_is_one_line(cuda_fakes):
    g = branchy()
    with pytest.raises(GspoError, match=r"^unknown device 'tpu' \(use cpu or cuda\)$"):
        device_executor(g, None, "tpu")
    with pytest.raises(GspoError, match=r"^unknown device 'tpu'"):
        make_executor(g, None, "tpu")
    with pytest.raises(GspoError, match="one_stream is a CUDA setting"):
        device_executor(g, None, "cpu", one_stream=True)
    with pytest.raises(GspoError, match="a placement .* runs on the cpu device"):
        device_executor(g, None, "cuda", placement=Placement.whole(g, "openvino"))


def test_a_missing_gpu_is_reported_before_the_schedule_is_chosen(monkeypatch):
    log: list = []
    fake_cuda.install(monkeypatch, FakeOrt(log, available=(CPU,)), FakeCudart(log), log)

    def choose(*args):
        raise AssertionError("the schedule was chosen before the GPU was checked")

    monkeypatch.setattr(executor_mod, "choose_schedule", choose)
    with pytest.raises(CudaError, match="^--device cuda: no CUDA runtime works here \\(onnxruntime: this onnxruntime .* has no CUDAExecutionProvider"):
        make_executor(branchy(), None, "cuda")


def test_the_saved_placement_is_followed_on_the_cpu_and_not_asked_of_cuda(cuda_fakes, tmp_path):
    log, _, _ = cuda_fakes
    g = branchy()
    placed = ir.load(ir.save(g, tmp_path / "placed.onnx", placement=Placement.whole(g, "cuda").to_json()))
    with make_executor(placed) as ex:
        assert type(ex) is CpuExecutor and {seg.backend for seg in ex.plan.segments} == {"cuda"}
        ex.run(random_inputs(placed))
    assert [e for e in log if e[0] == "host_run"], "the piece placed on cuda ran through the CUDA runner"
    with make_executor(placed, None, "cuda") as ex:
        assert type(ex) is CudaExecutor
