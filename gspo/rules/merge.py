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

import numpy as np

from gspo.ir import Graph, Literal, Node, Pad, concat
from gspo.ir.builder import make_attr
from gspo.ir.dag import reachability
from gspo.ir.weights import np_dtype
from gspo.rules.base import (
    Fail,
    Mismatch,
    OpSet,
    Rule,
    attrs_with,
    axis_of,
    constant,
    constant_params,
    conv_params,
    is_static,
    need,
    nodes_of,
    plain_conv,
    producer,
    require,
    single_consumer,
)
from gspo.rules.edit import Edit, split_node

__all__ = ["MergeParallelConvs", "MergeParallelMatMuls", "BatchSharedWeightMatMuls", "MergeSplitConvs", "RULES",
           "readers_by_input", "shared_input_sites"]


def readers_by_input(graph: Graph, ops: tuple[str, ...]) -> OrderedDict[str, list[Node]]:
    """Value -> the ``ops`` nodes that read it as their first input (graph order)."""
    out: OrderedDict[str, list[Node]] = OrderedDict()
    for n in nodes_of(graph, *ops):
        out.setdefault(n.inputs[0], []).append(n)
    return out


def _conv_signature(graph: Graph, node: Node) -> tuple:
    """What two plain Convs must share to merge: kernel, strides, dilations and pads."""
    p = plain_conv(graph, node)
    return (p.kernel, p.strides, p.dilations, p.pads)


_DIFFS = ("kernel sizes differ", "strides differ", "dilations differ", "pads differ")


def _signatures(graph: Graph, nodes, signature) -> list:
    """``signature(graph, node)`` for each node, or the :class:`Fail` saying why it has none."""
    out = []
    for n in nodes:
        try:
            out.append(signature(graph, n))
        except Mismatch as e:
            out.append(e.fail)
    return out


def _best_group(sigs: list) -> list[int]:
    """The positions of the largest group (at least two) of equal signatures, or a Mismatch."""
    groups: OrderedDict = OrderedDict()
    for i, s in enumerate(sigs):
        if not isinstance(s, Fail):
            groups.setdefault(s, []).append(i)
    best = max(groups.values(), key=len, default=[])
    if len(best) >= 2:
        return best
    ok = [s for s in sigs if not isinstance(s, Fail)]
    if len(ok) >= 2:
        a, b = ok[0], ok[1]
        for k, reason in enumerate(_DIFFS if isinstance(a[0], tuple) else ("attributes differ",) * 8):
            require(a[k] == b[k], reason)
    raise next((s for s in sigs if isinstance(s, Fail)), Fail("fewer than two mergeable readers")).mismatch()


def _bias(graph: Graph, node: Node, channels: int):
    """The bias of a Conv or Gemm, or zeros of its weight's element type."""
    if len(node.inputs) > 2 and node.inputs[2]:
        return graph.weights[node.inputs[2]]
    return Literal.from_array(np.zeros(channels, np_dtype(graph.weights[node.inputs[1]].dtype)))


def shared_input_sites(graph: Graph, ops: tuple[str, ...]):
    """Sites of two or more ``ops`` nodes reading the same first input, in graph order."""
    for nodes in readers_by_input(graph, ops).values():
        if len(nodes) >= 2:
            yield tuple(nodes)


class MergeParallelConvs(Rule):
    """``Conv(x,w1), Conv(x,w2)`` -> ``Split(Conv(x, Concat(w1,w2)))``."""

    pattern = ("Conv", "Conv")
    merges = True

    def sites(self, graph):
        """Each group of two or more Convs reading one tensor."""
        return shared_input_sites(graph, ("Conv",))

    def check(self, graph, site):
        group = _best_group(_signatures(graph, site, _conv_signature))
        return self._match([site[i] for i in group])

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


def _linear_signature(graph: Graph, node: Node) -> tuple:
    """What two MatMuls (or Gemms) on one input must share to merge, or a Mismatch."""
    b = need(constant(graph, node.inputs[1]))
    require(len(b.shape) == 2, "right operand is not 2-D")
    if node.op_type == "MatMul":
        return ("MatMul",)
    if len(node.inputs) > 2 and node.inputs[2]:
        require(len(need(constant(graph, node.inputs[2])).shape) == 1, "Gemm bias is not a vector")
    return ("Gemm", node.attr("transA", 0), node.attr("transB", 0), node.attr("alpha", 1.0), node.attr("beta", 1.0))


