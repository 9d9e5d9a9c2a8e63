"""Vertical folding: merge an elementwise op or a BatchNormalization into the linear op feeding it.

Conv + Relu is left to the runtime (onnxruntime fuses it); nothing here needs it fused.
"""

from __future__ import annotations

import numpy as np

from gspo.ir import Graph, Literal, Node, Scale, Weight
from gspo.ir.weights import np_dtype
from gspo.rules.base import (
    Mismatch,
    OpSet,
    Rule,
    array,
    attrs_with,
    broadcasts_within,
    constant,
    need,
    producer,
    require,
    single_consumer,
)
from gspo.rules.edit import Edit

__all__ = [
    "FoldBatchNorm",
    "FoldMulIntoLinear",
    "FoldAddIntoLinear",
    "MatMulAddToGemm",
    "LINEAR",
    "RULES",
]

#: The linear ops a per-channel scale and bias fold into.
LINEAR = ("Conv", "ConvTranspose", "Gemm")


def _channel_axis(lin: Node) -> int:
    """Axis of the weight along the output channels of ``lin`` (a Mismatch when it has none)."""
    if lin.op_type == "Conv":
        return 0
    if lin.op_type == "ConvTranspose":
        require(lin.attr("group", 1) == 1, "grouped ConvTranspose")
        return 1
    return 0 if lin.attr("transB", 0) else 1


def _out_channels(graph: Graph, lin: Node) -> int:
    return graph.values[lin.outputs[0].name].shape[1]


def _linear_bias(graph: Graph, lin: Node) -> Weight | None:
    """The constant bias of a linear op with a constant weight (``None``: no bias), or a Mismatch."""
    need(constant(graph, lin.inputs[1]))
    b = need(constant(graph, lin.inputs[2])) if len(lin.inputs) > 2 and lin.inputs[2] else None
    if lin.op_type == "Gemm" and b is not None:
        require(lin.attr("beta", 1.0) == 1.0, "Gemm beta is not 1")
        channels = _out_channels(graph, lin)
        require(b.shape in ((channels,), (1, channels)), "Gemm bias is not per output column")
    return b


def _foldable(graph: Graph, lin: Node) -> None:
    """A Mismatch unless a per-channel scale and bias can fold into ``lin``: only one node reads
    it and its weight and bias are constants along an output-channel axis."""
    need(single_consumer(graph, lin.outputs[0].name))
    _linear_bias(graph, lin)
    _channel_axis(lin)


def _bias_vector(graph: Graph, lin: Node) -> np.ndarray:
    b = _linear_bias(graph, lin)
    if b is None:
        return np.zeros(_out_channels(graph, lin), np.float64)
    return array(graph, b).reshape(-1).astype(np.float64)


def _replace_linear(graph: Graph, lin: Node, last: Node, scale: np.ndarray | None, bias: np.ndarray) -> Graph:
    """``lin`` with its weight scaled per output channel and a new bias, writing ``last``'s output.

    The new bias has the weight's element type (a float16 model stays float16); the scale is
    applied in float32 and rounded once, to the weight's type.
    """
    e = Edit(graph)
    w_name = lin.inputs[1]
    w = graph.weights[w_name]
    if scale is not None:
        w_name = e.weight("w", Scale(w, Literal.from_array(scale.astype(np.float32)), _channel_axis(lin)))
    b_name = e.weight("b", Literal.from_array(bias.astype(np_dtype(w.dtype))))
    attrs = attrs_with(lin, beta=1.0) if lin.op_type == "Gemm" and lin.attr("beta", 1.0) != 1.0 else lin.attrs
    e.drop(lin, last)
    e.node(lin.op_type, [lin.inputs[0], w_name, b_name], attrs, outputs=[last.outputs[0].name], like=lin)
    return e.commit()


class FoldBatchNorm(Rule):
    """``BatchNormalization(Conv(x, w, b))`` -> ``Conv(x, w*s, (b-mean)*s+beta)`` (also ConvTranspose, Gemm)."""

    pattern = ("BatchNormalization", OpSet("Conv", LINEAR))

    def check(self, graph, site):
        bn = site[0]
        training = bn.attr("training_mode", 0) or any(v.name for v in bn.outputs[1:])
        require(not training, "BatchNormalization in training mode")
        lin = need(producer(graph, bn.inputs[0], LINEAR))
        need(single_consumer(graph, lin.outputs[0].name))
        for name in bn.inputs[1:5]:
            need(constant(graph, name))
        _foldable(graph, lin)
        return self._match([bn, lin])

    def apply(self, graph, match):
        bn, lin = match.nodes
        gamma, beta, mean, var = (array(graph, graph.weights[n]).astype(np.float64) for n in bn.inputs[1:5])
        s = gamma / np.sqrt(var + bn.attr("epsilon", 1e-5))
        bias = (_bias_vector(graph, lin) - mean) * s + beta
        return _replace_linear(graph, lin, bn, s, bias)


