"""A scikit-learn MLPClassifier pipeline as skl2onnx writes it (issue 42, case 11a): ``Scaler ->
Cast -> MatMul -> Add -> Relu -> ... -> ArgMax -> ArrayFeatureExtractor``, input ``X[?, 32]``.
It optimized the round before; then onnxruntime's ``[]`` for the unknown shape of the Scaler's
output (``ai.onnx.ml`` ops have no shape inference in onnx) was taken as a scalar's shape and
the cost model's MatMul features failed with ``IndexError`` at ``ins[0].shape[-1]``.

Built by hand with onnx.helper (no skl2onnx needed). The corpus list of model kinds,
``tests/kinds.py`` (beside ``zipmap_model``), and ``benchmarks/realworld/export_kinds.py``'s
``sklearn_pipeline`` kinds are where such a pipeline belongs as well."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from gspo.cli import cli
from gspo.ir import Value, load, node_features

ML = "ai.onnx.ml"


def mlp_pipeline(features: int = 32, hidden: tuple[int, ...] = (16, 8), classes: int = 3) -> onnx.ModelProto:
    """StandardScaler + MLPClassifier as skl2onnx exports them (zipmap off): label and probabilities."""
    rng = np.random.default_rng(7)
    nodes = [helper.make_node("Scaler", ["X"], ["variable"], domain=ML,
                              offset=rng.standard_normal(features).round(3).tolist(),
                              scale=(rng.random(features) + 0.5).round(3).tolist()),
             helper.make_node("Cast", ["variable"], ["cast_input"], to=TensorProto.FLOAT)]
    inits, prev, width = [], "cast_input", features
    for i, h in enumerate((*hidden, classes)):
        inits += [numpy_helper.from_array((rng.standard_normal((width, h)) * 0.3).astype(np.float32), f"coef{i}"),
                  numpy_helper.from_array((rng.standard_normal(h) * 0.1).astype(np.float32), f"intercept{i}")]
        nodes += [helper.make_node("MatMul", [prev, f"coef{i}"], [f"mul{i}"]),
                  helper.make_node("Add", [f"mul{i}", f"intercept{i}"], [f"add{i}"])]
        prev, width = f"add{i}", h
        if i < len(hidden):
            nodes.append(helper.make_node("Relu", [prev], [f"relu{i}"]))
            prev = f"relu{i}"
    nodes += [helper.make_node("Softmax", [prev], ["probabilities"], axis=1),
              helper.make_node("ArgMax", ["probabilities"], ["argmax"], axis=1),
              helper.make_node("ArrayFeatureExtractor", ["classes", "argmax"], ["extracted"], domain=ML),
              helper.make_node("Cast", ["extracted"], ["cast_label"], to=TensorProto.INT64),
              helper.make_node("Reshape", ["cast_label", "shape"], ["label"])]
    inits += [numpy_helper.from_array(np.arange(classes, dtype=np.int64), "classes"),
              numpy_helper.from_array(np.array([-1], np.int64), "shape")]
    g = helper.make_graph(nodes, "mlp_pipeline", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, features])],
                          [helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
                           helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [None, classes])],
                          initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(ML, 1)])
    m.ir_version = 7
    return m


@pytest.fixture
def pipeline(tmp_path):
    path = tmp_path / "mlp_pipeline.onnx"
    onnx.save(mlp_pipeline(), str(path))
    return path


@pytest.mark.parametrize("op", ["MatMul", "Gemm"])
@pytest.mark.parametrize("a_shape", [(), (4,), (2, 4)])
def test_matmul_and_gemm_features_take_inputs_of_any_rank(op, a_shape):
    """A value whose shape gspo holds as () (or a vector) reaching a MatMul or Gemm: counted as
    what it can be (a vector's dot product), never an IndexError."""
    from gspo.ir.features import _macs
    from gspo.ir.graph import Node

    def value(name, shape):
        return Value(name, TensorProto.FLOAT, shape)

    out = value("y", (2, 3) if len(a_shape) == 2 else (3,))
    node = Node(op, ("a", "w"), (out,))
    macs = _macs(node, [value("a", a_shape), value("w", (4, 3))], (out,))
    counted = len(a_shape) == 2 or (op == "MatMul" and len(a_shape) == 1)
    assert macs == (int(np.prod(out.shape)) * 4 if counted else 0)


def test_onnxruntimes_empty_shape_of_an_unknown_value_is_not_a_scalar(pipeline):
    """onnxruntime reports ``[]`` both for a scalar and for a value whose shape it does not know
    (the Scaler's output): the run that follows settles it."""
    from gspo.runtime.types import complete_types

    g = complete_types(load(pipeline))
    shapes = {v.name: v.shape for n in g.nodes for v in n.outputs}
    assert shapes["variable"] == (1, 32) and shapes["cast_input"] == (1, 32)
    matmul = next(n for n in g.nodes if n.op_type == "MatMul")
    assert node_features(g, matmul).macs == 32 * 16


def test_gspo_optimize_carries_the_pipeline_through(pipeline, tmp_path):
    """End to end, as the issue ran it: an internal error before; now written and equivalent."""
    out = tmp_path / "fast.onnx"
    r = CliRunner().invoke(cli, ["optimize", str(pipeline), "-o", str(out), "--time-budget", "10",
                                 "--backends", "ort", "--jobs", "1"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "internal error" not in r.output and out.exists()
    r = CliRunner().invoke(cli, ["verify", str(pipeline), str(out)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
