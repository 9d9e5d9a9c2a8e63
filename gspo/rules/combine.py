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
    need,
    nodes_of,
    plain_conv,
    producer,
    require,
    single_consumer,
    split_sizes,
    static_values,
)
from gspo.rules.edit import Edit, split_node

__all__ = ["MergeConvsIntoAdd", "MergeMatMulsIntoAdd", "MergeBinaryOfSplits", "RULES"]

#: Elementwise binary ops whose piecewise application is the op on the whole.
_BINARY = ("Add", "Sub", "Mul", "Div", "Max", "Min")


def _two_producers(graph, add, op):
    """The two ``op`` nodes whose outputs (read by ``add`` only, of one shape) ``add`` sums, or a Mismatch."""
    prods = []
    for name in add.inputs:
        prods.append(need(producer(graph, name, (op,)), f"Add is not fed by two {op}s"))
        need(single_consumer(graph, name))
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

    pattern = ("Add", "Conv", "Conv")
    merges = True

    def check(self, graph, site):
        add = site[0]
        convs = _two_producers(graph, add, "Conv")
        p1, p2 = (plain_conv(graph, c) for c in convs)
        for attr, reason in (("kernel", "kernel sizes differ"), ("strides", "strides differ"),
                             ("dilations", "dilations differ"), ("pads", "pads differ")):
            require(getattr(p1, attr) == getattr(p2, attr), reason)
        a, b = (graph.values[c.inputs[0]] for c in convs)
        require(a.shape[0] == b.shape[0] and a.shape[2:] == b.shape[2:], "inputs differ in batch or spatial size")
        return self._match([add, *convs])

    def apply(self, graph, match):
        add, c1, c2 = match.nodes
        e = Edit(graph).drop(add, c1, c2)
        (joined,) = e.node("Concat", [c1.inputs[0], c2.inputs[0]], [make_attr("axis", 1)], like=c1)
        w = e.weight("w", concat([graph.weights[c1.inputs[1]], graph.weights[c2.inputs[1]]], 1))
        inputs = [joined, w]
        biases = [array(graph, graph.weights[c.inputs[2]]) for c in (c1, c2) if len(c.inputs) > 2 and c.inputs[2]]
        if biases:
            inputs.append(e.weight("b", Literal.from_array(np.sum(biases, axis=0).astype(biases[0].dtype))))
        e.node("Conv", inputs, c1.attrs, outputs=[add.outputs[0].name], like=c1)
        return e.commit()


class MergeMatMulsIntoAdd(_SumOfProducts):
    """``A @ B + C @ D`` -> ``Concat(A, C) @ Concat(B, D)`` for constant 2-D ``B``, ``D``."""

    pattern = ("Add", "MatMul", "MatMul")
    merges = True

    def check(self, graph, site):
        add = site[0]
        mms = _two_producers(graph, add, "MatMul")
        ws = [constant(graph, m.inputs[1]) for m in mms]
        for w in ws:
            require(len(need(w).shape) == 2, "right operand is not 2-D")
        a, c = static_values(graph, *(m.inputs[0] for m in mms))
        same_rows = len(a.shape) == len(c.shape) and a.shape[:-1] == c.shape[:-1]
        require(same_rows, "left operands differ beyond their last axis")
        return self._match([add, *mms])

    def apply(self, graph, match):
        add, m1, m2 = match.nodes
        rank = len(graph.values[m1.inputs[0]].shape)
        e = Edit(graph).drop(add, m1, m2)
        (joined,) = e.node("Concat", [m1.inputs[0], m2.inputs[0]], [make_attr("axis", rank - 1)], like=m1)
        w = e.weight("w", concat([graph.weights[m1.inputs[1]], graph.weights[m2.inputs[1]]], 0))
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

    pattern = ("Split", OpSet("Add", _BINARY), "Split")
    merges = True

    def check(self, graph, site):
        left = site[0]
        first = need(single_consumer(graph, left.outputs[0].name))
        binary = first.op_type in _BINARY and not first.is_opaque and len(first.inputs) == 2
        require(binary, "the first piece is not read by an elementwise binary op")
        require(first.inputs[0] == left.outputs[0].name, "the pieces are the second operand (matched from the other Split)")
        right = need(producer(graph, first.inputs[1], ("Split",)))
        other = right is not left and right.key != left.key and len(right.outputs) == len(left.outputs)
        require(other, "the other operand is not a piece of another Split of as many pieces")
        a, b = (graph.values.get(s.inputs[0]) for s in (left, right))
        alike = a is not None and b is not None and a.is_static and a.shape == b.shape and a.dtype == b.dtype
        require(alike, "the split tensors differ in shape")
        require(_axis(graph, left) == _axis(graph, right), "the Splits' axes differ")
        require(split_sizes(graph, left) == split_sizes(graph, right), "the Splits' boundaries differ")
        return self._match([left, right, *_pairwise_ops(graph, left, right, first)])

    def apply(self, graph, match):
        left, right, *ops = match.nodes
        e = Edit(graph).drop(left, right, *ops)
        (whole,) = e.node(ops[0].op_type, [left.inputs[0], right.inputs[0]], ops[0].attrs, like=ops[0])
        split_node(e, whole, _axis(graph, left), split_sizes(graph, left), [op.outputs[0].name for op in ops], like=left)
        return e.commit()


def _axis(graph, split) -> int:
    return axis_of(graph, split, split.inputs[0])


RULES = [MergeConvsIntoAdd(), MergeMatMulsIntoAdd(), MergeBinaryOfSplits()]
