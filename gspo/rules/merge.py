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
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import numpy as np

from gspo.ir import Graph, Literal, Node, Pad, Weight, concat
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
    conv_mismatch,
    conv_params,
    fail_if,
    is_static,
    need,
    nodes_of,
    plain_conv,
    require,
    single_consumer,
)
from gspo.rules.edit import Edit, split_node
from gspo.rules.pattern import Group, Input, Inputs, Pattern, Root

__all__ = ["MergeParallelConvs", "MergeParallelMatMuls", "BatchSharedWeightMatMuls", "MergeSplitConvs", "RULES",
           "readers_by_input", "shared_input_sites", "Part", "part"]


def readers_by_input(graph: Graph, ops: tuple[str, ...]) -> OrderedDict[str, list[Node]]:
    """Value -> the ``ops`` nodes that read it as their first input (graph order)."""
    out: OrderedDict[str, list[Node]] = OrderedDict()
    for n in nodes_of(graph, *ops):
        out.setdefault(n.inputs[0], []).append(n)
    return out


@dataclass(frozen=True)
class Part:
    """The constant weight and bias (``None``: none) of a Conv, MatMul or Gemm a rule merges."""

    weight: Weight
    bias: Weight | None

    def bias_or_zeros(self, channels: int) -> Weight:
        """The bias, or ``channels`` zeros of the weight's element type."""
        if self.bias is not None:
            return self.bias
        return Literal.from_array(np.zeros(channels, np_dtype(self.weight.dtype)))


def part(graph: Graph, node: Node) -> Part:
    """The weight and bias of ``node``, once a check has found them constant."""
    bias = graph.weights[node.inputs[2]] if len(node.inputs) > 2 and node.inputs[2] else None
    return Part(graph.weights[node.inputs[1]], bias)


def _conv_signature(graph: Graph, node: Node) -> tuple[Hashable, object]:
    """What two plain Convs must share to merge (kernel, strides, dilations and pads), and their
    parameters."""
    p = plain_conv(graph, node)
    return (p.kernel, p.strides, p.dilations, p.pads), p


def _signatures(graph: Graph, nodes, signature) -> list:
    """``signature(graph, node)`` for each node, or the :class:`Fail` saying why it has none."""
    out = []
    for n in nodes:
        try:
            out.append(signature(graph, n))
        except Mismatch as e:
            out.append(e.fail)
    return out


def _best_group(sigs: list, differ: Callable[[object, object], str | None]) -> list[int]:
    """The positions of the largest group (at least two) of equal signatures, or a Mismatch (why
    the first two that have one differ: ``differ`` of what came with their signatures)."""
    groups: OrderedDict = OrderedDict()
    for i, s in enumerate(sigs):
        if not isinstance(s, Fail):
            groups.setdefault(s[0], []).append(i)
    best = max(groups.values(), key=len, default=[])
    if len(best) >= 2:
        return best
    ok = [s for s in sigs if not isinstance(s, Fail)]
    if len(ok) >= 2:
        fail_if(differ(ok[0][1], ok[1][1]))
    raise next((s for s in sigs if isinstance(s, Fail)), Fail("fewer than two mergeable readers")).mismatch()


def shared_input_sites(graph: Graph, ops: tuple[str, ...]):
    """Sites of two or more ``ops`` nodes reading the same first input, in graph order."""
    for nodes in readers_by_input(graph, ops).values():
        if len(nodes) >= 2:
            yield tuple(nodes)


class MergeParallelConvs(Rule):
    """``Conv(x,w1), Conv(x,w2)`` -> ``Split(Conv(x, Concat(w1,w2)))``."""

    pattern = Pattern(Group("convs", "Conv"))
    merges = True

    def sites(self, graph):
        """Each group of two or more Convs reading one tensor."""
        return shared_input_sites(graph, ("Conv",))

    def check(self, graph, site):
        convs = site["convs"]
        chosen = [convs[i] for i in _best_group(_signatures(graph, convs, _conv_signature), conv_mismatch)]
        parts = [part(graph, n) for n in chosen]
        return self._match(chosen, parts=parts, sizes=[p.weight.shape[0] for p in parts])

    def apply(self, graph, match):
        convs, parts, sizes = match.nodes, match["parts"], match["sizes"]
        e = Edit(graph).drop(*convs)
        inputs = [convs[0].inputs[0], e.weight("w", concat([p.weight for p in parts], 0))]
        if any(p.bias is not None for p in parts):
            inputs.append(e.weight("b", concat([p.bias_or_zeros(c) for p, c in zip(parts, sizes)], 0)))
        (merged,) = e.node("Conv", inputs, convs[0].attrs, like=convs[0])
        split_node(e, merged, 1, sizes, [n.outputs[0].name for n in convs], like=convs[0])
        return e.commit()


def _linear_signature(graph: Graph, node: Node) -> tuple[Hashable, object]:
    """What two MatMuls (or Gemms) on one input must share to merge, or a Mismatch."""
    b = need(constant(graph, node.inputs[1]))
    require(len(b.shape) == 2, "right operand is not 2-D")
    if node.op_type == "MatMul":
        return ("MatMul",), None
    if len(node.inputs) > 2 and node.inputs[2]:
        require(len(need(constant(graph, node.inputs[2])).shape) == 1, "Gemm bias is not a vector")
    attrs = (node.attr("transA", 0), node.attr("transB", 0), node.attr("alpha", 1.0), node.attr("beta", 1.0))
    return ("Gemm", *attrs), None


