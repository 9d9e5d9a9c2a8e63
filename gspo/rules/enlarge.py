"""Enlargement: zero-pad a weight so that the op becomes a better one, output unchanged.

Kernel enlargement (TASO's enlarge): a Conv whose kernel is smaller than a sibling's (same
input, stride and dilation) gets its kernel zero-padded to the elementwise maximum of the two,
and its pads grown by the same amount, so the output is unchanged; afterwards the two can merge
(GSPO Fig. 1: a 1x3 and a 3x1 convolution both become 3x3 and merge).

Channel padding: a depthwise Conv whose channel count is not a multiple of
:data:`CHANNEL_MULTIPLE` gets zero channels added (input padded, weight and bias padded, the
extra output channels sliced off). onnxruntime runs such convolutions on its plain NCHW path,
one small GEMM per channel; padded, they take its blocked (NCHWc) depthwise kernel. Measured
here (onnxruntime 1.31, AVX-512, 7x7 depthwise at 56x56 after a 1x1 conv): 11 channels 1046 us
vs 16 channels 273 us, 22 vs 32 channels 1522 vs 408 us; every count that is a multiple of 4
(12, 20, 24, 28, 36, 40, 44) ran at the fast rate, every other (14, 18, 26, 30) at the slow one.
Ordinary convolutions and pools showed no such step. Whether padding pays is the cost model's
and the board's call, as for every rule.
"""

from __future__ import annotations

from gspo.ir import Literal, Pad
from gspo.ir.builder import make_attr
from gspo.ir.features import DEPTHWISE_CHANNEL_MULTIPLE as CHANNEL_MULTIPLE
from gspo.ir.features import depthwise_channels, is_misaligned_depthwise
from gspo.rules.base import (
    Match,
    Rule,
    attrs_with,
    constant_params,
    conv_mismatch,
    conv_params,
    fail_if,
    need,
    require,
)
from gspo.rules.edit import Edit, int64s
from gspo.rules.merge import readers_by_input
from gspo.rules.pattern import Pattern, Root, SiteNode

__all__ = ["CHANNEL_MULTIPLE", "EnlargeConvKernel", "PadDepthwiseChannels", "pad_channels", "slice_channels", "RULES"]


