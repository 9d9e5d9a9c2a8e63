"""``gspo.optimize`` with values the command line would refuse (issue 42, case 12): one
GspoError line, before any work; the raw ValueError / OverflowError / TypeError were internal
errors."""

from __future__ import annotations

import pytest

import gspo
from tests.helpers import relu_model


@pytest.fixture
def model(tmp_path):
    import onnx

    path = tmp_path / "relu.onnx"
    onnx.save(relu_model(), str(path))
    return path


@pytest.mark.parametrize("options, says", [
    (dict(seed=-1), "the seed must be a non-negative integer (got -1)"),
    (dict(seed=2**40), "the seed must be an integer in [0, 4294967295]"),
    (dict(time_budget=1e308), "--time-budget must be positive and at most"),
    (dict(time_budget="5"), "--time-budget must be a finite number"),
    (dict(timing_runs=-5), "timing_runs must be an integer in [5, inf]"),
    (dict(nonsense=True), "unknown option(s) nonsense"),
])
def test_optimize_refuses_what_the_cli_refuses_in_one_line(model, options, says):
    with pytest.raises(gspo.GspoError) as e:
        gspo.optimize(model, **options)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_optimize_refuses_a_model_that_is_neither_a_path_nor_a_graph():
    with pytest.raises(gspo.GspoError, match="must be the path of an .onnx file or a gspo Graph"):
        gspo.optimize(42, time_budget=5)


def test_optimize_refuses_inputs_that_are_not_arrays(model):
    with pytest.raises(gspo.GspoError, match="--inputs must map input names to numpy arrays"):
        gspo.optimize(model, inputs={"x": [[1.0, 2.0, 3.0]] * 2}, time_budget=5)


def test_a_model_with_no_outputs_is_one_clear_line(tmp_path):
    """onnxruntime's page of C++, cut at 'const onnxrun', was the message."""
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph([], "empty", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])], [])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "empty.onnx"
    onnx.save(m, str(path))
    with pytest.raises(gspo.GspoError) as e:
        gspo.optimize(path, time_budget=5, backends=("ort",))
    assert str(e.value) == f"{path}: the model has no outputs: it computes nothing"
