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


def _model():
    b = GraphBuilder(seed=2)
    x = b.input("x", (1, 8))
    y = b.op("Relu", [b.op("MatMul", [x, b.weight("w", (8, 8))])])
    return b.output(y).build()


def test_a_missing_or_unknown_backend_is_one_clear_line(monkeypatch):
    with pytest.raises(GspoError, match="backend 'tensorrt' cannot run here: unknown backend"):
        check_backends(["ort", "tensorrt"])
    import gspo.runtime.backends as backends

    def missing():
        raise ImportError("no openvino")

    monkeypatch.setattr(backends, "_openvino", missing)
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