def _enlarged_pads(p, target):
    """Pads of a Conv whose kernel is zero-padded, centred, to ``target``."""
    n = len(p.kernel)
    grow = [(t - k) // 2 * d for t, k, d in zip(target, p.kernel, p.dilations)]
    return tuple(p.pads[i] + grow[i] for i in range(n)) + tuple(p.pads[n + i] + grow[i] for i in range(n))


class EnlargeConvKernel(Rule):
    """``Conv(x, w[kxk])`` beside a larger sibling -> ``Conv(x, zero-pad(w)[KxK])`` with pads grown to match."""

    pattern = Pattern(Root("small", "Conv"), SiteNode("big", "Conv", 1))

    def sites(self, graph):
        """Each ordered pair of distinct Convs reading one tensor: (the one to enlarge, its sibling)."""
        for convs in readers_by_input(graph, ("Conv",)).values():
            for small in convs:
                for big in convs:
                    if small is not big:
                        yield (small, big)

    def check(self, graph, site):
        small, big = site["small"], site["big"]
        ps, pb = need(conv_params(graph, small)), need(conv_params(graph, big))
        fail_if(conv_mismatch(ps, pb, same=("strides", "dilations")))
        constant_params(graph, small, last=2)
        target = tuple(max(a, b) for a, b in zip(ps.kernel, pb.kernel))
        require(target != ps.kernel, "the sibling's kernel is not larger")
        require(not any((t - k) % 2 for t, k in zip(target, ps.kernel)), "kernel sizes differ by an odd amount")
        new_pads = _enlarged_pads(ps, target)
        require(new_pads == _enlarged_pads(pb, target), "pads would not match the sibling's")
        grow = tuple(((t - k) // 2,) * 2 for t, k in zip(target, ps.kernel))
        return self._match([small, big], kernel=target, pads=new_pads, grow=grow, weight=graph.weights[small.inputs[1]])

    def match(self, graph, explain=False):
        """Matches as :meth:`Rule.match`, each enlargement of a Conv once (whichever sibling asks)."""
        seen = set()
        for m in super().match(graph, explain):
            if isinstance(m, Match):
                key = (m.nodes[0].key, m["kernel"], m["pads"])
                if key in seen:
                    continue
                seen.add(key)
            yield m

    def apply(self, graph, match):
        small = match.nodes[0]
        e = Edit(graph).drop(small)
        inputs = list(small.inputs)
        inputs[1] = e.weight("w", Pad(match["weight"], ((0, 0), (0, 0)) + match["grow"]))
        attrs = attrs_with(small, kernel_shape=list(match["kernel"]), pads=list(match["pads"]), auto_pad=None)
        e.node("Conv", inputs, attrs, outputs=[small.outputs[0].name], like=small)
        return e.commit()


def pad_channels(e: Edit, x: str, extra: int) -> str:
    """``x`` (N, C, ...) with ``extra`` zero channels appended (``Pad``, input or attribute form by opset)."""
    rank = len(e.value(x).shape)
    pads = [0] * (2 * rank)
    pads[rank + 1] = extra
    if e.graph.opset >= 11:
        return e.node("Pad", [x, e.weight("pads", Literal.from_array(int64s(pads)))], [make_attr("mode", "constant")])[0]
    return e.node("Pad", [x], [make_attr("mode", "constant"), make_attr("pads", pads)])[0]


def slice_channels(e: Edit, y: str, count: int, outputs=None) -> list[str]:
    """The first ``count`` channels of ``y`` (``Slice`` on axis 1, input or attribute form by opset)."""
    if e.graph.opset >= 10:
        ins = [y] + [e.weight(h, Literal.from_array(int64s([v]))) for h, v in (("starts", 0), ("ends", count), ("axes", 1))]
        return e.node("Slice", ins, (), outputs=outputs)
    attrs = [make_attr("starts", [0]), make_attr("ends", [count]), make_attr("axes", [1])]
    return e.node("Slice", [y], attrs, outputs=outputs)


class PadDepthwiseChannels(Rule):
    """``DepthwiseConv(x)`` with C channels -> ``Slice(DepthwiseConv(Pad(x)))`` with C rounded up to a multiple of 4 (zero channels)."""

    pattern = Pattern(Root("conv", "Conv"))

    def check(self, graph, site):
        conv = site["conv"]
        p = need(conv_params(graph, conv))
        depthwise = depthwise_channels(graph, conv) is not None
        require(depthwise, "not a depthwise convolution (one input and one output channel per group)")
        require(is_misaligned_depthwise(graph, conv), f"channels already a multiple of {CHANNEL_MULTIPLE}")
        constant_params(graph, conv)
        channels = -(-p.group // CHANNEL_MULTIPLE) * CHANNEL_MULTIPLE
        bias = graph.weights[conv.inputs[2]] if len(conv.inputs) > 2 and conv.inputs[2] else None
        return self._match([conv], channels=channels, group=p.group, weight=graph.weights[conv.inputs[1]], bias=bias)

    def apply(self, graph, match):
        conv = match.nodes[0]
        c, cp, w, b = match["group"], match["channels"], match["weight"], match["bias"]
        e = Edit(graph).drop(conv)
        inputs = [pad_channels(e, conv.inputs[0], cp - c),
                  e.weight("w", Pad(w, ((0, cp - c),) + ((0, 0),) * (len(w.shape) - 1)))]
        if b is not None:
            inputs.append(e.weight("b", Pad(b, ((0, cp - c),))))
        y = e.node("Conv", inputs, attrs_with(conv, group=cp), like=conv)[0]
        slice_channels(e, y, c, outputs=[conv.outputs[0].name])
        return e.commit()


RULES = [EnlargeConvKernel(), PadDepthwiseChannels()]
