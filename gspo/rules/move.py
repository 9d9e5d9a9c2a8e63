"""Elementwise ops move through Concat and Split; Split/Concat pairs that undo each other vanish.

An *elementwise* op here is a unary op (Relu, Sigmoid, Tanh, ...; Clip with constant bounds), or
Add/Sub/Mul/Div/Max/Min with one constant operand. A constant that varies along the concat or
split axis is sliced per piece (lazily); one that is broadcast along it is shared.
"""

from __future__ import annotations

from dataclasses import dataclass

from gspo.ir import Graph, Node, fresh_name, slice_weight
from gspo.ir.shapes import UNARY_OPS
from gspo.rules.base import (
    Mismatch,
    OpSet,
    Rule,
    axis_of,
    broadcasts_within,
    can_rewire,
    constant,
    is_static,
    need,
    require,
    split_sizes,
)
from gspo.rules.edit import Edit, bypass, bypass_check, split_node
from gspo.rules.pattern import EITHER, Input, Inputs, Pattern, Readers, Root

__all__ = [
    "PushThroughConcat",
    "PullThroughConcat",
    "PushThroughSplit",
    "PullThroughSplit",
    "RemoveSplitConcat",
    "RemoveConcatSplit",
    "SwapNestedSplits",
    "RULES",
]

_UNARY = tuple(sorted(UNARY_OPS - {"Identity", "Dropout", "Not"}))
_BINARY = ("Add", "Sub", "Mul", "Div", "Max", "Min")
ELEMENTWISE = _UNARY + _BINARY


@dataclass(frozen=True)
class _Elementwise:
    var: int  # index of the variable input
    const: str | None  # the constant operand of a binary op


def elementwise(graph: Graph, node: Node) -> _Elementwise:
    """``node`` as an elementwise op of one variable operand, or a Mismatch saying why it is not one.

    The variable operand must have the output's shape: an op whose constant broadcasts it to a
    larger shape (``Add(x[3,4], c[2,3,4])``) does not commute with a Split or Concat of ``x``.
    """
    if node.op_type in _UNARY:
        for name in node.inputs[1:]:
            if name:
                need(constant(graph, name), f"{node.op_type} has a non-constant parameter")
        ew = _Elementwise(0, None)
    elif node.op_type in _BINARY and len(node.inputs) == 2:
        consts = [i for i, name in enumerate(node.inputs) if name in graph.weights]
        require(len(consts) == 1, "neither or both operands are constant")
        ew = _Elementwise(1 - consts[0], node.inputs[consts[0]])
    else:
        raise Mismatch(f"{node.op_type} is not elementwise")
    require(is_static(graph, node.inputs[ew.var], node.outputs[0].name), "unknown shapes")
    var, out = graph.values[node.inputs[ew.var]], graph.values[node.outputs[0].name]
    require(var.shape == out.shape, "the constant broadcasts the variable operand to a larger shape")
    return ew


def _const_pieces(graph: Graph, ew: _Elementwise, shape, axis: int, sizes) -> list:
    """Per piece, the constant (a weight, or ``None`` for unary ops), or a Mismatch when it cannot be cut."""
    if ew.const is None:
        return [None] * len(sizes)
    c = graph.weights[ew.const]
    broadcasts_within(shape, c.shape)
    lead = len(shape) - len(c.shape)
    if axis < lead or c.shape[axis - lead] == 1:
        return [c] * len(sizes)
    pieces, start = [], 0
    for s in sizes:
        pieces.append(slice_weight(c, axis - lead, start, start + s))
        start += s
    return pieces


def _inputs_with(node: Node, ew: _Elementwise, var: str, const: str | None) -> list[str]:
    ins = list(node.inputs)
    ins[ew.var] = var
    if ew.const is not None:
        ins[1 - ew.var] = const
    return ins


_axis = axis_of


#: Any elementwise op (as a pattern position).
_EW = OpSet("Relu", ELEMENTWISE)


class PushThroughConcat(Rule):
    """``Relu(Concat(a, b))`` -> ``Concat(Relu(a), Relu(b))`` (any elementwise op)."""

    pattern = Pattern(Root("node", _EW), Input("cat", "Concat", of="node", at=EITHER, sole=True))
    greedy = False

    def check(self, graph, site):
        node, cat = site["node"], site["cat"]
        ew = elementwise(graph, node)
        require(node.inputs[ew.var] == cat.outputs[0].name, "the Concat is not the variable operand")
        require(is_static(graph, *cat.inputs, cat.outputs[0].name), "unknown shapes")
        axis = _axis(graph, cat, cat.outputs[0].name)
        sizes = [graph.values[i].shape[axis] for i in cat.inputs]
        pieces = _const_pieces(graph, ew, graph.values[cat.outputs[0].name].shape, axis, sizes)
        return self._match([node, cat], ew=ew, pieces=pieces)

    def apply(self, graph, match):
        node, cat = match.nodes
        ew = match["ew"]
        e = Edit(graph).drop(node, cat)
        outs = []
        for part, c in zip(cat.inputs, match["pieces"]):
            c_name = e.weight("c", c) if c is not None else None
            outs += e.node(node.op_type, _inputs_with(node, ew, part, c_name), node.attrs, like=node)
        e.node("Concat", outs, cat.attrs, outputs=[node.outputs[0].name], like=cat)
        return e.commit()


