"""Verdicts at the edges (issue 42, cases 9, 10 and 14): a changed output type is a different
model; inputs or outputs with no finite value compare nothing, which is never a pass; a model
with no outputs is one clear line."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from gspo.cli import cli
from gspo.errors import GspoError
from gspo.ir import load
from gspo.runtime import compare_outputs, verify
from tests.helpers import one_line_error, onnx_model


def _gspo(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _linear(weight: float = 0.5, out_type: int = TensorProto.FLOAT) -> onnx.ModelProto:
    """``y = x @ W`` (W filled with ``weight``), its output cast to ``out_type`` when not float."""
    w = numpy_helper.from_array(np.full((4, 3), weight, np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m" if out_type != TensorProto.FLOAT else "y"])]
    if out_type != TensorProto.FLOAT:
        nodes.append(helper.make_node("Cast", ["m"], ["y"], to=out_type))
    return onnx_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                      [helper.make_tensor_value_info("y", out_type, [2, 3])], [w])


def _save(model, path):
    onnx.save(model, str(path))
    return path


# ------------------------------------------------------------------ case 9
@pytest.mark.parametrize("other", [np.float16, np.float64])
def test_an_output_of_another_type_differs(other):
    a = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    res = compare_outputs({"y": a}, {"y": a.astype(other)})
    assert not res.equivalent
    assert res.worst.reason == f"type {np.dtype(other).name} instead of float32"


def test_an_integer_output_of_another_width_differs():
    a = np.arange(6, dtype=np.int64)
    assert not compare_outputs({"y": a}, {"y": a.astype(np.int32)}).equivalent


@pytest.mark.parametrize("out_type", [TensorProto.FLOAT16, TensorProto.DOUBLE])
def test_verify_refuses_the_same_model_with_its_output_cast(tmp_path, out_type):
    """The issue's case: `gspo verify a.onnx a_f16.onnx` said equivalent, exit 0."""
    a, b = _save(_linear(), tmp_path / "a.onnx"), _save(_linear(out_type=out_type), tmp_path / "b.onnx")
    res = verify(load(a), load(b))
    assert not res.equivalent and "instead of float32" in res.worst.reason
    r = _gspo("verify", a, b)
    assert r.exit_code == 1, r.output
    assert "NOT equivalent" in r.output and "instead of float32" in r.output


def test_the_same_types_and_shapes_still_pass(tmp_path):
    a = _save(_linear(), tmp_path / "a.onnx")
    assert verify(load(a), load(a)).equivalent


# ------------------------------------------------------------------ case 10
def test_outputs_with_no_finite_value_on_both_sides_compare_nothing():
    nan = np.full((2, 3), np.nan, np.float32)
    res = compare_outputs({"y": nan}, {"y": nan.copy()})
    assert not res.equivalent
    assert "compared nothing" in res.worst.reason
    inf = np.full(3, -np.inf, np.float32)
    assert not compare_outputs({"y": inf}, {"y": inf.copy()}).equivalent
    # one finite element is something compared; an empty output holds nothing to differ in
    some = np.array([np.nan, 1.0], np.float32)
    assert compare_outputs({"y": some}, {"y": some.copy()}).equivalent
    empty = np.zeros((0, 3), np.float32)
    assert compare_outputs({"y": empty}, {"y": empty.copy()}).equivalent


def test_verify_refuses_inputs_with_no_finite_value(tmp_path):
    """The issue's case: all-NaN --inputs made two models with different weights 'equivalent'."""
    a, b = _save(_linear(0.5), tmp_path / "a.onnx"), _save(_linear(0.7), tmp_path / "b.onnx")
    nan = {"x": np.full((2, 4), np.nan, np.float32)}
    with pytest.raises(GspoError, match="no finite value"):
        verify(load(a), load(b), inputs=nan)
    feeds = tmp_path / "nan.npz"
    np.savez(feeds, **nan)
    error = one_line_error(_gspo("verify", a, b, "--inputs", feeds))
    assert "'x' has no finite value" in error and "nothing would be compared" in error
    # finite inputs still tell the two apart
    np.savez(feeds, x=np.ones((2, 4), np.float32))
    assert _gspo("verify", a, b, "--inputs", feeds).exit_code == 1


def test_one_finite_input_among_others_is_something_compared(tmp_path):
    x = np.full((2, 4), np.nan, np.float32)
    x[0] = 1.0
    a = _save(_linear(0.5), tmp_path / "a.onnx")
    res = verify(load(a), load(a), inputs={"x": x})
    assert res.equivalent  # row 0 is finite: it was compared


def test_optimize_refuses_inputs_with_no_finite_value(tmp_path):
    """optimize said 'largest difference 0' on all-NaN --inputs."""
    from gspo.search import optimize

    with pytest.raises(GspoError, match="'x' has no finite value"):
        optimize(load(_save(_linear(), tmp_path / "a.onnx")), inputs={"x": np.full((2, 4), np.inf, np.float32)},
                 time_budget=5, backends=("ort",))


# ------------------------------------------------------------------ case 14: a model with no outputs
def _no_outputs(path):
    g = helper.make_graph([], "empty", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])], [])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return _save(m, path)


def test_verify_of_a_model_with_no_outputs_is_one_clear_line(tmp_path):
    """onnxruntime's text came out cut at 'const onnxrun'."""
    a = _no_outputs(tmp_path / "empty.onnx")
    error = one_line_error(_gspo("verify", a, a))
    assert "has no outputs" in error and "onnxruntime" not in error
