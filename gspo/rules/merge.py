"""Horizontal merges of operators that read the same tensor (TASO rule 127, IOS "merge").

``k`` Convs on one input with equal stride, dilation, padding and kernel, ``group=1`` -> one
Conv whose weights are concatenated on the output-channel axis, then a Split; ``k`` MatMuls
(or Gemms) sharing their left operand with constant right operands -> one MatMul + Split;
``k`` independent MatMuls sharing their constant right operand -> their left operands stacked
as rows of one MatMul + Split (TASO's batching: the weight is read once, not ``k`` times).
The Split's outputs keep the merged ops' output names, so their readers are untouched.
"""

from __future__ import annotations

from collections import OrderedDict

from gspo.ir import Graph, Literal, Node, Pad, concat
from gspo.ir.builder import make_attr
from gspo.ir.dag import reachability
from gspo.ir.weights import np_dtype
from gspo.rules.base import (
    Edit,
    Fail,
    Rule,
    attrs_with,
    constant,
    conv_params,
    nodes_of,
    producer,
    single_consumer,
    split_node,
)

__all__ = ["MergeParallelConvs", "MergeParallelMatMuls", "BatchSharedWeightMatMuls", "MergeSplitConvs", "RULES",
           "readers_by_input"]

import numpy as np


def readers_by_input(graph: Graph, ops: tuple[str, ...]) -> OrderedDict[str, list[Node]]:
    """Value -> the ``ops`` nodes that read it as their first input (graph order)."""
    out: OrderedDict[str, list[Node]] = OrderedDict()
    for n in nodes_of(graph, *ops):
        out.setdefault(n.inputs[0], []).append(n)
    return out


def _conv_signature(graph: Graph, node: Node):
    p = conv_params(graph, node)
    if isinstance(p, Fail):
        return p
    if p.group != 1:
        return Fail("group is not 1")
    w = constant(graph, node.inputs[1])
    if isinstance(w, Fail):
        return w
    if len(node.inputs) > 2 and node.inputs[2] and isinstance(constant(graph, node.inputs[2]), Fail):
        return Fail("bias is not a constant initializer")
    return (p.kernel, p.strides, p.dilations, p.pads)


_DIFFS = ("kernel sizes differ", "strides differ", "dilations differ", "pads differ")


def _best_group(sigs: list) -> tuple[list[int], Fail | None]:
    groups: OrderedDict = OrderedDict()
    fails = [s for s in sigs if isinstance(s, Fail)]
    for i, s in enumerate(sigs):
        if not isinstance(s, Fail):
            groups.setdefault(s, []).append(i)
    best = max(groups.values(), key=len, default=[])
    if len(best) >= 2:
        return best, None
    ok = [s for s in sigs if not isinstance(s, Fail)]
    if len(ok) >= 2:
        a, b = ok[0], ok[1]
        for k, reason in enumerate(_DIFFS if isinstance(a[0], tuple) else ("attributes differ",) * 8):
            if a[k] != b[k]:
                return [], Fail(reason)
    return [], fails[0] if fails else Fail("fewer than two mergeable readers")


def _bias(graph: Graph, node: Node, channels: int):
    """The bias of a Conv or Gemm, or zeros of its weight's element type."""
    if len(node.inputs) > 2 and node.inputs[2]:
        return graph.weights[node.inputs[2]]
    return Literal.from_array(np.zeros(channels, np_dtype(graph.weights[node.inputs[1]].dtype)))


class MergeParallelConvs(Rule):
    """``Conv(x,w1), Conv(x,w2)`` -> ``Split(Conv(x, Concat(w1,w2)))``."""

    pattern = ("Conv", "Conv")
    merges = True

    def sites(self, graph):
        for convs in readers_by_input(graph, ("Conv",)).values():
            if len(convs) >= 2:
                yield tuple(convs)

    def check(self, graph, site):
        group, fail = _best_group([_conv_signature(graph, n) for n in site])
        return fail or self._match([site[i] for i in group])

    def apply(self, graph, match):
        convs = match.nodes
        e = Edit(graph).drop(*convs)
        weights = [graph.weights[n.inputs[1]] for n in convs]
        sizes = [w.shape[0] for w in weights]
        inputs = [convs[0].inputs[0], e.weight("w", concat(weights, 0))]
        if any(len(n.inputs) > 2 and n.inputs[2] for n in convs):
            inputs.append(e.weight("b", concat([_bias(graph, n, c) for n, c in zip(convs, sizes)], 0)))
        (merged,) = e.node("Conv", inputs, convs[0].attrs, like=convs[0])
        split_node(e, merged, 1, sizes, [n.outputs[0].name for n in convs], like=convs[0])
        return e.commit()


