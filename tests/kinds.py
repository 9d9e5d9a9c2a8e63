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


def _q(name, x, scale, zp):
    return helper.make_node("QuantizeLinear", [x, scale, zp], [name])


def _dq(name, x, scale, zp):
    return helper.make_node("DequantizeLinear", [x, scale, zp], [name])


def qdq_model(channels: int = 4, size: int = 8) -> onnx.ModelProto:
    """A static QDQ graph as onnxruntime.quantization writes it: activations quantized and
    dequantized around each op; two Convs on one input, each ``DQ(x), DQ(w) -> Conv -> Q``
    (one DequantizeLinear of ``x`` per Conv, identical: common-subexpression elimination would
    merge them; the first Conv's weight quantized in the graph, as QAT exports write it),
    their outputs dequantized, Concat, ``DQ -> Relu -> Q``, dequantized output."""
    c = channels
    rng = np.random.default_rng(4)
    inits = [
        numpy_helper.from_array(np.array(0.05, np.float32), "s"),
        numpy_helper.from_array(np.array(0, np.int8), "z"),
        numpy_helper.from_array(np.array(0.01, np.float32), "sw"),
        numpy_helper.from_array(rng.integers(-20, 20, (c, c, 3, 3)).astype(np.int8), "w2q"),
        numpy_helper.from_array(rng.integers(-50, 50, (c,)).astype(np.int32), "bq"),
        numpy_helper.from_array(np.array(0.0005, np.float32), "sb"),
        numpy_helper.from_array(np.array(0, np.int32), "zb"),
    ]
    inits.append(numpy_helper.from_array(rng.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.1, "w1f"))
    nodes = [
        _q("xq", "x", "s", "z"), _dq("xd", "xq", "s", "z"), _dq("xd2", "xq", "s", "z"),
        _q("w1q_", "w1f", "sw", "z"), _dq("w1", "w1q_", "sw", "z"), _dq("w2", "w2q", "sw", "z"),
        _dq("b", "bq", "sb", "zb"),
        helper.make_node("Conv", ["xd", "w1", "b"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["xd2", "w2", "b"], ["c2"], pads=[1, 1, 1, 1]),
        _q("c1q", "c1", "s", "z"), _q("c2q", "c2", "s", "z"),
        _dq("c1d", "c1q", "s", "z"), _dq("c2d", "c2q", "s", "z"),
        helper.make_node("Concat", ["c1d", "c2d"], ["cat"], axis=1),
        _q("catq", "cat", "s", "z"), _dq("catd", "catq", "s", "z"),
        helper.make_node("Relu", ["catd"], ["r"]),
        _q("rq", "r", "s", "z"), _dq("y", "rq", "s", "z"),
    ]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, size, size])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2 * c, size, size])],
                          initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def half_model(elem_type: int = TensorProto.FLOAT16, channels: int = 4, size: int = 8) -> onnx.ModelProto:
    """A float16 (or bfloat16) CNN block that rules rewrite: two 1x1 Convs on one input
    (mergeable), a Mul by a constant after one (foldable into it), Add, Relu."""
    c = channels
    np_type = np.float16 if elem_type == TensorProto.FLOAT16 else np.float32

    def w(name, shape):
        a = (np.random.default_rng(len(name)).standard_normal(shape) * 0.3).astype(np.float32)
        if elem_type == TensorProto.BFLOAT16:
            return helper.make_tensor(name, elem_type, shape, a.flatten().tolist())
        return numpy_helper.from_array(a.astype(np_type), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]),
        helper.make_node("Conv", ["x", "w2"], ["c2"]),
        helper.make_node("Mul", ["c2", "k"], ["m"]),
        helper.make_node("Add", ["c1", "m"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"]),
    ]
    g = helper.make_graph(nodes, "half", [helper.make_tensor_value_info("x", elem_type, [1, c, size, size])],
                          [helper.make_tensor_value_info("y", elem_type, [1, c, size, size])],
                          initializer=[w("w1", [c, c, 1, 1]), w("b1", [c]), w("w2", [c, c, 1, 1]), w("k", [1, c, 1, 1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def half_mlp_model(elem_type: int = TensorProto.BFLOAT16, width: int = 8) -> onnx.ModelProto:
    """Two MatMuls on one input (mergeable), one followed by an Add of a constant (with the
    MatMul, a Gemm), summed, Relu; in float16 or bfloat16 (ONNX's Conv has no bfloat16)."""
    def w(name, shape):
        a = (np.random.default_rng(len(name)).standard_normal(shape) * 0.3).astype(np.float32)
        if elem_type == TensorProto.BFLOAT16:
            return helper.make_tensor(name, elem_type, shape, a.flatten().tolist())
        return numpy_helper.from_array(a.astype(np.float16), name)

    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m1"]),
        helper.make_node("MatMul", ["x", "w2"], ["m2"]),
        helper.make_node("Add", ["m1", "b1"], ["a1"]),
        helper.make_node("Add", ["a1", "m2"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"]),
    ]
    g = helper.make_graph(nodes, "half_mlp", [helper.make_tensor_value_info("x", elem_type, [2, width])],
                          [helper.make_tensor_value_info("y", elem_type, [2, width])],
                          initializer=[w("w1", [width, width]), w("w2", [width, width]), w("b1", [width])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m