class MergeParallelMatMuls(Rule):
    """``MatMul(x,B1), MatMul(x,B2)`` -> ``Split(MatMul(x, Concat(B1,B2)))`` (also Gemm)."""

    pattern = (OpSet("MatMul", ("MatMul", "Gemm")),) * 2
    merges = True

    def sites(self, graph):
        """Each group of two or more MatMuls or Gemms reading one left operand."""
        return shared_input_sites(graph, ("MatMul", "Gemm"))

    def check(self, graph, site):
        group = _best_group(_signatures(graph, site, _linear_signature))
        return self._match([site[i] for i in group])

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


def _is_2d(graph: Graph, name: str) -> bool:
    a = graph.values.get(name)
    return a is not None and a.is_static and len(a.shape) == 2


def _independent(graph: Graph, nodes: list[Node]) -> list[Node]:
    """The earliest of ``nodes`` (in graph order) none of which depends on another."""
    reach = reachability(graph)
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    chosen: list[Node] = []
    for n in nodes:
        i = index[id(n)]
        if not any((reach[i] >> index[id(c)]) & 1 or (reach[index[id(c)]] >> i) & 1 for c in chosen):
            chosen.append(n)
    return chosen


class BatchSharedWeightMatMuls(Rule):
    """``MatMul(a1, B), MatMul(a2, B)`` -> ``Split(MatMul(Concat(a1, a2), B))`` along rows, for a
    constant 2-D ``B``, 2-D ``a_i`` and MatMuls that do not depend on each other (an unrolled
    RNN's input projections: every step's input times the same weight)."""

    pattern = ("MatMul", "MatMul")
    merges = True

    def sites(self, graph):
        """Each group of two or more MatMuls with one constant right operand."""
        by_weight: OrderedDict[str, list[Node]] = OrderedDict()
        for n in nodes_of(graph, "MatMul"):
            if len(n.inputs) == 2 and n.inputs[1] in graph.weights:
                by_weight.setdefault(n.inputs[1], []).append(n)
        for nodes in by_weight.values():
            if len(nodes) >= 2:
                yield tuple(nodes)

    def check(self, graph, site):
        w = need(constant(graph, site[0].inputs[1]))
        require(len(w.shape) == 2, "right operand is not 2-D")
        usable = [n for n in site if _is_2d(graph, n.inputs[0])]
        require(len(usable) >= 2, "left operands are not 2-D with known shapes")
        chosen = _independent(graph, usable)
        require(len(chosen) >= 2, "the MatMuls sharing the weight depend on each other")
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


def _split_pieces(graph: Graph, cat: Node) -> tuple[Node, list[Node]]:
    """The Split whose every piece goes through one Conv into ``cat``, in order, and those
    Convs, or a Mismatch."""
    convs = []
    for name in cat.inputs:
        conv = need(producer(graph, name, ("Conv",)), "a concatenated piece is not a Conv's output")
        need(single_consumer(graph, name))
        convs.append(conv)
    split = need(producer(graph, convs[0].inputs[0], ("Split",)), "the Convs do not read the pieces of a Split")
    require([c.inputs[0] for c in convs] == list(split.output_names), "the Convs do not read the Split's pieces in order")
    for c in convs:
        need(single_consumer(graph, c.inputs[0]), "a piece of the Split is read by more than its Conv")
    return split, convs


def _embedded_pads(p, kernel) -> tuple[int, ...]:
    """Pads of a Conv whose kernel is zero-padded, centred, to ``kernel`` (a Mismatch when it cannot be centred)."""
    n = len(p.kernel)
    require(not any((k - pk) % 2 for k, pk in zip(kernel, p.kernel)), "kernel sizes differ by an odd amount")
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

    def check(self, graph, site):
        cat = site[0]
        require(is_static(graph, cat.outputs[0].name) and _channel_axis(graph, cat) == 1, "not a Concat of channels")
        split, convs = _split_pieces(graph, cat)
        require(_channel_axis(graph, split) == 1, "the Split is not along channels")
        params = []
        for c in convs:
            params.append(need(conv_params(graph, c)))
            constant_params(graph, c)
        require(len({(p.strides, p.dilations) for p in params}) == 1, "strides or dilations differ")
        require(len({(p.cin, p.cout // p.group) for p in params}) == 1, "the groups differ in channels")
        kernel = tuple(max(k) for k in zip(*(p.kernel for p in params)))
        pads = {_embedded_pads(p, kernel) for p in params}
        require(len(pads) == 1, "pads would not line up")
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


def _channel_axis(graph: Graph, node: Node) -> int:
    """The axis attribute of a Concat or Split, made non-negative."""
    return axis_of(graph, node, node.inputs[0])


RULES = [MergeParallelConvs(), MergeParallelMatMuls(), BatchSharedWeightMatMuls(), MergeSplitConvs()]

