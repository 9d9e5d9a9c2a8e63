"""The rules that remove ops: pass-throughs, collapsing pairs, pads and slices a Conv absorbs."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gspo.ir.builder import GraphBuilder
from gspo.rules.simplify import (
    CollapseReshapes,
    CollapseTransposes,
    FoldChannelSlice,
    FoldPadIntoConv,
    RemoveIdentity,
)
from tests.rules.util import apply_first, assert_equivalent, ops, reasons


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
    _assert_collapses(CollapseTransposes(), b, t, "Transpose")


def _assert_collapses(rule, b, y, op):
    """The pair of ``op`` writing ``y`` (read by a Sigmoid) becomes at most one, computing the same."""
    g = b.output(b.op("Sigmoid", [y])).build()
    h = apply_first(rule, g)
    assert ops(h).count(op) <= 1
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
    _assert_collapses(CollapseReshapes(), b, r, "Reshape")


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
