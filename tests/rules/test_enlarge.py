from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gspo.ir.builder import GraphBuilder
from gspo.rules import apply_greedily
from gspo.rules.enlarge import EnlargeConvKernel
from gspo.rules.merge import MergeParallelConvs
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
