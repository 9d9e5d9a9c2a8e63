"""Small models of the kinds users bring besides float32 exports, built with onnx.helper:
onnxruntime contrib ops, classical ML with ZipMap, QDQ groups, half precision."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MS = "com.microsoft"
ML = "ai.onnx.ml"


def _weights(specs, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return [numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(dtype), name) for name, shape in specs]


def contrib_model(hidden: int = 16, seq: int = 8) -> onnx.ModelProto:
    """What onnxruntime's transformer optimizer writes, in small: MatMul -> com.microsoft Gelu ->
    MatMul -> SkipLayerNormalization, then two MatMuls reading its output (mergeable) and
    FastGelu. onnx infers no type for any value after the first contrib op."""
    h = hidden
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m1"]),
        helper.make_node("Gelu", ["m1"], ["g"], domain=MS),
        helper.make_node("MatMul", ["g", "w2"], ["m2"]),
        helper.make_node("SkipLayerNormalization", ["m2", "x", "gamma", "beta"], ["ln", "", "", "sum"],
                         domain=MS, epsilon=1e-5),
        helper.make_node("MatMul", ["ln", "wa"], ["qa"]),
        helper.make_node("MatMul", ["ln", "wb"], ["qb"]),
        helper.make_node("FastGelu", ["qa"], ["fa"], domain=MS),
        helper.make_node("Add", ["fa", "qb"], ["y"]),
    ]
    inits = _weights([("w1", (h, 2 * h)), ("w2", (2 * h, h)), ("gamma", (h,)), ("beta", (h,)),
                      ("wa", (h, h)), ("wb", (h, h))])
    g = helper.make_graph(nodes, "contrib", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, h])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, h])], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    m.ir_version = 8
    return m


def zipmap_model(features: int = 4, classes: int = 3) -> onnx.ModelProto:
    """A scikit-learn style classifier as skl2onnx writes it: a scaling Mul, an ai.onnx.ml
    LinearClassifier (label, probabilities) and ZipMap turning the probabilities into a
    sequence of maps class -> probability (``seq(map(int64, float))``)."""
    rng = np.random.default_rng(1)
    labels = list(range(classes))
    nodes = [
        helper.make_node("Mul", ["x", "scale"], ["xs"]),
        helper.make_node("LinearClassifier", ["xs"], ["label", "prob"], domain=ML, classlabels_ints=labels,
                         coefficients=rng.standard_normal(features * classes).round(3).tolist(),
                         intercepts=rng.standard_normal(classes).round(3).tolist(), post_transform="SOFTMAX"),
        helper.make_node("ZipMap", ["prob"], ["probabilities"], domain=ML, classlabels_int64s=labels),
    ]
    seq_map = helper.make_sequence_type_proto(
        helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, [])))
    g = helper.make_graph(
        nodes, "classifier", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", features])],
        [helper.make_tensor_value_info("label", TensorProto.INT64, ["N"]),
         helper.make_value_info("probabilities", seq_map)],
        initializer=[numpy_helper.from_array(np.arange(1, features + 1, dtype=np.float32), "scale")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 1)])
    m.ir_version = 8
    return m


def save(model: onnx.ModelProto, path) -> str:
    onnx.save(model, str(path))
    return str(path)


def mlp_model(hidden: int = 32, inner: int = 64) -> onnx.ModelProto:
    """A SwiGLU MLP block (an LLM's decoder MLP, in small): gate and up projections reading one
    input (mergeable), ``silu(gate) * up``, then the down projection."""
    nodes = [
        helper.make_node("MatMul", ["x", "w_gate"], ["gate"]),
        helper.make_node("MatMul", ["x", "w_up"], ["up"]),
        helper.make_node("Sigmoid", ["gate"], ["sg"]),
        helper.make_node("Mul", ["gate", "sg"], ["silu"]),
        helper.make_node("Mul", ["silu", "up"], ["h"]),
        helper.make_node("MatMul", ["h", "w_down"], ["y"]),
    ]
    inits = _weights([("w_gate", (hidden, inner)), ("w_up", (hidden, inner)), ("w_down", (inner, hidden))], seed=3)
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, hidden])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, hidden])], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def save_external(model: onnx.ModelProto, path) -> str:
    """``model`` saved with every weight in ``<name>.data`` beside it."""
    onnx.save_model(model, str(path), save_as_external_data=True, location=path.name + ".data", size_threshold=0)
    return str(path)
