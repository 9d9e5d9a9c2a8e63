from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gspo.ir.builder import GraphBuilder
from gspo.rules.merge import (
    BatchSharedWeightMatMuls,
    MergeParallelConvs,
    MergeParallelMatMuls,
    MergeSplitConvs,
)
from tests.rules.util import apply_first, assert_equivalent, ops, reasons


def siblings(specs, cin=3, hw=8, seed=0):
    """Convs on one input: specs are (cout, kernel, stride, pad, bias)."""
    b = GraphBuilder(seed=seed)
    x = b.input("x", (1, cin, hw, hw))
    outs = []
    for cout, k, s, p, bias in specs:
        ins = [x, b.weight("w", (cout, cin, k, k))] + ([b.weight("b", (cout,))] if bias else [])
        outs.append(b.op("Relu", [b.op("Conv", ins, kernel_shape=[k, k], strides=[s, s], pads=[p] * 4)]))
    return b.output(*outs).build()


def test_merge_three_convs():
    g = siblings([(4, 3, 1, 1, True), (2, 3, 1, 1, False), (5, 3, 1, 1, True)])
    h = apply_first(MergeParallelConvs(), g)
    assert ops(h).count("Conv") == 1 and "Split" in ops(h)
    assert_equivalent(g, h)


def test_merge_picks_the_largest_compatible_group():
    g = siblings([(4, 1, 1, 0, False), (2, 3, 1, 1, False), (3, 1, 1, 0, False)])
    h = apply_first(MergeParallelConvs(), g)
    assert ops(h).count("Conv") == 2
    assert_equivalent(g, h)


def test_merge_reasons():
    assert reasons(MergeParallelConvs(), siblings([(4, 3, 1, 1, False), (4, 3, 2, 1, False)])) == ["strides differ"]
    assert reasons(MergeParallelConvs(), siblings([(4, 3, 1, 1, False), (4, 1, 1, 0, False)])) == ["kernel sizes differ"]
    assert reasons(MergeParallelConvs(), siblings([(4, 3, 1, 1, False), (4, 3, 1, 0, False)])) == ["pads differ"]


def test_merge_refuses_grouped_convs():
    b = GraphBuilder()
    x = b.input("x", (1, 4, 6, 6))
    y1 = b.op("Conv", [x, b.weight("w", (4, 1, 3, 3))], kernel_shape=[3, 3], group=4)
    y2 = b.op("Conv", [x, b.weight("w", (4, 1, 3, 3))], kernel_shape=[3, 3], group=4)
    assert reasons(MergeParallelConvs(), b.output(y1, y2).build()) == ["group is not 1"]


