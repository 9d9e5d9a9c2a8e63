"""The runtime's backends: one runner shape for onnxruntime and OpenVINO, one clear line when a
backend cannot run here."""

from __future__ import annotations

import numpy as np
import pytest

from gspo.errors import GspoError
from gspo.ir import serialize
from gspo.ir.builder import GraphBuilder
from gspo.runtime import SessionConfig, random_inputs
from gspo.runtime.backends import (
    available_backends,
    backend_status,
    backend_versions,
    check_backends,
    load_runner,
)
from gspo.runtime.cuda import CudaError, gpu_status
from gspo.search.placement import time_pieces
from tests.runtime import fake_cuda


def _model():
    b = GraphBuilder(seed=2)
    x = b.input("x", (1, 8))
    y = b.op("Relu", [b.op("MatMul", [x, b.weight("w", (8, 8))])])
    return b.output(y).build()


def test_a_missing_or_unknown_backend_is_one_clear_line(monkeypatch):
    with pytest.raises(GspoError, match="backend 'tensorrt' cannot run here: unknown backend"):
        check_backends(["ort", "tensorrt"])
    import gspo.runtime.openvino as openvino

    def missing():
        raise ImportError("no openvino")

    monkeypatch.setattr(openvino, "_openvino", missing)
    with pytest.raises(GspoError, match="OpenVINO is not installed: pip install 'gspo\\[openvino\\]'"):
        check_backends(["openvino"])
    assert check_backends([]) == ("ort",)



def test_every_available_backend_computes_what_onnxruntime_computes():
    g = _model()
    feeds = random_inputs(g, 0)
    names = [v.name for v in g.outputs]
    assert available_backends()[0] == "ort"
    want = load_runner("ort", serialize(g), SessionConfig(intra_op_threads=1)).run(names, feeds)
    for name in available_backends():
        got = load_runner(name, serialize(g), SessionConfig(intra_op_threads=1)).run(names, feeds)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
    assert backend_versions(["ort"]).startswith("ort-")


def test_a_model_a_backend_cannot_read_is_one_line():
    if not backend_status("openvino")[0]:
        pytest.skip("OpenVINO is not installed")
    with pytest.raises(GspoError) as e:
        load_runner("openvino", b"not a model", SessionConfig())
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------ the CUDA backend
@pytest.fixture
def cuda_fakes(monkeypatch):
    """onnxruntime-gpu and cuda-python stand-ins (tests/runtime/fake_cuda.py), and the process's
    CUDA status not yet checked."""
    import gspo.runtime.backends as backends

    monkeypatch.setattr(backends, "_cuda_checked", {})
    log: list = []
    return fake_cuda.install(monkeypatch, fake_cuda.FakeOrt(log), fake_cuda.FakeCudart(log), log)


def test_cuda_is_offered_only_where_a_gpu_works(monkeypatch):
    import gspo.runtime.backends as backends

    monkeypatch.setattr(backends, "_cuda_checked", {})
    ok, why = gpu_status()
    assert backend_status("cuda") == (ok, why)
    assert ("cuda" in available_backends()) == ok
    if ok:
        pytest.skip("a GPU works here: the refusal cannot be shown")
    with pytest.raises(GspoError, match="backend 'cuda' cannot run here: ") as e:
        check_backends(["ort", "cuda"])
    assert "\n" not in str(e.value)
    with pytest.raises(GspoError, match="backend 'cuda' cannot run here: "):
        load_runner("cuda", serialize(_model()))


def test_a_piece_on_cuda_runs_on_the_cuda_provider_with_tf32_off_on_host_arrays(cuda_fakes):
    log, ort, _ = cuda_fakes
    assert "cuda" in available_backends() and check_backends(["cuda"]) == ("ort", "cuda")
    probes = len(ort.sessions)
    runner = load_runner("cuda", serialize(_model()), SessionConfig(intra_op_threads=1))
    load_runner("cuda", serialize(_model()))
    assert len(ort.sessions) == probes + 2  # the device was probed once, not per runner
    piece = ort.sessions[probes]
    assert piece["options"] == {"device_id": "0", "use_tf32": "0"}  # its own stream, TF32 off
    assert piece["config"] == {"session.intra_op.allow_spinning": "0"} and piece["threads"] == 1
    out = runner.run(["y"], {"x": np.ones((1, 8), np.float32)})
    assert len(out) == 1 and ("host_run", probes, ("y",)) in log
    assert backend_versions(["ort", "cuda"]).endswith("+cuda-1.26.0-Fake GPU 16GB")


def test_a_piece_whose_session_falls_back_to_the_cpu_is_refused_with_the_reason(cuda_fakes):
    _, ort, _ = cuda_fakes
    assert backend_status("cuda")[0]  # the probe ran on CUDA
    ort.uses = [fake_cuda.CPU]  # this piece does not
    with pytest.raises(CudaError, match="fell back to the CPU for a piece placed on CUDA") as e:
        load_runner("cuda", serialize(_model()))
    assert "\n" not in str(e.value)
    g = _model()
    [times] = time_pieces([g], [[random_inputs(g, 0)]], ("ort", "cuda"), runs=3)
    assert "fell back to the CPU" in times.refused["cuda"] and set(times.seconds) == {"ort"}


def test_every_backend_returns_outputs_of_their_own_and_reads_inputs_in_place():
    """Outputs are not overwritten by the next run (OpenVINO's are not copied a second time),
    and the inputs, read in place, are left as they were."""
    g = _model()
    names = [v.name for v in g.outputs]
    for name in available_backends():
        runner = load_runner(name, serialize(g), SessionConfig(intra_op_threads=1))
        x = random_inputs(g, 0)["x"]
        kept = x.copy()
        first = runner.run(names, {"x": x})[0]
        first_copy = first.copy()
        runner.run(names, {"x": -x})
        np.testing.assert_array_equal(first, first_copy)
        np.testing.assert_array_equal(x, kept)


def test_openvinos_large_outputs_go_into_pooled_arrays_a_caller_keeps(monkeypatch):
    if not backend_status("openvino")[0]:
        pytest.skip("OpenVINO is not installed")
    import gspo.runtime.openvino as openvino
    from gspo.ir.builder import GraphBuilder

    monkeypatch.setattr(openvino, "LARGE_OUTPUT", 16)  # every output here is "large"
    b = GraphBuilder(seed=3)
    x = b.input("x", (6, 6))
    g = b.output(b.op("Relu", [x]), b.op("Neg", [x])).build()
    runner = load_runner("openvino", g, SessionConfig())
    assert len(runner._large) == 2
    names = list(g.output_names())
    x1 = np.arange(36, dtype=np.float32).reshape(6, 6) - 18
    first = runner.run(names, {"x": x1})
    kept = [a.copy() for a in first]
    second = runner.run(names, {"x": -x1})
    np.testing.assert_array_equal(first[0], np.maximum(x1, 0))
    np.testing.assert_array_equal(first[1], -x1)
    np.testing.assert_array_equal(second[0], np.maximum(-x1, 0))
    for a, k in zip(first, kept):  # the second run wrote elsewhere
        np.testing.assert_array_equal(a, k)
    del first, second, a
    third = runner.run(names[::-1], {"x": x1})  # arrays let go are used again, in any order
    np.testing.assert_array_equal(third[0], -x1)
    np.testing.assert_array_equal(third[1], np.maximum(x1, 0))
