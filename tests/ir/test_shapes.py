"""Our shape functions agree with ONNX shape inference."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gspo import ir
from gspo.ir.builder import GraphBuilder


def _agree(g):
    loaded = ir.load_bytes(ir.serialize(g))
    for name, v in g.values.items():
        assert loaded.values[name].shape == v.shape, name
        assert loaded.values[name].dtype == v.dtype, name


@settings(max_examples=40, deadline=None)
@given(
    cin=st.integers(1, 5), cout=st.integers(1, 5), hw=st.integers(5, 12),
    k=st.integers(1, 4), stride=st.integers(1, 3), pad=st.integers(0, 2), dil=st.integers(1, 2),
    ceil=st.booleans(),
)
def test_conv_and_pool_shapes(cin, cout, hw, k, stride, pad, dil, ceil):
    b = GraphBuilder()
    x = b.input("x", (1, cin, hw, hw + 1))
    if (k - 1) * dil + 1 > hw + 2 * pad:
        return
    c = b.op("Conv", [x, b.weight("w", (cout, cin, k, k))], kernel_shape=[k, k],
             strides=[stride, stride], pads=[pad] * 4, dilations=[dil, dil])
    p = b.op("MaxPool", [c], kernel_shape=[1, 1], strides=[stride, 1], ceil_mode=int(ceil))
    a = b.op("AveragePool", [x], kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4,
             ceil_mode=int(ceil)) if k > pad else x
    _agree(b.output(p, a).build())


@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 4), k=st.integers(1, 4), n=st.integers(1, 4), batch=st.integers(1, 3))
def test_matmul_gemm_broadcast_shapes(m, k, n, batch):
    b = GraphBuilder()
    x = b.input("x", (batch, m, k))
    y = b.op("MatMul", [x, b.weight("w", (k, n))])
    z = b.op("Add", [y, b.weight("bias", (n,))])
    t = b.op("Transpose", [z], perm=[0, 2, 1])
    f = b.op("Flatten", [t], axis=1)
    g = b.op("Gemm", [f, b.weight("g", (3, n * m))], transB=1)
    parts = b.op("Split", [t, b.const("split", [1] * n)], n_outputs=n, axis=1) if n > 1 else [t]
    cat = b.op("Concat", list(parts), axis=1)
    r = b.op("Reshape", [cat, b.const("shape", [batch, -1])])
    s = b.op("Slice", [r, b.const("st", [0]), b.const("en", [-1]), b.const("ax", [1])])
    u = b.op("Unsqueeze", [s, b.const("axes", [0])])
    q = b.op("Squeeze", [u, b.const("axes0", [0])])
    _agree(b.output(g, q).build())


def test_softmax_layernorm_gather_pad_reduce():
    b = GraphBuilder()
    x = b.input("x", (2, 5, 6))
    s = b.op("Softmax", [x], axis=-1)
    ln = b.op("LayerNormalization", [s, b.weight("g", (6,)), b.weight("b", (6,))], axis=-1)
    gat = b.op("Gather", [ln, b.const("i", [[0, 1], [2, 3]])], axis=1)
    pad = b.op("Pad", [gat, b.const("p", [0, 1, 0, 0, 0, 0, 1, 2])])
    red = b.op("ReduceMean", [pad], axes=[1], keepdims=0)
    _agree(b.output(red).build())