def _linear_signature(graph: Graph, node: Node):
    b = constant(graph, node.inputs[1])
    if isinstance(b, Fail):
        return b
    if len(b.shape) != 2:
        return Fail("right operand is not 2-D")
    if node.op_type == "MatMul":
        return ("MatMul",)
    if len(node.inputs) > 2 and node.inputs[2]:
        c = constant(graph, node.inputs[2])
        if isinstance(c, Fail):
            return c
        if len(c.shape) != 1:
            return Fail("Gemm bias is not a vector")
    return ("Gemm", node.attr("transA", 0), node.attr("transB", 0), node.attr("alpha", 1.0), node.attr("beta", 1.0))


class MergeParallelMatMuls(Rule):
    """``MatMul(x,B1), MatMul(x,B2)`` -> ``Split(MatMul(x, Concat(B1,B2)))`` (also Gemm)."""

    pattern = ("MatMul", "MatMul")
    pattern_ops = (frozenset(["MatMul", "Gemm"]),) * 2
    merges = True

    def sites(self, graph):
        for nodes in readers_by_input(graph, ("MatMul", "Gemm")).values():
            if len(nodes) >= 2:
                yield tuple(nodes)

    def check(self, graph, site):
        group, fail = _best_group([_linear_signature(graph, n) for n in site])
        return fail or self._match([site[i] for i in group])

    def apply(self, graph, match):
        nodes = match.nodes
        first = nodes[0]
        e = Edit(graph).drop(*nodes)
        weights = [graph.weights[n.inputs[1]] for n in nodes]
        trans_b = first.op_type == "Gemm" and first.attr("transB", 0)
        axis = 0 if trans_b else 1
        sizes = [w.shape[axis] for w in weights]
        inputs = [first.inputs[0], e.weight("w", concat(weights, axis))]
        if first.op_type == "Gemm" and any(len(n.inputs) > 2 and n.inputs[2] for n in nodes):
            inputs.append(e.weight("b", concat([_bias(graph, n, c) for n, c in zip(nodes, sizes)], 0)))
        (merged,) = e.node(first.op_type, inputs, first.attrs, like=first)
        rank = len(graph.values[first.outputs[0].name].shape)
        split_node(e, merged, rank - 1, sizes, [n.outputs[0].name for n in nodes], like=first)
        return e.commit()


class BatchSharedWeightMatMuls(Rule):
    """``MatMul(a1, B), MatMul(a2, B)`` -> ``Split(MatMul(Concat(a1, a2), B))`` along rows, for a
    constant 2-D ``B``, 2-D ``a_i`` and MatMuls that do not depend on each other (an unrolled
    RNN's input projections: every step's input times the same weight)."""

    pattern = ("MatMul", "MatMul")
    merges = True

    def sites(self, graph):
        by_weight: OrderedDict[str, list[Node]] = OrderedDict()
        for n in nodes_of(graph, "MatMul"):
            if len(n.inputs) == 2 and n.inputs[1] in graph.weights:
                by_weight.setdefault(n.inputs[1], []).append(n)
        for nodes in by_weight.values():
            if len(nodes) >= 2:
                yield tuple(nodes)

    def check(self, graph, site):
        w = constant(graph, site[0].inputs[1])
        if isinstance(w, Fail):
            return w
        if len(w.shape) != 2:
            return Fail("right operand is not 2-D")
        usable = []
        for n in site:
            a = graph.values.get(n.inputs[0])
            if a is not None and a.is_static and len(a.shape) == 2:
                usable.append(n)
        if len(usable) < 2:
            return Fail("left operands are not 2-D with known shapes")
        reach = reachability(graph)
        index = {id(n): i for i, n in enumerate(graph.nodes)}
        chosen: list[Node] = []
        for n in usable:  # graph order: the earliest independent ones
            i = index[id(n)]
            if not any((reach[i] >> index[id(c)]) & 1 or (reach[index[id(c)]] >> i) & 1 for c in chosen):
                chosen.append(n)
        if len(chosen) < 2:
            return Fail("the MatMuls sharing the weight depend on each other")
        return self._match(chosen)

    def apply(self, graph, match):
        nodes = match.nodes
        first = nodes[0]
        e = Edit(graph).drop(*nodes)
        rows = [graph.values[n.inputs[0]].shape[0] for n in nodes]
        (stacked,) = e.node("Concat", [n.inputs[0] for n in nodes], [make_attr("axis", 0)], like=first)
        (merged,) = e.node("MatMul", [stacked, first.inputs[1]], first.attrs, like=first)
        split_node(e, merged, 0, rows, [n.outputs[0].name for n in nodes], like=first)
        return e.commit()


