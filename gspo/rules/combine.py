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
    Edit,
    Fail,
    Rule,
    array,
    constant,
    conv_params,
    nodes_of,
    producer,
    single_consumer,
    split_node,
    split_sizes,
)
from gspo.rules.move import _axis

__all__ = ["MergeConvsIntoAdd", "MergeMatMulsIntoAdd", "MergeBinaryOfSplits", "RULES"]

#: Elementwise binary ops whose piecewise application is the op on the whole.
_BINARY = ("Add", "Sub", "Mul", "Div", "Max", "Min")


def _two_producers(graph, add, op):
    prods = []
    for name in add.inputs:
        prod = producer(graph, name, (op,))
        if isinstance(prod, Fail):
            return Fail(f"Add is not fed by two {op}s")
        users = single_consumer(graph, name)
        if isinstance(users, Fail):
            return users
        prods.append(prod)
    if prods[0] is prods[1] or prods[0].key == prods[1].key:
        return Fail(f"both operands are one {op}")
    out0, out1 = (graph.values.get(p.outputs[0].name) for p in prods)
    if out0 is None or out1 is None or not out0.is_static or out0.shape != out1.shape:
        return Fail("the products' shapes differ")
    return prods


class MergeConvsIntoAdd(Rule):
    """``Conv(a, w1) + Conv(b, w2)`` -> ``Conv(Concat(a, b), Concat(w1, w2))``."""

    pattern = ("Add", "Conv", "Conv")
    merges = True

    def sites(self, graph):
        return ((n,) for n in nodes_of(graph, "Add") if len(n.inputs) == 2)

    def check(self, graph, site):
        add = site[0]
        convs = _two_producers(graph, add, "Conv")
        if isinstance(convs, Fail):
            return convs
        p1, p2 = (conv_params(graph, c) for c in convs)
        for p in (p1, p2):
            if isinstance(p, Fail):
                return p
            if p.group != 1:
                return Fail("group is not 1")
        for attr, reason in (("kernel", "kernel sizes differ"), ("strides", "strides differ"),
                             ("dilations", "dilations differ"), ("pads", "pads differ")):
            if getattr(p1, attr) != getattr(p2, attr):
                return Fail(reason)
        for c in convs:
            for name in c.inputs[1:]:
                if name and isinstance(constant(graph, name), Fail):
                    return constant(graph, name)
        a, b = (graph.values[c.inputs[0]] for c in convs)
        if a.shape[0] != b.shape[0] or a.shape[2:] != b.shape[2:]:
            return Fail("inputs differ in batch or spatial size")
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


class MergeMatMulsIntoAdd(Rule):
    """``A @ B + C @ D`` -> ``Concat(A, C) @ Concat(B, D)`` for constant 2-D ``B``, ``D``."""

    pattern = ("Add", "MatMul", "MatMul")
    merges = True

    def sites(self, graph):
        return ((n,) for n in nodes_of(graph, "Add") if len(n.inputs) == 2)

    def check(self, graph, site):
        add = site[0]
        mms = _two_producers(graph, add, "MatMul")
        if isinstance(mms, Fail):
            return mms
        ws = [constant(graph, m.inputs[1]) for m in mms]
        for w in ws:
            if isinstance(w, Fail):
                return w
            if len(w.shape) != 2:
                return Fail("right operand is not 2-D")
        a, c = (graph.values.get(m.inputs[0]) for m in mms)
        if a is None or c is None or not a.is_static or not c.is_static:
            return Fail("unknown shapes")
        if len(a.shape) != len(c.shape) or a.shape[:-1] != c.shape[:-1]:
            return Fail("left operands differ beyond their last axis")
        return self._match([add, *mms])

    def apply(self, graph, match):
        add, m1, m2 = match.nodes
        rank = len(graph.values[m1.inputs[0]].shape)
        e = Edit(graph).drop(add, m1, m2)
        (joined,) = e.node("Concat", [m1.inputs[0], m2.inputs[0]], [make_attr("axis", rank - 1)], like=m1)
        w = e.weight("w", concat([graph.weights[m1.inputs[1]], graph.weights[m2.inputs[1]]], 0))
        e.node("MatMul", [joined, w], m1.attrs, outputs=[add.outputs[0].name], like=m1)
        return e.commit()


class MergeBinaryOfSplits(Rule):
    """``Add(Split(a)[i], Split(b)[i])`` for every piece ``i`` -> ``Split(Add(a, b))`` (Sub, Mul, ...).

    Also Sub, Mul, Div, Max and Min; the operands keep their order, so the numbers are the same
    bit for bit."""

    pattern = ("Split", "Add", "Split")
    pattern_ops = (frozenset(["Split"]), frozenset(_BINARY), frozenset(["Split"]))
    merges = True

    anchors = ("Split",)

    def check(self, graph, site):
        left = site[0]
        first = single_consumer(graph, left.outputs[0].name)
        if isinstance(first, Fail):
            return first
        if first.op_type not in _BINARY or first.is_opaque or len(first.inputs) != 2:
            return Fail("the first piece is not read by an elementwise binary op")
        if first.inputs[0] != left.outputs[0].name:
            return Fail("the pieces are the second operand (matched from the other Split)")
        right = producer(graph, first.inputs[1], ("Split",))
        if isinstance(right, Fail):
            return right
        if right is left or right.key == left.key or len(right.outputs) != len(left.outputs):
            return Fail("the other operand is not a piece of another Split of as many pieces")
        a, b = (graph.values.get(s.inputs[0]) for s in (left, right))
        if a is None or b is None or not a.is_static or a.shape != b.shape or a.dtype != b.dtype:
            return Fail("the split tensors differ in shape")
        if _axis(graph, left, left.inputs[0]) != _axis(graph, right, right.inputs[0]):
            return Fail("the Splits' axes differ")
        sizes = split_sizes(graph, left)
        if isinstance(sizes, Fail) or sizes != split_sizes(graph, right):
            return Fail("the Splits' boundaries differ")
        ops = []
        for lv, rv in zip(left.outputs, right.outputs):
            op = single_consumer(graph, lv.name)
            if isinstance(op, Fail):
                return op
            if op.op_type != first.op_type or op.attrs != first.attrs or op.inputs != (lv.name, rv.name):
                return Fail("the pieces are not combined pairwise by one kind of op")
            other = single_consumer(graph, rv.name)
            if isinstance(other, Fail):
                return other
            ops.append(op)
        return self._match([left, right, *ops])

    def apply(self, graph, match):
        left, right, *ops = match.nodes
        e = Edit(graph).drop(left, right, *ops)
        (whole,) = e.node(ops[0].op_type, [left.inputs[0], right.inputs[0]], ops[0].attrs, like=ops[0])
        split_node(e, whole, _axis(graph, left, left.inputs[0]), split_sizes(graph, left),
                   [op.outputs[0].name for op in ops], like=left)
        return e.commit()


RULES = [MergeConvsIntoAdd(), MergeMatMulsIntoAdd(), MergeBinaryOfSplits()]