def _same_elementwise(graph: Graph, nodes, axis: int, shape) -> _Elementwise:
    """The common elementwise form of ``nodes`` (same op, attributes, shared constants), or a Mismatch."""
    first = nodes[0]
    ew = elementwise(graph, first)
    params = [i for k, i in enumerate(first.inputs) if k != ew.var]
    for n in nodes[1:]:
        other = elementwise(graph, n)
        require(n.op_type == first.op_type and n.attrs == first.attrs, "the pieces' ops differ")
        same = other == ew and [i for k, i in enumerate(n.inputs) if k != ew.var] == params
        require(same, "the pieces' constants differ")
    if ew.const is not None:
        c = graph.weights[ew.const]
        lead = len(shape) - len(c.shape)
        require(lead >= 0, "the constant broadcasts the output to a larger shape")
        broadcasts_within(shape, c.shape)
        require(axis < lead or c.shape[axis - lead] == 1, "the constant varies along the axis")
    return ew


class PullThroughConcat(Rule):
    """``Concat(Relu(a), Relu(b))`` -> ``Relu(Concat(a, b))`` (any elementwise op)."""

    pattern = Pattern(Root("cat", "Concat"),
                      Inputs("prods", _EW, of="cat", sole=True, reason="a piece is not produced by an elementwise op"))
    greedy = False

    def check(self, graph, site):
        cat, prods = site["cat"], site["prods"]
        require(len({p.key for p in prods}) == len(prods), "a piece appears twice")
        require(is_static(graph, cat.outputs[0].name), "unknown shapes")
        axis = _axis(graph, cat, cat.outputs[0].name)
        ew = _same_elementwise(graph, prods, axis, graph.values[cat.outputs[0].name].shape)
        return self._match([cat, *prods], ew=ew)

    def apply(self, graph, match):
        cat, *prods = match.nodes
        ew = match["ew"]
        e = Edit(graph).drop(cat, *prods)
        (joined,) = e.node("Concat", [p.inputs[ew.var] for p in prods], cat.attrs, like=cat)
        e.node(prods[0].op_type, _inputs_with(prods[0], ew, joined, ew.const), prods[0].attrs,
               outputs=[cat.outputs[0].name], like=prods[0])
        return e.commit()


class PushThroughSplit(Rule):
    """``Split(Relu(x))`` -> ``Relu`` of each piece of ``Split(x)`` (any elementwise op)."""

    pattern = Pattern(Root("split", "Split"),
                      Input("node", _EW, of="split", sole=True, reason="the split tensor is not an elementwise op's output"))
    greedy = False

    def check(self, graph, site):
        split, node = site["split"], site["node"]
        ew = elementwise(graph, node)
        sizes = split_sizes(graph, split)
        require(is_static(graph, split.inputs[0]), "unknown shapes")
        axis = _axis(graph, split, split.inputs[0])
        pieces = _const_pieces(graph, ew, graph.values[split.inputs[0]].shape, axis, sizes)
        return self._match([split, node], ew=ew, sizes=sizes, axis=axis, pieces=pieces)

    def apply(self, graph, match):
        split, node = match.nodes
        ew, sizes, axis = match["ew"], match["sizes"], match["axis"]
        x = node.inputs[ew.var]
        names = [fresh_name("split", x, axis, tuple(sizes), i) for i in range(len(sizes))]
        e = Edit(graph).drop(split, node)
        split_node(e, x, axis, sizes, names, like=split)
        for piece, c, out in zip(names, match["pieces"], split.outputs):
            c_name = e.weight("c", c) if c is not None else None
            e.node(node.op_type, _inputs_with(node, ew, piece, c_name), node.attrs, outputs=[out.name], like=node)
        return e.commit()


class PullThroughSplit(Rule):
    """``Relu`` of each piece of ``Split(x)`` -> ``Split(Relu(x))`` (any elementwise op)."""

    pattern = Pattern(Root("split", "Split"),
                      Readers("users", _EW, of="split", reason="a piece is not read by an elementwise op"))
    greedy = False

    def check(self, graph, site):
        split, users = site["split"], site["users"]
        require(len({u.key for u in users}) == len(users), "one node reads two pieces")
        require(is_static(graph, split.inputs[0]), "unknown shapes")
        axis = _axis(graph, split, split.inputs[0])
        ew = _same_elementwise(graph, users, axis, graph.values[split.inputs[0]].shape)
        variable = all(u.inputs[ew.var] == v.name for u, v in zip(users, split.outputs))
        require(variable, "the pieces are not the ops' variable inputs")
        return self._match([split, *users], ew=ew, sizes=split_sizes(graph, split), axis=axis)

    def apply(self, graph, match):
        split, *users = match.nodes
        ew = match["ew"]
        e = Edit(graph).drop(split, *users)
        (whole,) = e.node(users[0].op_type, _inputs_with(users[0], ew, split.inputs[0], ew.const), users[0].attrs, like=users[0])
        split_node(e, whole, match["axis"], match["sizes"], [u.outputs[0].name for u in users], like=split)
        return e.commit()


