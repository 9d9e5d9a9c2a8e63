"""Removing ops: pass-throughs, pairs that collapse into one, and pads and slices a Conv absorbs."""

from __future__ import annotations

from gspo.ir import Graph, Literal, Node, Pad
from gspo.rules.base import (
    Mismatch,
    OpSet,
    Rule,
    array,
    attrs_with,
    constant,
    conv_params,
    need,
    require,
    single_consumer,
    static_values,
)
from gspo.rules.edit import Edit, bypass, bypass_check, int64s
from gspo.rules.pattern import Input, Pattern, Root

__all__ = [
    "RemoveIdentity",
    "FoldPadIntoConv",
    "CollapseTransposes",
    "CollapseReshapes",
    "FoldChannelSlice",
    "RULES",
]

#: The ops :class:`RemoveIdentity` removes when they provably return their input.
PASS_THROUGH = ("Identity", "Dropout", "Slice", "Reshape", "Expand", "Cast", "Flatten", "Transpose", "Pad", "Concat",
                "Split")


def _ints(graph: Graph, name: str) -> list[int]:
    """A small constant integer input as a list, or a Mismatch."""
    return [int(v) for v in array(graph, need(constant(graph, name))).reshape(-1)]


def _optional_ints(graph: Graph, node: Node, index: int) -> list[int] | None:
    """Input ``index`` of ``node`` as constant integers (``None``: absent or not a constant)."""
    if len(node.inputs) <= index or not node.inputs[index]:
        return None
    try:
        return _ints(graph, node.inputs[index])
    except Mismatch:
        return None


def passes_through(graph: Graph, node: Node) -> None:
    """A Mismatch unless ``node`` provably passes its first input through unchanged (same
    shape, same type, same elements in the same order)."""
    x, y = static_values(graph, node.inputs[0], node.outputs[0].name)
    op = node.op_type
    require(x.shape == y.shape and x.dtype == y.dtype, f"{op} changes the shape or type")
    if op in ("Reshape", "Expand", "Cast", "Flatten"):
        return
    if op == "Transpose":
        perm = node.attr("perm")
        require(list(perm) == sorted(perm) if perm is not None else len(x.shape) < 2, "the permutation moves axes")
    elif op in ("Concat", "Split"):
        require(len(node.inputs) == 1 and len(node.outputs) == 1, f"{op} of several pieces")
    elif op == "Slice":
        steps = _optional_ints(graph, node, 4) if len(node.inputs) > 4 and node.inputs[4] else [1]
        require(steps is not None and all(s == 1 for s in steps), "Slice steps are not constant ones")
    elif op == "Pad":
        pads = node.attr("pads") if graph.opset < 11 else _optional_ints(graph, node, 1)
        require(pads is not None and not any(pads), "Pad adds elements")
    else:
        raise Mismatch(f"{op} is not a pass-through")


class RemoveIdentity(Rule):
    """``Identity(x)`` -> ``x`` (also inference ``Dropout``, and a Slice, Reshape, Expand, Cast,
    Flatten, Transpose, Pad, Concat or Split that provably returns its input unchanged)."""

    pattern = Pattern(Root("node", OpSet("Identity", PASS_THROUGH)))

    def check(self, graph, site):
        node = site["node"]
        if node.op_type == "Dropout":
            training = node.attr("training_mode", 0) or (len(node.inputs) > 2 and node.inputs[2])
            require(not training, "Dropout may be in training mode")
            require(not any(v.name for v in node.outputs[1:]), "Dropout mask is used")
        elif node.op_type != "Identity":
            passes_through(graph, node)
        plan = need(bypass_check(graph, node.outputs[0].name, node.inputs[0], [node]))
        return self._match([node], bypass=plan)

    def apply(self, graph, match):
        e = Edit(graph)
        bypass(e, match["bypass"])
        return e.commit()


def _pad_value(graph: Graph, pad: Node) -> float:
    """The constant a Pad fills with (opset 11 on: its optional third input)."""
    if graph.opset < 11:
        return pad.attr("value", 0.0)
    if len(pad.inputs) > 2 and pad.inputs[2]:
        v = need(constant(graph, pad.inputs[2]))
        return float(array(graph, v).reshape(-1)[0]) if v.size else 0.0
    return 0.0


