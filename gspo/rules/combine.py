"""Merging operators with different inputs, where exact.

``Conv(a, w1) + Conv(b, w2)`` -> ``Conv(Concat(a, b), Concat(w1, w2))`` (TASO rule 98) and
``A @ B + C @ D`` -> ``[A, C] @ [B; D]``: a sum of two products is one product over the
concatenated contraction axis.
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
)

__all__ = ["MergeConvsIntoAdd", "MergeMatMulsIntoAdd", "RULES"]


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
            inputs.append(e.weight("b", Literal.from_array(np.sum(biases, axis=0).astype(np.float32))))
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


RULES = [MergeConvsIntoAdd(), MergeMatMulsIntoAdd()]
