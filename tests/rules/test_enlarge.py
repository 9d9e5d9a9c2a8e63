from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gspo.ir.builder import GraphBuilder
from gspo.rules import apply_greedily
from gspo.rules.enlarge import EnlargeConvKernel, PadDepthwiseChannels
from gspo.rules.merge import MergeParallelConvs
from gspo.rules.simplify import FoldChannelSlice
from tests.rules.util import apply_first, assert_equivalent, ops, reasons


def pair(k1, p1, k2, p2, stride=1, dil=1, hw=9, cin=2):
    b = GraphBuilder(seed=7)
    x = b.input("x", (1, cin, hw, hw))
    outs = []
    for k, p in ((k1, p1), (k2, p2)):
        w = b.weight("w", (3, cin, *k))
        outs.append(b.op("Conv", [x, w], kernel_shape=list(k), pads=[p[0], p[1], p[0], p[1]],
                         strides=[stride, stride], dilations=[dil, dil]))
    return b.output(*outs).build()


def test_enlarge_1x3_and_3x1_then_merge():
    """GSPO Fig. 1: the 1x3 and 3x1 convolutions both become 3x3 and merge into one."""
    g = pair((1, 3), (0, 1), (3, 1), (1, 0))
    h = apply_first(EnlargeConvKernel(), g)
    assert_equivalent(g, h)
    merged, counts = apply_greedily(g, [EnlargeConvKernel(), MergeParallelConvs()])
    assert counts == {"EnlargeConvKernel": 2, "MergeParallelConvs": 1}
    assert ops(merged) == ["Conv", "Split"]
    assert_equivalent(g, merged)


def test_enlarge_1x1_to_3x3():
    g = pair((1, 1), (0, 0), (3, 3), (1, 1))
    h = apply_first(EnlargeConvKernel(), g)
    assert {n.attr("kernel_shape") for n in h.nodes} == {(3, 3)}
    assert_equivalent(g, h)


def test_enlarge_reasons():
    assert "kernel sizes differ by an odd amount" in reasons(EnlargeConvKernel(), pair((1, 1), (0, 0), (2, 2), (1, 1)))
    assert "pads would not match the sibling's" in reasons(EnlargeConvKernel(), pair((1, 1), (0, 0), (3, 3), (0, 0)))
    assert "the sibling's kernel is not larger" in reasons(EnlargeConvKernel(), pair((3, 3), (1, 1), (3, 3), (1, 1)))


@settings(max_examples=25, deadline=None)
@given(k1=st.sampled_from([(1, 1), (1, 3), (3, 1), (3, 3), (1, 5)]), k2=st.sampled_from([(3, 3), (5, 5), (3, 1), (5, 1)]),
       stride=st.integers(1, 2), dil=st.integers(1, 2), hw=st.integers(9, 12))
def test_enlarge_property(k1, k2, stride, dil, hw):
    p1 = tuple(k // 2 * dil for k in k1)
    p2 = tuple(k // 2 * dil for k in k2)
    g = pair(k1, p1, k2, p2, stride, dil, hw)
    found = [m for m in EnlargeConvKernel().match(g)]
    for m in found:
        assert_equivalent(g, EnlargeConvKernel().apply(g, m).check(), runs=1)
    if k1 != k2:
        assert found


def separable(c, k=3, stride=1, bias=True, opset=17, hw=9, pointwise=True, shared=False):
    """ReLU -> depthwise kxk (``c`` channels) -> pointwise 1x1 (or nothing)."""
    b = GraphBuilder(seed=5, opset=opset)
    x = b.op("Relu", [b.input("x", (1, c, hw, hw))])
    ins = [x, b.weight("dw", (c, 1, k, k))] + ([b.weight("db", (c,), scale=0.1)] if bias else [])
    y = b.op("Conv", ins, kernel_shape=[k, k], pads=[k // 2] * 4, strides=[stride, stride], group=c)
    outs = [y] if not pointwise else [b.op("Conv", [y, b.weight("pw", (5, c, 1, 1)), b.weight("pb", (5,))])]
    if shared:
        outs.append(b.op("Sigmoid", [y]))
    return b.output(*outs).build()


def test_pad_depthwise_channels_then_fold_the_slice():
    g = separable(11)
    h = apply_first(PadDepthwiseChannels(), g)
    dw = next(n for n in h.nodes if n.op_type == "Conv" and n.attr("group", 1) > 1)
    assert dw.attr("group") == 12 and h.values[dw.inputs[1]].shape == (12, 1, 3, 3)
    assert ops(h) == ["Relu", "Pad", "Conv", "Slice", "Conv"]
    assert_equivalent(g, h)
    folded = apply_first(FoldChannelSlice(), h)
    assert ops(folded) == ["Relu", "Pad", "Conv", "Conv"]
    assert folded.values[folded.nodes[-1].inputs[1]].shape == (5, 12, 1, 1)
    assert_equivalent(g, folded)


def test_pad_depthwise_channels_keeps_a_shared_slice():
    g = separable(6, shared=True)
    h, counts = apply_greedily(g, [PadDepthwiseChannels(), FoldChannelSlice()])
    assert counts == {"PadDepthwiseChannels": 1, "FoldChannelSlice": 1}
    assert ops(h).count("Slice") == 1  # the Sigmoid still reads the sliced channels
    assert_equivalent(g, h)


def test_pad_depthwise_channels_old_opsets():
    for opset in (9, 10):  # Pad and Slice with attributes (Pad < 11, Slice < 10)
        g = separable(7, opset=opset, pointwise=False)
        assert_equivalent(g, apply_first(PadDepthwiseChannels(), g))


def test_pad_depthwise_channels_reasons():
    assert "channels already a multiple of 4" in reasons(PadDepthwiseChannels(), separable(12))
    assert any("not a depthwise convolution" in r for r in reasons(PadDepthwiseChannels(), pair((1, 1), (0, 0), (3, 3), (1, 1))))


@settings(max_examples=25, deadline=None)
@given(c=st.integers(2, 23), k=st.sampled_from([1, 3, 5]), stride=st.integers(1, 2), bias=st.booleans(),
       pointwise=st.booleans())
def test_pad_depthwise_channels_property(c, k, stride, bias, pointwise):
    g = separable(c, k, stride, bias, pointwise=pointwise)
    h, counts = apply_greedily(g, [PadDepthwiseChannels(), FoldChannelSlice()])
    assert counts.get("PadDepthwiseChannels", 0) == (1 if c % 4 else 0)
    assert counts.get("FoldChannelSlice", 0) == (1 if c % 4 and pointwise else 0)
    assert all(n.attr("group", 1) % 4 == 0 for n in h.nodes if n.attr("group", 1) > 1)
    assert_equivalent(g, h, runs=1)
