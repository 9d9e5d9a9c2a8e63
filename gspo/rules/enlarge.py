"""Kernel enlargement (TASO's enlarge): zero-pad a kernel to its sibling's size.

A Conv whose kernel is smaller than a sibling's (same input, stride and dilation) gets its
kernel zero-padded to the elementwise maximum of the two, and its pads grown by the same
amount, so the output is unchanged; afterwards the two can merge (GSPO Fig. 1: a 1x3 and a
3x1 convolution both become 3x3 and merge).
"""

from __future__ import annotations

from gspo.ir import Pad
from gspo.rules.base import Edit, Fail, Rule, attrs_with, constant, conv_params
from gspo.rules.merge import readers_by_input

__all__ = ["EnlargeConvKernel", "RULES"]


def _enlarged_pads(p, target):
    n = len(p.kernel)
    grow = [(t - k) // 2 * d for t, k, d in zip(target, p.kernel, p.dilations)]
    return tuple(p.pads[i] + grow[i] for i in range(n)) + tuple(p.pads[n + i] + grow[i] for i in range(n))


class EnlargeConvKernel(Rule):
    """``Conv(x, w[kxk])`` beside a larger sibling -> ``Conv(x, zero-pad(w)[KxK])`` with pads grown to match."""

    pattern = ("Conv", "Conv")

    def sites(self, graph):
        for convs in readers_by_input(graph, ("Conv",)).values():
            for small in convs:
                for big in convs:
                    if small is not big:
                        yield (small, big)

    def check(self, graph, site):
        small, big = site
        ps, pb = conv_params(graph, small), conv_params(graph, big)
        for p in (ps, pb):
            if isinstance(p, Fail):
                return p
        if ps.group != 1 or pb.group != 1:
            return Fail("group is not 1")
        if ps.strides != pb.strides:
            return Fail("strides differ")
        if ps.dilations != pb.dilations:
            return Fail("dilations differ")
        w = constant(graph, small.inputs[1])
        if isinstance(w, Fail):
            return w
        target = tuple(max(a, b) for a, b in zip(ps.kernel, pb.kernel))
        if target == ps.kernel:
            return Fail("the sibling's kernel is not larger")
        if any((t - k) % 2 for t, k in zip(target, ps.kernel)):
            return Fail("kernel sizes differ by an odd amount")
        new_pads = _enlarged_pads(ps, target)
        if new_pads != _enlarged_pads(pb, target):
            return Fail("pads would not match the sibling's")
        return self._match([small, big], kernel=target, pads=new_pads)

    def match(self, graph, explain=False):
        seen = set()
        for m in super().match(graph, explain):
            if hasattr(m, "rule"):
                key = (m.nodes[0].key, m["kernel"], m["pads"])
                if key in seen:
                    continue
                seen.add(key)
            yield m

    def apply(self, graph, match):
        small = match.nodes[0]
        p = conv_params(graph, small)
        target = match["kernel"]
        w = graph.weights[small.inputs[1]]
        grow = tuple(((t - k) // 2,) * 2 for t, k in zip(target, p.kernel))
        e = Edit(graph).drop(small)
        inputs = list(small.inputs)
        inputs[1] = e.weight("w", Pad(w, ((0, 0), (0, 0)) + grow))
        attrs = attrs_with(small, kernel_shape=list(target), pads=list(match["pads"]), auto_pad=None)
        e.node("Conv", inputs, attrs, outputs=[small.outputs[0].name], like=small)
        return e.commit()


RULES = [EnlargeConvKernel()]