def _split_pieces(graph: Graph, cat: Node) -> tuple[Node, list[Node]] | Fail:
    """The Split whose every piece goes through one Conv into ``cat``, in order, and those Convs."""
    convs = []
    for name in cat.inputs:
        conv = producer(graph, name, ("Conv",))
        if isinstance(conv, Fail):
            return Fail("a concatenated piece is not a Conv's output")
        users = single_consumer(graph, name)
        if isinstance(users, Fail):
            return users
        convs.append(conv)
    split = producer(graph, convs[0].inputs[0], ("Split",))
    if isinstance(split, Fail):
        return Fail("the Convs do not read the pieces of a Split")
    if [c.inputs[0] for c in convs] != list(split.output_names):
        return Fail("the Convs do not read the Split's pieces in order")
    for c in convs:
        if isinstance(single_consumer(graph, c.inputs[0]), Fail):
            return Fail("a piece of the Split is read by more than its Conv")
    return split, convs


def _embedded_pads(p, kernel) -> tuple[int, ...] | Fail:
    """Pads of a Conv whose kernel is zero-padded, centred, to ``kernel``."""
    n = len(p.kernel)
    if any((k - pk) % 2 for k, pk in zip(kernel, p.kernel)):
        return Fail("kernel sizes differ by an odd amount")
    grow = [(k - pk) // 2 * d for k, pk, d in zip(kernel, p.kernel, p.dilations)]
    return tuple(p.pads[i] + grow[i] for i in range(n)) + tuple(p.pads[n + i] + grow[i] for i in range(n))


class MergeSplitConvs(Rule):
    """``Concat(Conv_i(Split(x)_i))`` -> ``Conv(x)`` with the groups side by side (kernels zero-padded to the largest).

    A mixed depthwise convolution (MixNet: channel groups with 3x3, 5x5, 7x7 kernels) becomes one
    depthwise convolution; pieces convolved alike become one grouped convolution. Each piece's
    groups must read and write as many channels as the others' (so the merged Conv's groups are
    exactly the pieces' groups), with the same strides and dilations, and pads that stay aligned
    once the kernels are centred in the largest.
    """

    pattern = ("Concat", "Conv", "Split")
    merges = True
    anchors = ("Concat",)

    def check(self, graph, site):
        cat = site[0]
        if not _static(graph, cat.outputs[0].name) or _channel_axis(graph, cat) != 1:
            return Fail("not a Concat of channels")
        found = _split_pieces(graph, cat)
        if isinstance(found, Fail):
            return found
        split, convs = found
        if _channel_axis(graph, split) != 1:
            return Fail("the Split is not along channels")
        params = [conv_params(graph, c) for c in convs]
        for c, p in zip(convs, params):
            if isinstance(p, Fail):
                return p
            for name in c.inputs[1:3]:
                if name and isinstance(constant(graph, name), Fail):
                    return constant(graph, name)
        if len({(p.strides, p.dilations) for p in params}) != 1:
            return Fail("strides or dilations differ")
        if len({(p.cin, p.cout // p.group) for p in params}) != 1:
            return Fail("the groups differ in channels")
        kernel = tuple(max(k) for k in zip(*(p.kernel for p in params)))
        pads = {_embedded_pads(p, kernel) for p in params}
        if any(isinstance(x, Fail) for x in pads):
            return next(x for x in pads if isinstance(x, Fail))
        if len(pads) != 1:
            return Fail("pads would not line up")
        return self._match([cat, split, *convs], kernel=kernel, pads=next(iter(pads)))

    def apply(self, graph, match):
        cat, split, *convs = match.nodes
        kernel = match["kernel"]
        e = Edit(graph).drop(cat, split, *convs)
        weights = []
        for c in convs:
            w = graph.weights[c.inputs[1]]
            grow = tuple(((k - pk) // 2,) * 2 for k, pk in zip(kernel, w.shape[2:]))
            weights.append(Pad(w, ((0, 0), (0, 0)) + grow) if any(g != (0, 0) for g in grow) else w)
        inputs = [split.inputs[0], e.weight("w", concat(weights, 0))]
        if any(len(c.inputs) > 2 and c.inputs[2] for c in convs):
            inputs.append(e.weight("b", concat([_bias(graph, c, w.shape[0]) for c, w in zip(convs, weights)], 0)))
        group = sum(conv_params(graph, c).group for c in convs)
        attrs = attrs_with(convs[0], kernel_shape=list(kernel), pads=list(match["pads"]), group=group, auto_pad=None)
        e.node("Conv", inputs, attrs, outputs=[cat.outputs[0].name], like=convs[0])
        return e.commit()


def _static(graph: Graph, name: str) -> bool:
    v = graph.values.get(name)
    return v is not None and v.is_static


def _channel_axis(graph: Graph, node: Node) -> int:
    """The axis attribute of a Concat or Split, made non-negative (4-D and up)."""
    v = graph.values[node.inputs[0]]
    axis = node.attr("axis", 0)
    return axis + len(v.shape) if axis < 0 else axis


RULES = [MergeParallelConvs(), MergeParallelMatMuls(), BatchSharedWeightMatMuls(), MergeSplitConvs()]