def _only_reader(graph: Graph, split: Node, cat: Node) -> bool:
    """Whether ``cat`` is the only reader of ``split``'s pieces (none is a graph output)."""
    return all(u == cat for v in split.outputs for u in graph.consumers.get(v.name, ())) and not any(
        v.name in graph.output_names() for v in split.outputs
    )


class RemoveSplitConcat(Rule):
    """``Concat(Split(x))`` of all the pieces in order, on the same axis -> ``x``."""

    pattern = Pattern(Root("cat", "Concat"), Input("split", "Split", of="cat"))
    greedy = False

    def check(self, graph, site):
        cat, split = site["cat"], site["split"]
        require(tuple(cat.inputs) == split.output_names, "not all pieces, in order")
        require(is_static(graph, split.inputs[0]), "unknown shapes")
        require(_axis(graph, cat, cat.outputs[0].name) == _axis(graph, split, split.inputs[0]), "axes differ")
        dropping = [cat] + ([split] if _only_reader(graph, split, cat) else [])
        plan = need(bypass_check(graph, cat.outputs[0].name, split.inputs[0], dropping))
        return self._match([cat, split], bypass=plan)

    def apply(self, graph, match):
        e = Edit(graph)
        bypass(e, match["bypass"])
        return e.commit()


class RemoveConcatSplit(Rule):
    """``Split(Concat(a, b))`` at the same boundaries, on the same axis -> ``a, b``."""

    pattern = Pattern(Root("split", "Split"), Input("cat", "Concat", of="split", sole=True))
    greedy = False

    def check(self, graph, site):
        split, cat = site["split"], site["cat"]
        require(is_static(graph, *cat.inputs, split.inputs[0]), "unknown shapes")
        axis = _axis(graph, split, split.inputs[0])
        require(_axis(graph, cat, cat.outputs[0].name) == axis, "axes differ")
        require(split_sizes(graph, split) == [graph.values[i].shape[axis] for i in cat.inputs], "boundaries differ")
        for v in split.outputs:
            need(can_rewire(graph, v.name))
        return self._match([split, cat])

    def apply(self, graph, match):
        split, cat = match.nodes
        e = Edit(graph).drop(split, cat)
        e.rewire_all({v.name: part for v, part in zip(split.outputs, cat.inputs)})
        return e.commit()


class SwapNestedSplits(Rule):
    """``Split(x, a)`` into n pieces each split alike on axis b into m -> ``Split(x, b)`` first (m < n).

    ``1 + m`` Splits instead of ``1 + n`` (applied only when that is fewer, so it never undoes
    itself).
    Every final piece keeps its name. An unrolled RNN's batched input projection is split by gate,
    then each gate by step; by step first, each step's slice lines up with the step's recurrent
    projection, which :class:`~gspo.rules.combine.MergeBinaryOfSplits` can then add once.
    """

    pattern = Pattern(Root("outer", "Split"), Readers("inners", "Split", of="outer", reason="a piece is not split again"))

    def check(self, graph, site):
        outer, inners = site["outer"], site["inners"]
        require(is_static(graph, outer.inputs[0]), "unknown shapes")
        split_again = all(u.inputs[0] == v.name for u, v in zip(inners, outer.outputs))
        require(split_again, "a piece is not split again")
        require(len({u.key for u in inners}) == len(inners), "one Split reads two pieces")
        a = _axis(graph, outer, outer.inputs[0])
        b = {_axis(graph, u, u.inputs[0]) for u in inners}
        require(len(b) == 1 and a not in b, "the pieces are split on different axes, or on the same axis")
        sizes = [split_sizes(graph, u) for u in inners]
        outer_sizes = split_sizes(graph, outer)
        require(all(s == sizes[0] for s in sizes), "the pieces are split at different boundaries")
        require(len(sizes[0]) < len(inners), "swapping would not make fewer Splits")
        return self._match([outer, *inners], a=a, b=b.pop(), outer_sizes=outer_sizes, inner_sizes=sizes[0])

    def apply(self, graph, match):
        outer, *inners = match.nodes
        x, a, b = outer.inputs[0], match["a"], match["b"]
        outer_sizes, inner_sizes = match["outer_sizes"], match["inner_sizes"]
        names = [fresh_name("split", x, b, tuple(inner_sizes), j) for j in range(len(inner_sizes))]
        e = Edit(graph).drop(outer, *inners)
        split_node(e, x, b, inner_sizes, names, like=inners[0])
        for j, part in enumerate(names):
            split_node(e, part, a, outer_sizes, [u.outputs[j].name for u in inners], like=outer)
        return e.commit()


RULES = [
    PushThroughConcat(),
    PullThroughConcat(),
    PushThroughSplit(),
    PullThroughSplit(),
    RemoveSplitConcat(),
    RemoveConcatSplit(),
    SwapNestedSplits(),
]
