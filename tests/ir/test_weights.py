"""Lazy weight expressions evaluate to what numpy computes, and only when asked."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, numpy_helper

from gspo.ir.weights import Concat, Init, Literal, Pad, Random, Scale, WeightStore, materialize


def _store(**arrays):
    return WeightStore({k: numpy_helper.from_array(v, k) for k, v in arrays.items()})


def test_expressions_match_numpy():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 2, 2)
    c = np.ones((3, 3, 2, 2), np.float32)
    s = np.array([1.0, 2.0, 3.0], np.float32)
    store = _store(a=a, c=c)
    wa = Init("a", TensorProto.FLOAT, a.shape)
    wc = Init("c", TensorProto.FLOAT, c.shape)
    cat = Concat((wa, wc), axis=0)
    assert cat.shape == (5, 3, 2, 2)
    np.testing.assert_array_equal(cat.evaluate(store), np.concatenate([a, c]))
    pad = Pad(wa, ((0, 0), (0, 0), (1, 1), (0, 2)))
    np.testing.assert_array_equal(pad.evaluate(store), np.pad(a, ((0, 0), (0, 0), (1, 1), (0, 2))))
    sc = Scale(wa, Literal.from_array(s), axis=1)
    np.testing.assert_array_equal(sc.evaluate(store), a * s.reshape(1, 3, 1, 1))


def test_shapes_are_checked():
    w = Init("a", TensorProto.FLOAT, (2, 3))
    with pytest.raises(ValueError):
        Concat((w, Init("b", TensorProto.FLOAT, (2, 4))), axis=0)
    with pytest.raises(ValueError):
        Scale(w, Literal.from_array(np.ones(2, np.float32)), axis=1)


def test_random_is_deterministic_and_seed_dependent():
    r1 = Random(7, TensorProto.FLOAT, (4, 5))
    r2 = Random(7, TensorProto.FLOAT, (4, 5))
    r3 = Random(8, TensorProto.FLOAT, (4, 5))
    assert r1 == r2 and r1 != r3
    np.testing.assert_array_equal(r1.evaluate(WeightStore()), r2.evaluate(WeightStore()))
    assert not np.array_equal(r1.evaluate(WeightStore()), r3.evaluate(WeightStore()))


def test_materialize_copies_an_unchanged_initializer_byte_for_byte():
    a = np.arange(6, dtype=np.float32)
    store = _store(a=a)
    proto = materialize("a", Init("a", TensorProto.FLOAT, (6,)), store)
    assert proto.SerializeToString() == store.proto("a").SerializeToString()


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 5), st.integers(0, 2))
def test_concat_then_pad_keys_follow_structure(n1, n2, k, p):
    w1 = Random(1, TensorProto.FLOAT, (n1, 2, k, k))
    w2 = Random(2, TensorProto.FLOAT, (n2, 2, k, k))
    e1 = Pad(Concat((w1, w2), 0), ((0, 0), (0, 0), (p, p), (p, p)))
    e2 = Pad(Concat((w1, w2), 0), ((0, 0), (0, 0), (p, p), (p, p)))
    e3 = Pad(Concat((w2, w1), 0), ((0, 0), (0, 0), (p, p), (p, p)))
    assert e1 == e2 and hash(e1) == hash(e2)
    assert e1 != e3
    got = e1.evaluate(WeightStore())
    want = np.pad(np.concatenate([w1.evaluate(None), w2.evaluate(None)]), ((0, 0), (0, 0), (p, p), (p, p)))
    np.testing.assert_array_equal(got, want)