def _channel_constant(graph: Graph, node: Node, lin_out: str) -> np.ndarray:
    """The other operand of ``node`` as a per-output-channel vector, or a Mismatch."""
    other = node.inputs[1] if node.inputs[0] == lin_out else node.inputs[0]
    c = need(constant(graph, other))
    out_shape = graph.values[lin_out].shape
    broadcasts_within(out_shape, c.shape)
    aligned = (1,) * (len(out_shape) - len(c.shape)) + tuple(c.shape)
    require(all(d == 1 for i, d in enumerate(aligned) if i != 1), "the constant is not per output channel")
    vec = array(graph, c).reshape(-1).astype(np.float64)
    return np.broadcast_to(vec, (out_shape[1],)).copy()


def fed_by(graph: Graph, node: Node, ops: tuple[str, ...]) -> tuple[int, Node]:
    """The first of ``node``'s two operands produced by one of ``ops``: its index and producer."""
    for i in (0, 1):
        prod = producer(graph, node.inputs[i], ops)
        if isinstance(prod, Node):
            return i, prod
    raise Mismatch(f"{node.op_type} is not fed by {'/'.join(ops)}")


class _FoldElementwise(Rule):
    """An elementwise op with a per-channel constant folded into the linear op feeding it."""

    def check(self, graph, site):
        node = site[0]
        _, lin = fed_by(graph, node, LINEAR)
        _foldable(graph, lin)
        _channel_constant(graph, node, lin.outputs[0].name)
        return self._match([node, lin])


class FoldMulIntoLinear(_FoldElementwise):
    """``Mul(Conv(x, w, b), c)`` -> ``Conv(x, w*c, b*c)`` for a per-channel constant ``c`` (also Gemm)."""

    pattern = ("Mul", OpSet("Conv", LINEAR))

    def apply(self, graph, match):
        node, lin = match.nodes
        vec = _channel_constant(graph, node, lin.outputs[0].name)
        return _replace_linear(graph, lin, node, vec, _bias_vector(graph, lin) * vec)


class FoldAddIntoLinear(_FoldElementwise):
    """``Add(Conv(x, w, b), c)`` -> ``Conv(x, w, b+c)`` for a per-channel constant ``c`` (also Gemm)."""

    pattern = ("Add", OpSet("Conv", LINEAR))

    def apply(self, graph, match):
        node, lin = match.nodes
        vec = _channel_constant(graph, node, lin.outputs[0].name)
        return _replace_linear(graph, lin, node, None, _bias_vector(graph, lin) + vec)


class MatMulAddToGemm(Rule):
    """``Add(MatMul(A, B), c)`` -> ``Gemm(A, B, c)`` for 2-D ``A`` and constant ``B`` and ``c``."""

    pattern = ("Add", "MatMul")

    def check(self, graph, site):
        add = site[0]
        i, mm = fed_by(graph, add, ("MatMul",))
        a = graph.values.get(mm.inputs[0])
        require(a is not None and a.shape is not None and len(a.shape) == 2, "MatMul input is not 2-D")
        require(len(need(constant(graph, mm.inputs[1])).shape) == 2, "MatMul weight is not 2-D")
        need(single_consumer(graph, mm.outputs[0].name))
        other = add.inputs[1 - i]
        c = need(constant(graph, other))
        require(len(c.shape) <= 2, "bias has rank > 2")
        broadcasts_within(graph.values[mm.outputs[0].name].shape, c.shape, "bias")
        return self._match([add, mm], bias=other)

    def apply(self, graph, match):
        add, mm = match.nodes
        e = Edit(graph).drop(add, mm)
        e.node("Gemm", [mm.inputs[0], mm.inputs[1], match["bias"]], (), outputs=[add.outputs[0].name], like=mm)
        return e.commit()


RULES = [FoldBatchNorm(), FoldMulIntoLinear(), FoldAddIntoLinear(), MatMulAddToGemm()]
