from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gspo.ir.builder import GraphBuilder
from gspo.rules.combine import MergeBinaryOfSplits, MergeConvsIntoAdd, MergeMatMulsIntoAdd
from tests.rules.util import apply_first, assert_equivalent, ops, reasons


def conv_sum(ca=3, cb=2, cout=4, k=3, s=1, k2=None, bias=(True, False), hw=7):
    b = GraphBuilder(seed=13)
    xa, xb = b.input("a", (1, ca, hw, hw)), b.input("b", (1, cb, hw, hw))
    outs = []
    for x, c, kk, has_b in ((xa, ca, k, bias[0]), (xb, cb, k2 or k, bias[1])):
        ins = [x, b.weight("w", (cout, c, kk, kk))] + ([b.weight("bias", (cout,))] if has_b else [])
        outs.append(b.op("Conv", ins, kernel_shape=[kk, kk], strides=[s, s], pads=[kk // 2] * 4))
    return b.output(b.op("Relu", [b.op("Add", outs)])).build()


def test_merge_convs_into_add():
    g = conv_sum()
    h = apply_first(MergeConvsIntoAdd(), g)
    assert ops(h) == ["Concat", "Conv", "Relu"]
    assert_equivalent(g, h)


def test_merge_convs_into_add_reason():
    assert "kernel sizes differ" in reasons(MergeConvsIntoAdd(), conv_sum(k=3, k2=1))


@settings(max_examples=25, deadline=None)
@given(ca=st.integers(1, 4), cb=st.integers(1, 4), cout=st.integers(1, 4), k=st.sampled_from([1, 3]),
       s=st.integers(1, 2), bias=st.tuples(st.booleans(), st.booleans()))
def test_merge_convs_into_add_property(ca, cb, cout, k, s, bias):
    g = conv_sum(ca, cb, cout, k, s, bias=bias)
    assert_equivalent(g, apply_first(MergeConvsIntoAdd(), g), runs=1)


def matmul_sum(ka=3, kc=5, n=4, batch=(2,)):
    b = GraphBuilder(seed=17)
    a, c = b.input("a", (*batch, ka)), b.input("c", (*batch, kc))
    y = b.op("Add", [b.op("MatMul", [a, b.weight("B", (ka, n))]), b.op("MatMul", [c, b.weight("D", (kc, n))])])
    return b.output(b.op("Sigmoid", [y])).build()


def test_merge_matmuls_into_add():
    g = matmul_sum()
    h = apply_first(MergeMatMulsIntoAdd(), g)
    assert ops(h) == ["Concat", "MatMul", "Sigmoid"]
    assert_equivalent(g, h)


def test_merge_matmuls_into_add_reason():
    b = GraphBuilder()
    a, c = b.input("a", (2, 3)), b.input("c", (2, 3))
    y = b.op("Add", [b.op("MatMul", [a, b.weight("B", (3, 4))]), b.op("MatMul", [c, b.input("D", (3, 4))])])
    assert reasons(MergeMatMulsIntoAdd(), b.output(y).build()) == ["'D' is not a constant initializer"]


@settings(max_examples=25, deadline=None)
@given(ka=st.integers(1, 5), kc=st.integers(1, 5), n=st.integers(1, 5), batch=st.sampled_from([(1,), (3,), (2, 2)]))
def test_merge_matmuls_into_add_property(ka, kc, n, batch):
    g = matmul_sum(ka, kc, n, batch)
    assert_equivalent(g, apply_first(MergeMatMulsIntoAdd(), g), runs=1)


def split_pairs(op="Add", sizes=(2, 3, 1), axis=1, order=None, opset=17, other_sizes=None):
    b = GraphBuilder(seed=5, opset=opset)
    a = b.op("Tanh", [b.input("a", (2, sum(sizes)))])
    c = b.op("Sigmoid", [b.input("c", (2, sum(sizes)))])

    def split(x, s):
        if opset >= 13:
            return b.op("Split", [x, b.const("s", np.array(s))], n_outputs=len(s), axis=axis)
        return b.op("Split", [x], n_outputs=len(s), axis=axis, split=list(s))

    left, right = split(a, sizes), split(c, other_sizes or sizes)
    outs = []
    for i, (p, q) in enumerate(zip(left, right)):
        pair = [q, p] if order and order[i] else [p, q]
        outs.append(b.op("Relu", [b.op(op, pair)]))
    return b.output(*outs).build()


def test_merge_binary_of_splits():
    g = split_pairs()
    h = apply_first(MergeBinaryOfSplits(), g)
    assert sorted(ops(h)) == ["Add", "Relu", "Relu", "Relu", "Sigmoid", "Split", "Tanh"]
    assert_equivalent(g, h)


def test_merge_binary_of_splits_reasons():
    assert "the Splits' boundaries differ" in reasons(MergeBinaryOfSplits(), split_pairs(other_sizes=(2, 1, 3)))
    assert "the pieces are not combined pairwise by one kind of op" in reasons(
        MergeBinaryOfSplits(), split_pairs(op="Sub", order=(0, 1, 0))
    )


@settings(max_examples=25, deadline=None)
@given(op=st.sampled_from(["Add", "Sub", "Mul", "Div", "Max", "Min"]), sizes=st.lists(st.integers(1, 4), min_size=2, max_size=4),
       axis=st.sampled_from([1, -1, 0]), opset=st.sampled_from([11, 13, 17]), swap=st.booleans())
def test_merge_binary_of_splits_property(op, sizes, axis, opset, swap):
    if axis == 0:
        sizes = [1, 1]
    g = split_pairs(op, tuple(sizes), axis, order=(swap,) * len(sizes), opset=opset)
    assert_equivalent(g, apply_first(MergeBinaryOfSplits(), g), runs=1)
