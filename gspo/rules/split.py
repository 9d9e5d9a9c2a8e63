"""Split one operator into two parallel halves along its output channels (the inverse of merge).

This is what lets the search trade fusion for parallelism: a half can run on another stream.
"""

from __future__ import annotations

from gspo.ir import slice_weight
from gspo.ir.builder import make_attr
from gspo.rules.base import Rule, constant, need, plain_conv, require
from gspo.rules.edit import Edit
from gspo.rules.merge import part
from gspo.rules.pattern import Pattern, Root

__all__ = ["SplitConv", "SplitMatMul", "RULES"]


class SplitConv(Rule):
    """``Conv(x, w)`` -> ``Concat(Conv(x, w[:h]), Conv(x, w[h:]))`` along output channels."""

    pattern = Pattern(Root("conv", "Conv"))
    greedy = False

    def check(self, graph, site):
        conv = site["conv"]
        require(plain_conv(graph, conv).cout >= 2, "fewer than 2 output channels")
        return self._match([conv], part=part(graph, conv))

    def apply(self, graph, match):
        conv = match.nodes[0]
        w, b = match["part"].weight, match["part"].bias
        half = w.shape[0] // 2
        e = Edit(graph).drop(conv)
        outs = []
        for lo, hi in ((0, half), (half, w.shape[0])):
            inputs = [conv.inputs[0], e.weight("w", slice_weight(w, 0, lo, hi))]
            if b is not None:
                inputs.append(e.weight("b", slice_weight(b, 0, lo, hi)))
            outs += e.node("Conv", inputs, conv.attrs, like=conv)
        e.node("Concat", outs, [make_attr("axis", 1)], outputs=[conv.outputs[0].name], like=conv)
        return e.commit()


class SplitMatMul(Rule):
    """``MatMul(x, B)`` -> ``Concat(MatMul(x, B[:, :h]), MatMul(x, B[:, h:]))`` along output columns."""

    pattern = Pattern(Root("mm", "MatMul"))
    greedy = False

    def check(self, graph, site):
        mm = site["mm"]
        b = need(constant(graph, mm.inputs[1]))
        require(len(b.shape) == 2, "right operand is not 2-D")
        require(b.shape[1] >= 2, "fewer than 2 output columns")
        out = graph.values.get(mm.outputs[0].name)
        require(out is not None and out.is_static, "unknown shapes")
        return self._match([mm], weight=b, rank=len(out.shape))

    def apply(self, graph, match):
        mm, b, rank = match.nodes[0], match["weight"], match["rank"]
        half = b.shape[1] // 2
        e = Edit(graph).drop(mm)
        outs = []
        for lo, hi in ((0, half), (half, b.shape[1])):
            outs += e.node("MatMul", [mm.inputs[0], e.weight("w", slice_weight(b, 1, lo, hi))], mm.attrs, like=mm)
        e.node("Concat", outs, [make_attr("axis", rank - 1)], outputs=[mm.outputs[0].name], like=mm)
        return e.commit()


RULES = [SplitConv(), SplitMatMul()]