def _pad_amounts(graph: Graph, pad: Node, rank: int) -> list[int]:
    """A Pad's begin and end amounts over every axis of a rank-``rank`` input, or a Mismatch."""
    if graph.opset < 11:
        return list(pad.attr("pads", ()))
    require(len(pad.inputs) > 1 and bool(pad.inputs[1]), "no pads")
    pads = _ints(graph, pad.inputs[1])
    if len(pad.inputs) > 3 and pad.inputs[3]:
        axes = _ints(graph, pad.inputs[3])
        full = [0] * (2 * rank)
        for i, a in enumerate(axes):
            a = a + rank if a < 0 else a
            full[a], full[rank + a] = pads[i], pads[len(axes) + i]
        pads = full
    return pads


def zero_pads(graph: Graph, pad: Node) -> list[int]:
    """The pads of a constant-zero, non-negative Pad over every axis, or a Mismatch."""
    require(pad.attr("mode", b"constant") in (b"constant", "constant"), "Pad is not constant padding")
    x = graph.values.get(pad.inputs[0])
    require(x is not None and x.shape is not None, "unknown shapes")
    pads = _pad_amounts(graph, pad, len(x.shape))
    require(_pad_value(graph, pad) == 0.0, "Pad fills with a non-zero value")
    require(not any(v < 0 for v in pads), "Pad crops")
    return pads


class FoldPadIntoConv(Rule):
    """``Conv(Pad(x, p))`` -> ``Conv(x)`` with its pads grown by ``p`` (zero padding of spatial axes)."""

    pattern = Pattern(Root("conv", "Conv"), Input("pad", "Pad", of="conv", sole=True))

    def check(self, graph, site):
        conv, pad = site["conv"], site["pad"]
        extra = zero_pads(graph, pad)
        p = need(conv_params(graph, conv))
        require(conv.attr("auto_pad", b"NOTSET") in (b"NOTSET", "NOTSET"), "Conv pads automatically")
        rank = len(extra) // 2
        require(not any(extra[i] or extra[rank + i] for i in (0, 1)), "Pad pads the batch or channel axis")
        n = rank - 2
        pads = [p.pads[i] + extra[2 + i] for i in range(n)] + [p.pads[n + i] + extra[rank + 2 + i] for i in range(n)]
        return self._match([conv, pad], pads=tuple(pads))

    def apply(self, graph, match):
        conv, pad = match.nodes
        e = Edit(graph).drop(conv, pad)
        attrs = attrs_with(conv, pads=list(match["pads"]), auto_pad=None)
        e.node("Conv", [pad.inputs[0], *conv.inputs[1:]], attrs, outputs=[conv.outputs[0].name], like=conv)
        return e.commit()


def _pair(op: str) -> Pattern:
    """``op`` of ``op``: the outer one, and the inner one, read by the outer only."""
    return Pattern(Root("outer", op), Input("inner", op, of="outer", sole=True))


class CollapseTransposes(Rule):
    """``Transpose(Transpose(x, p1), p2)`` -> ``Transpose(x, p1[p2])`` (or ``x`` when that is the identity)."""

    pattern = _pair("Transpose")

    def check(self, graph, site):
        t2, t1 = site["outer"], site["inner"]
        rank = len(graph.values[t1.inputs[0]].shape or ())
        p1 = t1.attr("perm", tuple(reversed(range(rank))))
        p2 = t2.attr("perm", tuple(reversed(range(rank))))
        perm = tuple(p1[i] for i in p2)
        plan = None
        if perm == tuple(range(rank)):
            plan = need(bypass_check(graph, t2.outputs[0].name, t1.inputs[0], [t1, t2]))
        return self._match([t2, t1], perm=perm, bypass=plan)

    def apply(self, graph, match):
        t2, t1 = match.nodes
        perm = match["perm"]
        e = Edit(graph)
        if match["bypass"] is not None:
            bypass(e, match["bypass"])
        else:
            e.drop(t1, t2)
            e.node("Transpose", [t1.inputs[0]], attrs_with(t2, perm=list(perm)), outputs=[t2.outputs[0].name], like=t2)
        return e.commit()


