from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gspo.ir.builder import GraphBuilder
from gspo.rules.fold import FoldAddIntoLinear, FoldBatchNorm, FoldMulIntoLinear, MatMulAddToGemm
from gspo.zoo.layers import bn
from tests.rules.util import apply_first, assert_equivalent, ops, reasons


def conv_bn(cin=3, cout=4, k=3, stride=1, hw=8, bias=True, op="Conv"):
    b = GraphBuilder(seed=2)
    x = b.input("x", (1, cin, hw, hw))
    if op == "Conv":
        w = b.weight("w", (cout, cin, k, k))
    else:
        w = b.weight("w", (cin, cout, k, k))
    ins = [x, w] + ([b.weight("b", (cout,))] if bias else [])
    y = b.op(op, ins, kernel_shape=[k, k], strides=[stride, stride])
    return b.output(b.op("Relu", [bn(b, y)])).build()


def test_fold_batchnorm_into_conv():
    g = conv_bn()
    h = apply_first(FoldBatchNorm(), g)
    assert ops(h) == ["Conv", "Relu"]
    assert_equivalent(g, h)


def test_fold_batchnorm_into_conv_transpose_and_gemm():
    g = conv_bn(op="ConvTranspose", stride=2)
    assert_equivalent(g, apply_first(FoldBatchNorm(), g))
    b = GraphBuilder()
    x = b.input("x", (2, 6))
    y = b.op("Gemm", [x, b.weight("w", (5, 6))], transB=1)
    g = b.output(bn(b, y)).build()
    h = apply_first(FoldBatchNorm(), g)
    assert ops(h) == ["Gemm"]
    assert_equivalent(g, h)


def test_fold_batchnorm_refuses_a_shared_conv_output():
    b = GraphBuilder()
    x = b.input("x", (1, 2, 4, 4))
    y = b.op("Conv", [x, b.weight("w", (2, 2, 1, 1))], kernel_shape=[1, 1])
    g = b.output(bn(b, y), y).build()
    assert any("graph output" in r for r in reasons(FoldBatchNorm(), g))


def test_fold_batchnorm_refuses_runtime_weights():
    b = GraphBuilder()
    x = b.input("x", (1, 2, 4, 4))
    w = b.input("w", (2, 2, 1, 1))
    g = b.output(bn(b, b.op("Conv", [x, w], kernel_shape=[1, 1]))).build()
    assert "'w' is not a constant initializer" in reasons(FoldBatchNorm(), g)


@settings(max_examples=25, deadline=None)
@given(cin=st.integers(1, 4), cout=st.integers(1, 5), k=st.sampled_from([1, 3]), stride=st.integers(1, 2),
       hw=st.integers(4, 9), bias=st.booleans())
def test_fold_batchnorm_property(cin, cout, k, stride, hw, bias):
    g = conv_bn(cin, cout, k, stride, hw, bias)
    assert_equivalent(g, apply_first(FoldBatchNorm(), g), runs=1)


def _conv_then(op, const_shape, cout=4):
    b = GraphBuilder(seed=3)
    x = b.input("x", (1, 3, 6, 6))
    y = b.op("Conv", [x, b.weight("w", (cout, 3, 3, 3))], kernel_shape=[3, 3])
    c = b.weight("c", const_shape, loc=1.0, scale=0.5)
    return b.output(b.op(op, [c, y] if op == "Mul" else [y, c])).build()


@settings(max_examples=20, deadline=None)
@given(shape=st.sampled_from([(4, 1, 1), (1, 4, 1, 1), (1,), ()]), op=st.sampled_from(["Mul", "Add"]))
def test_fold_per_channel_mul_and_add(shape, op):
    g = _conv_then(op, shape)
    rule = FoldMulIntoLinear() if op == "Mul" else FoldAddIntoLinear()
    h = apply_first(rule, g)
    assert ops(h) == ["Conv"]
    assert_equivalent(g, h, runs=1)


def test_fold_mul_refuses_a_per_pixel_constant():
    g = _conv_then("Mul", (4, 4, 4))
    assert "the constant is not per output channel" in reasons(FoldMulIntoLinear(), g)


def test_matmul_add_to_gemm():
    b = GraphBuilder()
    x = b.input("x", (3, 5))
    y = b.op("Add", [b.op("MatMul", [x, b.weight("w", (5, 4))]), b.weight("b", (4,))])
    g = b.output(y).build()
    h = apply_first(MatMulAddToGemm(), g)
    assert ops(h) == ["Gemm"]
    assert_equivalent(g, h)


def test_matmul_add_needs_a_2d_input():
    b = GraphBuilder()
    x = b.input("x", (1, 3, 5))
    y = b.op("Add", [b.op("MatMul", [x, b.weight("w", (5, 4))]), b.weight("b", (4,))])
    assert "MatMul input is not 2-D" in reasons(MatMulAddToGemm(), b.output(y).build())


@settings(max_examples=15, deadline=None)
@given(m=st.integers(1, 4), k=st.integers(1, 5), n=st.integers(1, 5), bias=st.sampled_from(["n", "1n", "mn", "scalar"]))
def test_matmul_add_property(m, k, n, bias):
    b = GraphBuilder()
    x = b.input("x", (m, k))
    shape = {"n": (n,), "1n": (1, n), "mn": (m, n), "scalar": ()}[bias]
    y = b.op("Add", [b.op("MatMul", [x, b.weight("w", (k, n))]), b.weight("b", shape)])
    g = b.output(y).build()
    assert_equivalent(g, apply_first(MatMulAddToGemm(), g), runs=1)