@settings(max_examples=25, deadline=None)
@given(
    couts=st.lists(st.integers(1, 4), min_size=2, max_size=4),
    k=st.sampled_from([1, 3, 5]), s=st.integers(1, 2), cin=st.integers(1, 4), hw=st.integers(5, 9),
    bias=st.lists(st.booleans(), min_size=4, max_size=4),
)
def test_merge_convs_property(couts, k, s, cin, hw, bias):
    g = siblings([(c, k, s, k // 2, bias[i]) for i, c in enumerate(couts)], cin, hw)
    h = apply_first(MergeParallelConvs(), g)
    assert ops(h).count("Conv") == 1
    assert_equivalent(g, h, runs=1)


def parallel_linear(ns, k=6, batch=(2,), op="MatMul", trans_b=0):
    b = GraphBuilder(seed=5)
    x = b.input("x", (*batch, k))
    outs = []
    for n in ns:
        if op == "MatMul":
            outs.append(b.op("MatMul", [x, b.weight("w", (k, n))]))
        else:
            w = b.weight("w", (n, k) if trans_b else (k, n))
            outs.append(b.op("Gemm", [x, w, b.weight("c", (n,))], transB=trans_b, alpha=0.5))
    return b.output(*[b.op("Tanh", [o]) for o in outs]).build()


def test_merge_matmuls_and_gemms():
    g = parallel_linear([3, 4, 5], batch=(1, 7))
    h = apply_first(MergeParallelMatMuls(), g)
    assert ops(h).count("MatMul") == 1
    assert_equivalent(g, h)
    for trans_b in (0, 1):
        g = parallel_linear([3, 2], op="Gemm", trans_b=trans_b)
        h = apply_first(MergeParallelMatMuls(), g)
        assert ops(h).count("Gemm") == 1
        assert_equivalent(g, h)


def test_merge_matmuls_needs_constant_weights():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    w = b.input("w", (3, 3))
    g = b.output(b.op("MatMul", [x, w]), b.op("MatMul", [x, w])).build()
    assert reasons(MergeParallelMatMuls(), g) == ["'w' is not a constant initializer"]


@settings(max_examples=25, deadline=None)
@given(ns=st.lists(st.integers(1, 6), min_size=2, max_size=5), k=st.integers(1, 6),
       batch=st.sampled_from([(1,), (3,), (1, 4), (2, 3)]))
def test_merge_matmuls_property(ns, k, batch):
    g = parallel_linear(ns, k, batch)
    assert_equivalent(g, apply_first(MergeParallelMatMuls(), g), runs=1)


def shared_weight(rows=(1, 1, 1), k=6, n=5, chained=False):
    """MatMuls of several inputs by one weight; ``chained``: each reads the previous result (an RNN's state)."""
    b = GraphBuilder(seed=9)
    w = b.weight("w", (k, n if not chained else k))
    outs, prev = [], None
    for i, m in enumerate(rows):
        x = b.input(f"x{i}", (m, k))
        a = x if prev is None or not chained else b.op("Add", [x, prev])
        prev = b.op("Tanh", [b.op("MatMul", [a, w])])
        outs.append(prev)
    return b.output(*outs).build()


def test_batch_shared_weight_matmuls():
    g = shared_weight((1, 3, 2))
    h = apply_first(BatchSharedWeightMatMuls(), g)
    assert ops(h).count("MatMul") == 1 and ops(h).count("Concat") == 1 and "Split" in ops(h)
    assert_equivalent(g, h)


def test_batch_shared_weight_refuses_dependent_matmuls():
    assert reasons(BatchSharedWeightMatMuls(), shared_weight((1, 1, 1), n=6, chained=True)) == [
        "the MatMuls sharing the weight depend on each other"]


def test_batch_shared_weight_takes_the_independent_ones_and_batches_the_nasrnn_inputs():
    from gspo.rules import apply_greedily
    from gspo.zoo import build

    g = build("nasrnn", "tiny")
    h, counts = apply_greedily(g, [BatchSharedWeightMatMuls()])
    assert counts == {"BatchSharedWeightMatMuls": 8}  # the 8 input projections; the state's 8 stay per step
    assert ops(h).count("MatMul") == ops(g).count("MatMul") - 8 * (3 - 1)
    assert_equivalent(g, h)


@settings(max_examples=20, deadline=None)
@given(rows=st.lists(st.integers(1, 4), min_size=2, max_size=5), k=st.integers(1, 6), n=st.integers(1, 6))
def test_batch_shared_weight_property(rows, k, n):
    g = shared_weight(tuple(rows), k, n)
    assert_equivalent(g, apply_first(BatchSharedWeightMatMuls(), g), runs=1)


def mixed_conv(pieces, cin_total=None, hw=8, stride=1, seed=0, bias=True, pads=None):
    """``Concat(Conv_i(Split(x)_i))``: pieces are (channels, cout, kernel, group)."""
    b = GraphBuilder(seed=seed)
    cin = cin_total or sum(p[0] for p in pieces)
    x = b.op("Relu", [b.input("x", (1, cin, hw, hw))])
    parts = b.op("Split", [x, b.const("split", [p[0] for p in pieces])], n_outputs=len(pieces), axis=1)
    outs = []
    for i, ((c, cout, k, group), part) in enumerate(zip(pieces, parts)):
        pad = (k // 2,) * 4 if pads is None else pads[i]
        ins = [part, b.weight("w", (cout, c // group, k, k))] + ([b.weight("b", (cout,))] if bias else [])
        outs.append(b.op("Conv", ins, kernel_shape=[k, k], pads=list(pad), strides=[stride, stride], group=group))
    return b.output(b.op("Relu", [b.op("Concat", outs, axis=1)])).build()


def test_merge_a_mixed_depthwise_conv():
    """MixNet: channel groups with 3x3, 5x5, 7x7 depthwise kernels become one 7x7 depthwise Conv."""
    g = mixed_conv([(4, 4, 3, 4), (4, 4, 5, 4), (8, 8, 7, 8)])
    h = apply_first(MergeSplitConvs(), g)
    assert ops(h) == ["Relu", "Conv", "Relu"]
    conv = h.nodes[1]
    assert conv.attr("group") == 16 and list(conv.attr("kernel_shape")) == [7, 7] and list(conv.attr("pads")) == [3] * 4
    assert_equivalent(g, h)


def test_merge_alike_pieces_into_a_grouped_conv():
    g = mixed_conv([(6, 10, 1, 1), (6, 10, 1, 1)], bias=False)
    h = apply_first(MergeSplitConvs(), g)
    assert ops(h) == ["Relu", "Conv", "Relu"] and h.nodes[1].attr("group") == 2
    assert_equivalent(g, h)


def test_merge_split_convs_reasons():
    assert reasons(MergeSplitConvs(), mixed_conv([(4, 8, 1, 1), (6, 8, 1, 1)])) == ["the groups differ in channels"]
    assert reasons(MergeSplitConvs(), mixed_conv([(4, 4, 3, 4), (4, 4, 4, 4)], pads=[(1,) * 4, (1, 1, 2, 2)])) == [
        "kernel sizes differ by an odd amount"]
    assert reasons(MergeSplitConvs(), mixed_conv([(4, 4, 3, 4), (4, 4, 5, 4)], pads=[(1,) * 4, (1,) * 4])) == [
        "pads would not line up"]


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 4), c=st.sampled_from([1, 2, 3]), mult=st.sampled_from([1, 2]),
       kernels=st.lists(st.sampled_from([1, 3, 5]), min_size=4, max_size=4), stride=st.sampled_from([1, 2]),
       depthwise=st.booleans())
def test_merge_split_convs_property(n, c, mult, kernels, stride, depthwise):
    group = c if depthwise else 1
    pieces = [(c, c * mult, k, group) for k in kernels[:n]]
    g = mixed_conv(pieces, hw=7, stride=stride)
    # Same stride, odd kernels padded by k // 2: every drawn case is mergeable, so the rule must match.
    found = [m for m in MergeSplitConvs().match(g)]
    assert found, reasons(MergeSplitConvs(), g)
    assert_equivalent(g, MergeSplitConvs().apply(g, found[0]).check(), runs=1)
