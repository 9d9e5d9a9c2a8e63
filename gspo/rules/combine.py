"""Merging operators with different inputs, where exact.

``Conv(a, w1) + Conv(b, w2)`` -> ``Conv(Concat(a, b), Concat(w1, w2))`` (TASO rule 98) and
``A @ B + C @ D`` -> ``[A, C] @ [B; D]``: a sum of two products is one product over the
concatenated contraction axis. ``Split(a)[i] + Split(b)[i]`` for every ``i`` ->
``Split(a + b)``: one elementwise op instead of one per piece (bit for bit the same numbers).
"""

from __future__ import annotations

import numpy as np

from gspo.ir import Literal, concat
from gspo.ir.builder import make_attr
from gspo.rules.base import (
    OpSet,
    Rule,
    array,
    axis_of,
    constant,
    conv_mismatch,
    fail_if,
    need,
    nodes_of,
    plain_conv,
    require,
    single_consumer,
    split_sizes,
    static_values,
)
from gspo.rules.edit import Edit, split_node
from gspo.rules.merge import part
from gspo.rules.pattern import Input, Pattern, Reader, Root

__all__ = ["MergeConvsIntoAdd", "MergeMatMulsIntoAdd", "MergeBinaryOfSplits", "RULES"]

#: Elementwise binary ops whose piecewise application is the op on the whole.
_BINARY = ("Add", "Sub", "Mul", "Div", "Max", "Min")


def _sum_of(op: str) -> Pattern:
    """An Add of two ``op`` nodes' outputs, each read by the Add only."""
    reason = f"Add is not fed by two {op}s"
    return Pattern(Root("add", "Add"), Input("p", op, of="add", at=0, sole=True, reason=reason),
                   Input("q", op, of="add", at=1, sole=True, reason=reason))


def _two_products(graph, site, op):
    """The two ``op`` nodes the Add sums, or a Mismatch unless they are two nodes with outputs of one shape."""
    prods = site["p"], site["q"]
    require(prods[0] is not prods[1] and prods[0].key != prods[1].key, f"both operands are one {op}")
    out0, out1 = (graph.values.get(p.outputs[0].name) for p in prods)
    same = out0 is not None and out1 is not None and out0.is_static and out0.shape == out1.shape
    require(same, "the products' shapes differ")
    return prods


class _SumOfProducts(Rule):
    """A rule rooted on an Add of two operands."""

    def sites(self, graph):
        return ((n,) for n in nodes_of(graph, "Add") if len(n.inputs) == 2)


class MergeConvsIntoAdd(_SumOfProducts):
    """``Conv(a, w1) + Conv(b, w2)`` -> ``Conv(Concat(a, b), Concat(w1, w2))``."""

    pattern = _sum_of("Conv")
    merges = True

    def check(self, graph, site):
        add = site["add"]
        convs = _two_products(graph, site, "Conv")
        p1, p2 = (plain_conv(graph, c) for c in convs)
        fail_if(conv_mismatch(p1, p2))
        a, b = (graph.values[c.inputs[0]] for c in convs)
        require(a.shape[0] == b.shape[0] and a.shape[2:] == b.shape[2:], "inputs differ in batch or spatial size")
        parts = [part(graph, c) for c in convs]
        biases = [array(graph, p.bias) for p in parts if p.bias is not None]
        bias = np.sum(biases, axis=0).astype(biases[0].dtype) if biases else None
        return self._match([add, *convs], weights=[p.weight for p in parts], bias=bias)

    def apply(self, graph, match):
        add, c1, c2 = match.nodes
        e = Edit(graph).drop(add, c1, c2)
        (joined,) = e.node("Concat", [c1.inputs[0], c2.inputs[0]], [make_attr("axis", 1)], like=c1)
        inputs = [joined, e.weight("w", concat(match["weights"], 1))]
        if match["bias"] is not None:
            inputs.append(e.weight("b", Literal.from_array(match["bias"])))
        e.node("Conv", inputs, c1.attrs, outputs=[add.outputs[0].name], like=c1)
        return e.commit()


