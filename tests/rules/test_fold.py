from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gspo.ir.builder import GraphBuilder
from gspo.rules.fold import (
    CollapseReshapes,
    CollapseTransposes,
    FoldAddIntoLinear,
    FoldBatchNorm,
    FoldChannelSlice,
    FoldMulIntoLinear,
    FoldPadIntoConv,
    MatMulAddToGemm,
    RemoveIdentity,
)
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


def test_remove_identity_and_dropout():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    y = b.op("Relu", [b.op("Dropout", [b.op("Identity", [b.op("Sigmoid", [x])])])])
    g = b.output(y).build()
    h = apply_first(RemoveIdentity(), g)
    h = apply_first(RemoveIdentity(), h)
    assert ops(h) == ["Sigmoid", "Relu"]
    assert_equivalent(g, h)


def test_remove_identity_of_a_graph_input_that_is_an_output():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    g = b.output(b.op("Identity", [x])).build()
    assert "'identity' is a graph output" in reasons(RemoveIdentity(), g)


def test_remove_identity_before_a_graph_output_renames_the_producer():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    g = b.output(b.op("Identity", [b.op("Relu", [x])], out="y")).build()
    h = apply_first(RemoveIdentity(), g)
    assert ops(h) == ["Relu"] and h.nodes[0].outputs[0].name == "y"
    assert_equivalent(g, h)


def _through(op, *consts, shape=(2, 6, 4, 4), **attrs):
    """``Neg -> op -> Relu`` with ``op``'s extra inputs as constants."""
    b = GraphBuilder()
    x = b.op("Neg", [b.input("x", shape)])
    ins = [x] + [b.const(f"c{i}", np.asarray(c)) if c is not None else "" for i, c in enumerate(consts)]
    return b.output(b.op("Relu", [b.op(op, ins, **attrs)])).build()


def test_remove_ops_that_pass_their_input_through():
    """GhostNet's ``cat([x1, x2])[:, :oup]`` slices all the channels when ``oup`` is even."""
    cases = [
        _through("Slice", [0, 0], [2, 6], [0, 1]),
        _through("Slice", [0], [10**9], [1], [1]),
        _through("Reshape", [2, 6, 4, 4]),
        _through("Cast", to=1),
        _through("Transpose", perm=[0, 1, 2, 3]),
        _through("Pad", [0] * 8),
        _through("Concat", axis=1),
    ]
    for g in cases:
        h = apply_first(RemoveIdentity(), g)
        assert ops(h) == ["Neg", "Relu"], ops(g)
        assert_equivalent(g, h)


def test_keep_ops_that_change_their_input():
    assert "the permutation moves axes" in reasons(RemoveIdentity(), _through("Transpose", perm=[0, 1, 3, 2], shape=(1, 2, 3, 3)))
    assert "Slice steps are not constant ones" in reasons(RemoveIdentity(), _through("Slice", [-1], [-10**9], [2], [-1]))
    assert "Pad adds elements" in reasons(RemoveIdentity(), _through("Pad", [0, 0, 1, 0, 0, 0, -1, 0]))
    assert "Slice changes the shape or type" in reasons(RemoveIdentity(), _through("Slice", [0], [3], [1]))


def pad_conv(pads, value=None, mode="constant", conv_pads=(1, 1, 1, 1), k=3, seed=0):
    b = GraphBuilder(seed=seed)
    x = b.op("Relu", [b.input("x", (1, 4, 9, 9))])
    ins = [x, b.const("pads", np.array(pads, np.int64))]
    if value is not None:
        ins.append(b.const("value", np.array(value, np.float32)))
    y = b.op("Pad", ins, mode=mode)
    w = b.weight("w", (4, 1, k, k))
    return b.output(b.op("Conv", [y, w], kernel_shape=[k, k], pads=list(conv_pads), group=4)).build()


def test_fold_asymmetric_pad_into_a_depthwise_conv():
    """NASNet exports TensorFlow's SAME padding as a Pad before each strided depthwise Conv."""
    g = pad_conv([0, 0, 0, 0, 0, 0, 1, 1], conv_pads=(0, 0, 0, 0))
    h = apply_first(FoldPadIntoConv(), g)
    assert ops(h) == ["Relu", "Conv"] and list(h.nodes[1].attr("pads")) == [0, 0, 1, 1]
    assert_equivalent(g, h)


