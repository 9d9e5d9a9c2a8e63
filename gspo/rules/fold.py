"""Vertical folding: merge an elementwise op or a BatchNormalization into the linear op feeding it.

Conv + Relu is left to the runtime (onnxruntime fuses it); nothing here needs it fused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gspo.ir import Graph, Literal, Node, Scale, Weight
from gspo.ir.weights import np_dtype
from gspo.rules.base import (
    OpSet,
    Rule,
    array,
    attrs_with,
    broadcasts_within,
    constant,
    need,
    require,
)
from gspo.rules.edit import Edit
from gspo.rules.pattern import EITHER, Input, Pattern, Root

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


@dataclass(frozen=True)
class _Linear:
    """A linear op a per-channel scale and bias fold into: its constant weight, the weight's
    output-channel axis and its bias as a float64 vector (zeros when it has none)."""

    node: Node
    weight: Weight
    axis: int
    bias: np.ndarray


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


def _foldable(graph: Graph, lin: Node) -> _Linear:
    """``lin`` as a linear op a per-channel scale and bias can fold into (its weight and bias
    constants along an output-channel axis), or a Mismatch."""
    b = _linear_bias(graph, lin)
    axis = _channel_axis(lin)
    if b is None:
        bias = np.zeros(_out_channels(graph, lin), np.float64)
    else:
        bias = array(graph, b).reshape(-1).astype(np.float64)
    return _Linear(lin, graph.weights[lin.inputs[1]], axis, bias)


def _replace_linear(graph: Graph, lin: _Linear, last: Node, scale: np.ndarray | None, bias: np.ndarray) -> Graph:
    """``lin`` with its weight scaled per output channel and a new bias, writing ``last``'s output.

    The new bias has the weight's element type (a float16 model stays float16); the scale is
    applied in float32 and rounded once, to the weight's type.
    """
    e = Edit(graph)
    node = lin.node
    w_name = node.inputs[1]
    if scale is not None:
        w_name = e.weight("w", Scale(lin.weight, Literal.from_array(scale.astype(np.float32)), lin.axis))
    b_name = e.weight("b", Literal.from_array(bias.astype(np_dtype(lin.weight.dtype))))
    attrs = attrs_with(node, beta=1.0) if node.op_type == "Gemm" and node.attr("beta", 1.0) != 1.0 else node.attrs
    e.drop(node, last)
    e.node(node.op_type, [node.inputs[0], w_name, b_name], attrs, outputs=[last.outputs[0].name], like=node)
    return e.commit()


class FoldBatchNorm(Rule):
    """``BatchNormalization(Conv(x, w, b))`` -> ``Conv(x, w*s, (b-mean)*s+beta)`` (also ConvTranspose, Gemm)."""

    pattern = Pattern(Root("bn", "BatchNormalization"), Input("lin", OpSet("Conv", LINEAR), of="bn", sole=True))

    def check(self, graph, site):
        bn, lin = site["bn"], site["lin"]
        training = bn.attr("training_mode", 0) or any(v.name for v in bn.outputs[1:])
        require(not training, "BatchNormalization in training mode")
        gamma, beta, mean, var = (need(constant(graph, name)) for name in bn.inputs[1:5])
        fold = _foldable(graph, lin)
        gamma, beta, mean, var = (array(graph, w).astype(np.float64) for w in (gamma, beta, mean, var))
        s = gamma / np.sqrt(var + bn.attr("epsilon", 1e-5))
        return self._match([bn, lin], linear=fold, scale=s, bias=(fold.bias - mean) * s + beta)

    def apply(self, graph, match):
        bn = match.nodes[0]
        return _replace_linear(graph, match["linear"], bn, match["scale"], match["bias"])


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


def _fed_by_linear(op: str) -> Pattern:
    """``op`` with either operand produced by a linear op (read by it only)."""
    return Pattern(Root("node", op), Input("lin", OpSet("Conv", LINEAR), of="node", at=EITHER, sole=True,
                                           reason=f"{op} is not fed by {'/'.join(LINEAR)}"))


class _FoldElementwise(Rule):
    """An elementwise op with a per-channel constant folded into the linear op feeding it."""

    def check(self, graph, site):
        node, lin = site["node"], site["lin"]
        fold = _foldable(graph, lin)
        vec = _channel_constant(graph, node, lin.outputs[0].name)
        return self._match([node, lin], linear=fold, constant=vec)


class FoldMulIntoLinear(_FoldElementwise):
    """``Mul(Conv(x, w, b), c)`` -> ``Conv(x, w*c, b*c)`` for a per-channel constant ``c`` (also Gemm)."""

    pattern = _fed_by_linear("Mul")

    def apply(self, graph, match):
        fold, vec = match["linear"], match["constant"]
        return _replace_linear(graph, fold, match.nodes[0], vec, fold.bias * vec)


class FoldAddIntoLinear(_FoldElementwise):
    """``Add(Conv(x, w, b), c)`` -> ``Conv(x, w, b+c)`` for a per-channel constant ``c`` (also Gemm)."""

    pattern = _fed_by_linear("Add")

    def apply(self, graph, match):
        fold, vec = match["linear"], match["constant"]
        return _replace_linear(graph, fold, match.nodes[0], None, fold.bias + vec)


class MatMulAddToGemm(Rule):
    """``Add(MatMul(A, B), c)`` -> ``Gemm(A, B, c)`` for 2-D ``A`` and constant ``B`` and ``c``."""

    pattern = Pattern(Root("add", "Add"), Input("mm", "MatMul", of="add", at=EITHER, sole=True,
                                                reason="Add is not fed by MatMul"))

    def check(self, graph, site):
        add, mm = site["add"], site["mm"]
        a = graph.values.get(mm.inputs[0])
        require(a is not None and a.shape is not None and len(a.shape) == 2, "MatMul input is not 2-D")
        require(len(need(constant(graph, mm.inputs[1])).shape) == 2, "MatMul weight is not 2-D")
        other = add.inputs[1 - site.at("mm")]
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