class MergeMatMulsIntoAdd(_SumOfProducts):
    """``A @ B + C @ D`` -> ``Concat(A, C) @ Concat(B, D)`` for constant 2-D ``B``, ``D``."""

    pattern = _sum_of("MatMul")
    merges = True

    def check(self, graph, site):
        add = site["add"]
        mms = _two_products(graph, site, "MatMul")
        ws = [constant(graph, m.inputs[1]) for m in mms]
        for w in ws:
            require(len(need(w).shape) == 2, "right operand is not 2-D")
        a, c = static_values(graph, *(m.inputs[0] for m in mms))
        same_rows = len(a.shape) == len(c.shape) and a.shape[:-1] == c.shape[:-1]
        require(same_rows, "left operands differ beyond their last axis")
        return self._match([add, *mms], weights=ws, axis=len(a.shape) - 1)

    def apply(self, graph, match):
        add, m1, m2 = match.nodes
        e = Edit(graph).drop(add, m1, m2)
        (joined,) = e.node("Concat", [m1.inputs[0], m2.inputs[0]], [make_attr("axis", match["axis"])], like=m1)
        w = e.weight("w", concat(match["weights"], 0))
        e.node("MatMul", [joined, w], m1.attrs, outputs=[add.outputs[0].name], like=m1)
        return e.commit()


def _pairwise_ops(graph, left, right, first) -> list:
    """The ops combining piece ``i`` of ``left`` with piece ``i`` of ``right`` for every ``i``,
    all like ``first`` and each piece read by its op only, or a Mismatch."""
    ops = []
    for lv, rv in zip(left.outputs, right.outputs):
        op = need(single_consumer(graph, lv.name))
        alike = op.op_type == first.op_type and op.attrs == first.attrs and op.inputs == (lv.name, rv.name)
        require(alike, "the pieces are not combined pairwise by one kind of op")
        need(single_consumer(graph, rv.name))
        ops.append(op)
    return ops


class MergeBinaryOfSplits(Rule):
    """``Add(Split(a)[i], Split(b)[i])`` for every piece ``i`` -> ``Split(Add(a, b))`` (Sub, Mul, ...).

    Also Sub, Mul, Div, Max and Min; the operands keep their order, so the numbers are the same
    bit for bit."""

    pattern = Pattern(
        Root("left", "Split"),
        Reader("first", OpSet("Add", _BINARY), of="left", reason="the first piece is not read by an elementwise binary op"),
        Input("right", "Split", of="first", at=1),
    )
    merges = True

    def check(self, graph, site):
        left, first, right = site["left"], site["first"], site["right"]
        require(len(first.inputs) == 2, "the first piece is not read by an elementwise binary op")
        require(first.inputs[0] == left.outputs[0].name, "the pieces are the second operand (matched from the other Split)")
        other = right is not left and right.key != left.key and len(right.outputs) == len(left.outputs)
        require(other, "the other operand is not a piece of another Split of as many pieces")
        a, b = (graph.values.get(s.inputs[0]) for s in (left, right))
        alike = a is not None and b is not None and a.is_static and a.shape == b.shape and a.dtype == b.dtype
        require(alike, "the split tensors differ in shape")
        axis, sizes = _axis(graph, left), split_sizes(graph, left)
        require(axis == _axis(graph, right), "the Splits' axes differ")
        require(sizes == split_sizes(graph, right), "the Splits' boundaries differ")
        return self._match([left, right, *_pairwise_ops(graph, left, right, first)], axis=axis, sizes=sizes)

    def apply(self, graph, match):
        left, right, *ops = match.nodes
        e = Edit(graph).drop(left, right, *ops)
        (whole,) = e.node(ops[0].op_type, [left.inputs[0], right.inputs[0]], ops[0].attrs, like=ops[0])
        split_node(e, whole, match["axis"], match["sizes"], [op.outputs[0].name for op in ops], like=left)
        return e.commit()


def _axis(graph, split) -> int:
    return axis_of(graph, split, split.inputs[0])


RULES = [MergeConvsIntoAdd(), MergeMatMulsIntoAdd(), MergeBinaryOfSplits()]