class MergeParallelMatMuls(Rule):
    """``MatMul(x,B1), MatMul(x,B2)`` -> ``Split(MatMul(x, Concat(B1,B2)))`` (also Gemm)."""

    pattern = Pattern(Group("nodes", OpSet("MatMul", ("MatMul", "Gemm"))))
    merges = True

    def sites(self, graph):
        """Each group of two or more MatMuls or Gemms reading one left operand."""
        return shared_input_sites(graph, ("MatMul", "Gemm"))

    def check(self, graph, site):
        nodes = site["nodes"]
        chosen = [nodes[i] for i in _best_group(_signatures(graph, nodes, _linear_signature),
                                                lambda a, b: "attributes differ")]
        first = chosen[0]
        axis = 0 if first.op_type == "Gemm" and first.attr("transB", 0) else 1
        parts = [part(graph, n) for n in chosen]
        rank = len(graph.values[first.outputs[0].name].shape)
        return self._match(chosen, parts=parts, sizes=[p.weight.shape[axis] for p in parts], axis=axis, rank=rank)

    def apply(self, graph, match):
        nodes, parts, sizes = match.nodes, match["parts"], match["sizes"]
        first = nodes[0]
        e = Edit(graph).drop(*nodes)
        inputs = [first.inputs[0], e.weight("w", concat([p.weight for p in parts], match["axis"]))]
        if first.op_type == "Gemm" and any(p.bias is not None for p in parts):
            inputs.append(e.weight("b", concat([p.bias_or_zeros(c) for p, c in zip(parts, sizes)], 0)))
        (merged,) = e.node(first.op_type, inputs, first.attrs, like=first)
        split_node(e, merged, match["rank"] - 1, sizes, [n.outputs[0].name for n in nodes], like=first)
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

    pattern = Pattern(Group("matmuls", "MatMul"))
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
        matmuls = site["matmuls"]
        w = need(constant(graph, matmuls[0].inputs[1]))
        require(len(w.shape) == 2, "right operand is not 2-D")
        usable = [n for n in matmuls if _is_2d(graph, n.inputs[0])]
        require(len(usable) >= 2, "left operands are not 2-D with known shapes")
        chosen = _independent(graph, usable)
        require(len(chosen) >= 2, "the MatMuls sharing the weight depend on each other")
        return self._match(chosen, rows=[graph.values[n.inputs[0]].shape[0] for n in chosen])

    def apply(self, graph, match):
        nodes = match.nodes
        first = nodes[0]
        e = Edit(graph).drop(*nodes)
        (stacked,) = e.node("Concat", [n.inputs[0] for n in nodes], [make_attr("axis", 0)], like=first)
        (merged,) = e.node("MatMul", [stacked, first.inputs[1]], first.attrs, like=first)
        split_node(e, merged, 0, match["rows"], [n.outputs[0].name for n in nodes], like=first)
        return e.commit()


def _pieces_in_order(graph: Graph, split: Node, convs: tuple[Node, ...]) -> None:
    """A Mismatch unless ``convs`` read ``split``'s pieces, in order, each read by its Conv only."""
    require([c.inputs[0] for c in convs] == list(split.output_names), "the Convs do not read the Split's pieces in order")
    for c in convs:
        need(single_consumer(graph, c.inputs[0]), "a piece of the Split is read by more than its Conv")


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

    pattern = Pattern(
        Root("cat", "Concat"),
        Inputs("convs", "Conv", of="cat", sole=True, reason="a concatenated piece is not a Conv's output"),
        Input("split", "Split", of="convs", reason="the Convs do not read the pieces of a Split"),
    )
    merges = True

    def check(self, graph, site):
        cat, split, convs = site["cat"], site["split"], site["convs"]
        require(is_static(graph, cat.outputs[0].name) and _channel_axis(graph, cat) == 1, "not a Concat of channels")
        _pieces_in_order(graph, split, convs)
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
        parts = [part(graph, c) for c in convs]
        return self._match([cat, split, *convs], kernel=kernel, pads=next(iter(pads)), parts=parts,
                           weights=[_embedded(p.weight, kernel) for p in parts], group=sum(p.group for p in params))

    def apply(self, graph, match):
        cat, split, *convs = match.nodes
        parts, weights = match["parts"], match["weights"]
        e = Edit(graph).drop(cat, split, *convs)
        inputs = [split.inputs[0], e.weight("w", concat(weights, 0))]
        if any(p.bias is not None for p in parts):
            inputs.append(e.weight("b", concat([p.bias_or_zeros(w.shape[0]) for p, w in zip(parts, weights)], 0)))
        attrs = attrs_with(convs[0], kernel_shape=list(match["kernel"]), pads=list(match["pads"]), group=match["group"],
                           auto_pad=None)
        e.node("Conv", inputs, attrs, outputs=[cat.outputs[0].name], like=convs[0])
        return e.commit()


def _embedded(w: Weight, kernel) -> Weight:
    """Weight ``w`` with its kernel zero-padded, centred, to ``kernel`` (``w`` when it has that kernel)."""
    grow = tuple(((k - pk) // 2,) * 2 for k, pk in zip(kernel, w.shape[2:]))
    return Pad(w, ((0, 0), (0, 0)) + grow) if any(g != (0, 0) for g in grow) else w


def _channel_axis(graph: Graph, node: Node) -> int:
    """The axis attribute of a Concat or Split, made non-negative."""
    return axis_of(graph, node, node.inputs[0])


RULES = [MergeParallelConvs(), MergeParallelMatMuls(), BatchSharedWeightMatMuls(), MergeSplitConvs()]