class CollapseReshapes(Rule):
    """``Reshape(Reshape(x, s1), s2)`` -> ``Reshape(x, s2)`` (or ``x`` when the shape comes back)."""

    pattern = _pair("Reshape")

    def check(self, graph, site):
        r2, r1 = site["outer"], site["inner"]
        x, out = static_values(graph, r1.inputs[0], r2.outputs[0].name)
        plan = None
        if x.shape == out.shape:
            plan = need(bypass_check(graph, r2.outputs[0].name, r1.inputs[0], [r1, r2]))
        return self._match([r2, r1], bypass=plan, shape=out.shape)

    def apply(self, graph, match):
        r2, r1 = match.nodes
        e = Edit(graph)
        if match["bypass"] is not None:
            bypass(e, match["bypass"])
        else:
            shape = e.weight("shape", Literal.from_array(int64s(match["shape"])))
            e.drop(r1, r2)
            e.node("Reshape", [r1.inputs[0], shape], (), outputs=[r2.outputs[0].name], like=r2)
        return e.commit()


def _slice_arguments(graph: Graph, sl: Node) -> tuple[list[int], list[int], list[int]]:
    """A Slice's starts, axes and steps (attribute or constant-input form), or a Mismatch."""
    if "starts" in {a.name for a in sl.attrs}:
        starts = list(sl.attr("starts"))
        return starts, list(sl.attr("axes", range(len(starts)))), [1] * len(starts)
    starts, axes, steps = (_ints(graph, sl.inputs[i]) if len(sl.inputs) > i and sl.inputs[i] else None
                           for i in (1, 3, 4))
    axes = axes if axes is not None else list(range(len(starts)))
    steps = steps if steps is not None else [1] * len(starts)
    return starts, axes, steps


def leading_channel_slice(graph: Graph, sl: Node) -> int:
    """How many leading channels ``sl`` keeps when it slices axis 1 only, from 0, step 1, or a Mismatch."""
    x, y = static_values(graph, sl.inputs[0], sl.outputs[0].name)
    starts, axes, steps = _slice_arguments(graph, sl)
    axes = [a % len(x.shape) for a in axes]
    require(len(x.shape) >= 2 and axes == [1] and steps == [1] and starts == [0], "not a slice of the leading channels")
    require(0 < y.shape[1] < x.shape[1], "the slice keeps every channel")
    return y.shape[1]


class FoldChannelSlice(Rule):
    """``Conv(Slice(y)[:, :C], w)`` -> ``Conv(y, w zero-padded to y's channels)`` (group 1).

    The extra input channels meet zero weights; with finite inputs (what every rule assumes: a
    zero weight times an infinity is NaN) the output is unchanged. Removes the Slice that
    :class:`~gspo.rules.enlarge.PadDepthwiseChannels` leaves before a pointwise convolution
    (one op fewer; on NASNet-A Mobile measured no faster than keeping the Slices: 1.13x vs 1.11x
    and 1.15x vs 1.18x over the unpadded model in two interleaved sets).
    """

    pattern = Pattern(Root("conv", "Conv"), Input("slice", "Slice", of="conv"))

    def check(self, graph, site):
        conv, sl = site["conv"], site["slice"]
        require(conv.attr("group", 1) == 1, "group is not 1")
        kept = leading_channel_slice(graph, sl)
        w = need(constant(graph, conv.inputs[1]))
        require(len(w.shape) >= 3 and w.shape[1] == kept, "weight does not match the sliced channels")
        extra = graph.values[sl.inputs[0]].shape[1] - kept
        only = isinstance(single_consumer(graph, sl.outputs[0].name), Node)
        return self._match([conv, sl], weight=w, extra=extra, drop_slice=only)

    def apply(self, graph, match):
        conv, sl = match.nodes
        x, w, extra = sl.inputs[0], match["weight"], match["extra"]
        e = Edit(graph).drop(conv)
        if match["drop_slice"]:
            e.drop(sl)
        inputs = [x, e.weight("w", Pad(w, ((0, 0), (0, extra)) + ((0, 0),) * (len(w.shape) - 2))), *conv.inputs[2:]]
        e.node("Conv", inputs, conv.attrs, outputs=[conv.outputs[0].name], like=conv)
        return e.commit()


RULES = [RemoveIdentity(), FoldPadIntoConv(), CollapseTransposes(), CollapseReshapes(), FoldChannelSlice()]
