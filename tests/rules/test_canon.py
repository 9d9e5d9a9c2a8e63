from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gspo import ir
from gspo.ir.builder import GraphBuilder
from gspo.rules.canon import CanonicalGelu
from gspo.runtime import optimized_op_types
from tests.rules.util import apply_first, assert_equivalent, ops, reasons


def gelu(half=0.5, scale_op="Div", shape=(1, 8, 16), swap=False):
    """torch dynamo's erf GELU: ``x * ((1 + erf(x / sqrt 2)) * 0.5)``."""
    b = GraphBuilder()
    x = b.op("Relu", [b.input("x", shape)])
    c = 1.4142135 if scale_op == "Div" else 0.70710677
    d = b.op(scale_op, [x, b.const("s2", np.array(c, np.float32))])
    a = b.op("Add", [b.op("Erf", [d]), b.const("one", np.array(1.0, np.float32))])
    h = b.op("Mul", [b.const("h", np.array(half, np.float32)), a] if swap else [a, b.const("h", np.array(half, np.float32))])
    y = b.op("Mul", [h, x] if swap else [x, h])
    return b.output(b.op("Neg", [y])).build()


def test_the_dynamo_gelu_becomes_the_form_onnxruntime_fuses():
    g = gelu()
    assert "Gelu" not in optimized_op_types(ir.serialize(g))
    h = apply_first(CanonicalGelu(), g)
    assert ops(h).count("Mul") == 2 and "Gelu" in optimized_op_types(ir.serialize(h))
    assert_equivalent(g, h)


def test_canonical_gelu_reasons():
    assert reasons(CanonicalGelu(), gelu(half=0.25)) == ["not x * (g * 0.5)"] * 2


@settings(max_examples=10, deadline=None)
@given(scale_op=st.sampled_from(["Div", "Mul"]), swap=st.booleans(), n=st.integers(1, 64))
def test_canonical_gelu_property(scale_op, swap, n):
    g = gelu(scale_op=scale_op, swap=swap, shape=(1, n))
    h = apply_first(CanonicalGelu(), g)
    assert_equivalent(g, h, runs=1)
