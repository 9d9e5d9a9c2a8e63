"""OpenVINO's compile of nested control flow grows exponentially with the nesting and cannot be
interrupted (25 nested Ifs compiled for over 200 s): a model nested deeper than
MAX_OPENVINO_NESTING is not given to OpenVINO, and the reason says so."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from gspo.errors import GspoError
from gspo.ir.onnx_io import from_model

pytest.importorskip("openvino")

from gspo.ir.protos import control_flow_depth  # noqa: E402
from gspo.runtime.backends import load_runner  # noqa: E402
from gspo.runtime.openvino import MAX_OPENVINO_NESTING  # noqa: E402


def _edges():
    """benchmarks/edges.py, whose nested-If model the compile figures were measured on."""
    spec = importlib.util.spec_from_file_location("edges", Path(__file__).resolve().parents[2] / "benchmarks" / "edges.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: ``depth`` Ifs nested in one another's then-branches (each else-branch a Neg of x).
nested_if = _edges().nested_if


def test_the_nesting_is_counted_in_graphs_and_in_bytes():
    for depth in (1, 3, 12):
        m = nested_if(depth)
        assert control_flow_depth(m.SerializeToString()) == depth
        assert control_flow_depth(from_model(m)) == depth
    plain = h.make_model(h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g", [h.make_tensor_value_info("x", T.FLOAT, [2])],
                                      [h.make_tensor_value_info("y", T.FLOAT, [2])]))
    assert control_flow_depth(plain.SerializeToString()) == 0


@pytest.mark.parametrize("as_bytes", [False, True])
def test_twelve_nested_ifs_are_not_offered_to_openvino_and_the_reason_says_nesting(as_bytes, monkeypatch):
    assert MAX_OPENVINO_NESTING < 12
    m = nested_if(12)
    model = m.SerializeToString() if as_bytes else from_model(m)
    core = pytest.importorskip("openvino").Core
    for method in ("read_model", "compile_model"):  # OpenVINO never sees it (its compile cannot be interrupted)
        monkeypatch.setattr(core, method, lambda *a, **k: pytest.fail("OpenVINO was given the model"))
    with pytest.raises(GspoError, match=f"nested 12 deep.*beyond {MAX_OPENVINO_NESTING}"):
        load_runner("openvino", model)


def test_shallow_control_flow_still_runs_on_openvino():
    runner = load_runner("openvino", nested_if(3).SerializeToString())
    x = np.arange(4, dtype=np.float32)
    y, = runner.run(["y"], {"x": x, "c": np.array(True)})
    np.testing.assert_allclose(y, x + 6)


def test_optimize_reports_why_openvino_was_not_offered_the_model():
    from gspo.search import optimize

    r = optimize(from_model(nested_if(12)), backends=("ort", "openvino"), time_budget=60, jobs=1, timing_runs=5,
                 budget=2)
    reasons = [o["reason"] if isinstance(o, dict) and "reason" in o else str(o) for o in r.report["rejected"]]
    assert any("nested 12 deep" in why for why in reasons), r.report["rejected"]
