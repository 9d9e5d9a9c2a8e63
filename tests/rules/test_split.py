from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gspo.ir.builder import GraphBuilder
from gspo.rules.split import SplitConv, SplitMatMul
from tests.rules.util import apply_first, assert_equivalent, ops, reasons


def conv(cout, k=3, s=1, bias=True, cin=3, hw=8):
    b = GraphBuilder(seed=9)
    x = b.input("x", (1, cin, hw, hw))
    ins = [x, b.weight("w", (cout, cin, k, k))] + ([b.weight("b", (cout,))] if bias else [])
    return b.output(b.op("Relu", [b.op("Conv", ins, kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4)])).build()


def test_split_conv():
    g = conv(6)
    h = apply_first(SplitConv(), g)
    assert ops(h) == ["Conv", "Conv", "Concat", "Relu"]
    assert_equivalent(g, h)


def test_split_conv_reason():
    assert reasons(SplitConv(), conv(1)) == ["fewer than 2 output channels"]


@settings(max_examples=25, deadline=None)
@given(cout=st.integers(2, 7), k=st.sampled_from([1, 3]), s=st.integers(1, 2), bias=st.booleans(), cin=st.integers(1, 3))
def test_split_conv_property(cout, k, s, bias, cin):
    g = conv(cout, k, s, bias, cin)
    assert_equivalent(g, apply_first(SplitConv(), g), runs=1)


def matmul(n, k=4, batch=(2,)):
    b = GraphBuilder(seed=11)
    x = b.input("x", (*batch, k))
    return b.output(b.op("Tanh", [b.op("MatMul", [x, b.weight("w", (k, n))])])).build()


def test_split_matmul():
    g = matmul(5, batch=(1, 3))
    h = apply_first(SplitMatMul(), g)
    assert ops(h) == ["MatMul", "MatMul", "Concat", "Tanh"]
    assert_equivalent(g, h)


def test_split_matmul_reason():
    assert reasons(SplitMatMul(), matmul(1)) == ["fewer than 2 output columns"]


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 9), k=st.integers(1, 5), batch=st.sampled_from([(1,), (3,), (2, 2)]))
def test_split_matmul_property(n, k, batch):
    g = matmul(n, k, batch)
    assert_equivalent(g, apply_first(SplitMatMul(), g), runs=1)