def test_fold_pad_reasons():
    assert reasons(FoldPadIntoConv(), pad_conv([0, 0, 1, 1, 0, 0, 1, 1], value=1.0)) == ["Pad fills with a non-zero value"]
    assert reasons(FoldPadIntoConv(), pad_conv([0, 0, 1, 1, 0, 0, 1, 1], mode="reflect")) == ["Pad is not constant padding"]
    assert reasons(FoldPadIntoConv(), pad_conv([0, 1, 0, 0, 0, 0, 0, 0])) == ["Pad pads the batch or channel axis"]
    assert reasons(FoldPadIntoConv(), pad_conv([0, 0, -1, 0, 0, 0, 0, 0])) == ["Pad crops"]


@settings(max_examples=25, deadline=None)
@given(pads=st.lists(st.integers(0, 2), min_size=4, max_size=4), conv_pads=st.lists(st.integers(0, 1), min_size=4, max_size=4),
       k=st.sampled_from([1, 3]))
def test_fold_pad_into_conv_property(pads, conv_pads, k):
    g = pad_conv([0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]], conv_pads=tuple(conv_pads), k=k)
    assert_equivalent(g, apply_first(FoldPadIntoConv(), g), runs=1)


@settings(max_examples=20, deadline=None)
@given(p1=st.permutations([0, 1, 2, 3]), p2=st.permutations([0, 1, 2, 3]))
def test_collapse_transposes_property(p1, p2):
    b = GraphBuilder()
    x = b.input("x", (2, 3, 4, 5))
    t = b.op("Transpose", [b.op("Transpose", [b.op("Relu", [x])], perm=list(p1))], perm=list(p2))
    g = b.output(b.op("Sigmoid", [t])).build()
    h = apply_first(CollapseTransposes(), g)
    assert ops(h).count("Transpose") <= 1
    assert_equivalent(g, h, runs=1)


def test_collapse_transposes_needs_a_single_reader():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    t1 = b.op("Transpose", [x], perm=[1, 0])
    g = b.output(b.op("Transpose", [t1], perm=[1, 0]), b.op("Relu", [t1])).build()
    assert any("has 2 consumers" in r for r in reasons(CollapseTransposes(), g))


@settings(max_examples=20, deadline=None)
@given(s1=st.sampled_from([(6, 4), (24,), (2, 12), (4, 3, 2)]), s2=st.sampled_from([(2, 3, 4), (24,), (4, 6), (3, 8)]))
def test_collapse_reshapes_property(s1, s2):
    b = GraphBuilder()
    x = b.input("x", (2, 3, 4))
    r = b.op("Reshape", [b.op("Reshape", [b.op("Relu", [x]), b.const("s1", np.array(s1))]), b.const("s2", np.array(s2))])
    g = b.output(b.op("Sigmoid", [r])).build()
    h = apply_first(CollapseReshapes(), g)
    assert ops(h).count("Reshape") <= 1
    assert_equivalent(g, h, runs=1)


def test_collapse_reshapes_reason():
    b = GraphBuilder()
    x = b.input("x", (2, 3, 4))
    g = b.output(b.op("Reshape", [b.op("Relu", [x]), b.const("s", np.array([6, 4]))])).build()
    assert "not fed by Reshape" in reasons(CollapseReshapes(), g)


def _sliced_conv(keep, start=0, axis=1, step=1, group=1):
    b = GraphBuilder(seed=3)
    x = b.input("x", (1, 8, 5, 5))
    s = b.op("Slice", [x, b.const("s", np.array([start])), b.const("e", np.array([start + keep * step])),
                       b.const("a", np.array([axis])), b.const("t", np.array([step]))])
    cin = b.shape(s)[1]
    y = b.op("Conv", [s, b.weight("w", (4, cin // group, 3, 3))], kernel_shape=[3, 3], pads=[1] * 4, group=group)
    return b.output(y).build()


def test_fold_channel_slice_into_conv():
    g = _sliced_conv(5)
    h = apply_first(FoldChannelSlice(), g)
    assert ops(h) == ["Conv"] and h.values[h.nodes[0].inputs[1]].shape == (4, 8, 3, 3)
    assert_equivalent(g, h)


def test_fold_channel_slice_reasons():
    assert "not a slice of the leading channels" in reasons(FoldChannelSlice(), _sliced_conv(4, start=2))
    assert "not a slice of the leading channels" in reasons(FoldChannelSlice(), _sliced_conv(4, step=2))
    assert "not a slice of the leading channels" in reasons(FoldChannelSlice(), _sliced_conv(3, axis=2))
    assert "group is not 1" in reasons(FoldChannelSlice(), _sliced_conv(4, group=2))
