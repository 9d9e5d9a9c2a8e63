"""Static shape functions for the core op set.

Used when a rewrite or a builder creates nodes (loaded models get their shapes from ONNX shape
inference; tests check that both agree on every zoo model).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from math import ceil, floor

import numpy as np
from onnx import TensorProto

__all__ = ["infer_shapes", "SHAPE_FUNCTIONS", "broadcast", "conv_output_shape", "resolve_pads", "UNARY_OPS"]

Shape = tuple[int, ...]
Const = Callable[[str], "np.ndarray | None"]

UNARY_OPS = frozenset(
    "Relu Sigmoid Tanh Erf Exp Log Sqrt Neg Abs Reciprocal Floor Ceil Identity Dropout LeakyRelu "
    "Elu Selu HardSigmoid HardSwish Softplus Softsign Gelu Clip Sin Cos Sign Round Not "
    "Celu Mish".split()
)
BINARY_OPS = frozenset("Add Sub Mul Div Pow Max Min Mod And Or Xor PRelu".split())
COMPARE_OPS = frozenset("Equal Less Greater LessOrEqual GreaterOrEqual".split())


def broadcast(*shapes: Sequence[int]) -> Shape:
    """numpy-style broadcast of static shapes."""
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        dims = {s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise ValueError(f"shapes {shapes} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def resolve_pads(attrs: Mapping, spatial: Sequence[int], kernel: Sequence[int], strides, dilations) -> list[int]:
    """A convolution or pooling window's pads (begins, then ends) as ONNX computes them from
    ``auto_pad`` (``SAME_UPPER``, ``SAME_LOWER``, ``VALID``) or, without one, its ``pads``."""
    n = len(spatial)
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * n)
        for i in range(n):
            out = ceil(spatial[i] / strides[i])
            total = max((out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - spatial[i], 0)
            small, big = total // 2, total - total // 2
            pads[i], pads[i + n] = (small, big) if auto == "SAME_UPPER" else (big, small)
        return pads
    if auto == "VALID":
        return [0] * (2 * n)
    return list(attrs.get("pads", (0,) * (2 * n)))


def conv_output_shape(
    spatial: Sequence[int],
    kernel: Sequence[int],
    attrs: Mapping,
    ceil_mode: bool = False,
) -> Shape:
    """Spatial output size of a convolution or pooling window."""
    n = len(spatial)
    strides = list(attrs.get("strides", (1,) * n))
    dil = list(attrs.get("dilations", (1,) * n))
    pads = resolve_pads(attrs, spatial, kernel, strides, dil)
    out = []
    for i in range(n):
        eff = (kernel[i] - 1) * dil[i] + 1
        span = spatial[i] + pads[i] + pads[i + n] - eff
        o = (ceil(span / strides[i]) if ceil_mode else floor(span / strides[i])) + 1
        if ceil_mode and (o - 1) * strides[i] >= spatial[i] + pads[i]:
            o -= 1
        out.append(o)
    return tuple(out)


def _conv(a, x, const):
    w = x[1].shape
    return [(x[0].dtype, (x[0].shape[0], w[0]) + conv_output_shape(x[0].shape[2:], w[2:], a))]


def _conv_transpose(a, x, const):
    xs, w = x[0].shape, x[1].shape
    n = len(xs) - 2
    group = a.get("group", 1)
    strides = a.get("strides", (1,) * n)
    dil = a.get("dilations", (1,) * n)
    opad = a.get("output_padding", (0,) * n)
    if "output_shape" in a:
        return [(x[0].dtype, (xs[0], w[1] * group) + tuple(a["output_shape"]))]
    pads = a.get("pads", (0,) * (2 * n))
    sp = tuple(
        strides[i] * (xs[2 + i] - 1) + opad[i] + ((w[2 + i] - 1) * dil[i] + 1) - pads[i] - pads[i + n]
        for i in range(n)
    )
    return [(x[0].dtype, (xs[0], w[1] * group) + sp)]


def _pool(a, x, const):
    xs = x[0].shape
    k = a["kernel_shape"]
    out = [(x[0].dtype, xs[:2] + conv_output_shape(xs[2:], k, a, bool(a.get("ceil_mode", 0))))]
    return out + [(TensorProto.INT64, out[0][1])]


def _global_pool(a, x, const):
    xs = x[0].shape
    return [(x[0].dtype, xs[:2] + (1,) * (len(xs) - 2))]


def _matmul(a, x, const):
    s1, s2 = list(x[0].shape), list(x[1].shape)
    v1, v2 = len(s1) == 1, len(s2) == 1
    if v1:
        s1 = [1] + s1
    if v2:
        s2 = s2 + [1]
    if s1[-1] != s2[-2]:
        raise ValueError(f"MatMul inner dims differ: {x[0].shape} x {x[1].shape}")
    out = list(broadcast(s1[:-2], s2[:-2])) + [s1[-2], s2[-1]]
    if v1:
        out.pop(-2)
    if v2:
        out.pop(-1)
    return [(x[0].dtype, tuple(out))]


def _gemm(a, x, const):
    sa, sb = x[0].shape, x[1].shape
    m = sa[1] if a.get("transA", 0) else sa[0]
    n = sb[0] if a.get("transB", 0) else sb[1]
    return [(x[0].dtype, (m, n))]


def _same(a, x, const):
    return [(x[0].dtype, x[0].shape)]


def _bn(a, x, const):
    return [(x[0].dtype, x[0].shape)]


def _binary(a, x, const):
    return [(x[0].dtype, broadcast(x[0].shape, x[1].shape))]


def _compare(a, x, const):
    return [(TensorProto.BOOL, broadcast(x[0].shape, x[1].shape))]


def _variadic(a, x, const):
    return [(x[0].dtype, broadcast(*[v.shape for v in x if v is not None]))]


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _concat(a, x, const):
    xs = [v for v in x if v is not None]
    ax = _axis(a["axis"], len(xs[0].shape))
    shape = list(xs[0].shape)
    shape[ax] = sum(v.shape[ax] for v in xs)
    return [(xs[0].dtype, tuple(shape))]


def _split(a, x, const, n_out):
    xs = x[0].shape
    ax = _axis(a.get("axis", 0), len(xs))
    sizes = a.get("split")
    if sizes is None and len(x) > 1 and x[1] is not None:
        sizes = const(x[1].name)
        if sizes is None:
            raise ValueError("Split sizes are not constant")
    if sizes is None:
        k = a.get("num_outputs", n_out)
        chunk = -(-xs[ax] // k)
        sizes = [min(chunk, xs[ax] - i * chunk) for i in range(k)]
    out = []
    for s in sizes:
        shape = list(xs)
        shape[ax] = int(s)
        out.append((x[0].dtype, tuple(shape)))
    return out


def _need(const, v, what):
    arr = const(v.name) if v is not None else None
    if arr is None:
        raise ValueError(f"{what} is not constant")
    return [int(i) for i in np.asarray(arr).reshape(-1)]


def _slice(a, x, const):
    xs = list(x[0].shape)
    if "starts" in a:
        starts, ends = list(a["starts"]), list(a["ends"])
        axes = list(a.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts, ends = _need(const, x[1], "Slice starts"), _need(const, x[2], "Slice ends")
        axes = _need(const, x[3], "Slice axes") if len(x) > 3 and x[3] else list(range(len(starts)))
        steps = _need(const, x[4], "Slice steps") if len(x) > 4 and x[4] else [1] * len(starts)
    for s, e, ax, st in zip(starts, ends, axes, steps):
        ax = _axis(ax, len(xs))
        xs[ax] = len(range(*slice(s, e, st).indices(xs[ax])))
    return [(x[0].dtype, tuple(xs))]


def _reshape(a, x, const):
    xs = x[0].shape
    target = _need(const, x[1], "Reshape shape") if len(x) > 1 else list(a["shape"])
    allow_zero = a.get("allowzero", 0)
    out = [xs[i] if (t == 0 and not allow_zero) else t for i, t in enumerate(target)]
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1]))
        out[out.index(-1)] = int(np.prod(xs)) // known
    return [(x[0].dtype, tuple(out))]


def _transpose(a, x, const):
    xs = x[0].shape
    perm = a.get("perm", tuple(reversed(range(len(xs)))))
    return [(x[0].dtype, tuple(xs[p] for p in perm))]


def _flatten(a, x, const):
    xs = x[0].shape
    ax = _axis(a.get("axis", 1), len(xs))
    return [(x[0].dtype, (int(np.prod(xs[:ax])), int(np.prod(xs[ax:]))))]


def _squeeze(a, x, const):
    xs = x[0].shape
    axes = a.get("axes") or (_need(const, x[1], "Squeeze axes") if len(x) > 1 and x[1] else None)
    if axes is None:
        return [(x[0].dtype, tuple(d for d in xs if d != 1))]
    axes = {_axis(i, len(xs)) for i in axes}
    return [(x[0].dtype, tuple(d for i, d in enumerate(xs) if i not in axes))]


def _unsqueeze(a, x, const):
    xs = list(x[0].shape)
    axes = a.get("axes") or _need(const, x[1], "Unsqueeze axes")
    rank = len(xs) + len(axes)
    for ax in sorted(_axis(i, rank) for i in axes):
        xs.insert(ax, 1)
    return [(x[0].dtype, tuple(xs))]


def _pad(a, x, const):
    xs = x[0].shape
    pads = list(a["pads"]) if "pads" in a else _need(const, x[1], "Pad pads")
    n = len(xs)
    if len(x) > 3 and x[3] is not None:
        axes = [_axis(i, n) for i in _need(const, x[3], "Pad axes")]
    else:
        axes = list(range(n))
    out = list(xs)
    k = len(axes)
    for j, ax in enumerate(axes):
        out[ax] += pads[j] + pads[j + k]
    return [(x[0].dtype, tuple(out))]


def _gather(a, x, const):
    xs, idx = x[0].shape, x[1].shape
    ax = _axis(a.get("axis", 0), len(xs))
    return [(x[0].dtype, tuple(xs[:ax]) + tuple(idx) + tuple(xs[ax + 1 :]))]


def _reduce(a, x, const):
    xs = x[0].shape
    axes = a.get("axes")
    if axes is None and len(x) > 1 and x[1] is not None:
        axes = _need(const, x[1], "reduction axes")
    if axes is None:
        axes = range(len(xs))
    axes = {_axis(i, len(xs)) for i in axes}
    keep = a.get("keepdims", 1)
    out = tuple((1 if i in axes else d) for i, d in enumerate(xs) if keep or i not in axes)
    return [(x[0].dtype, out)]


def _layernorm(a, x, const):
    xs = x[0].shape
    ax = _axis(a.get("axis", -1), len(xs))
    stat = tuple(xs[:ax]) + (1,) * (len(xs) - ax)
    return [(x[0].dtype, xs), (TensorProto.FLOAT, stat), (TensorProto.FLOAT, stat)]


def _cast(a, x, const):
    return [(a["to"], x[0].shape)]


def _shape(a, x, const):
    return [(TensorProto.INT64, (len(x[0].shape),))]


SHAPE_FUNCTIONS: dict[str, Callable] = {
    "Conv": _conv,
    "ConvTranspose": _conv_transpose,
    "MaxPool": _pool,
    "AveragePool": _pool,
    "GlobalAveragePool": _global_pool,
    "GlobalMaxPool": _global_pool,
    "MatMul": _matmul,
    "Gemm": _gemm,
    "BatchNormalization": _bn,
    "Softmax": _same,
    "LogSoftmax": _same,
    "LayerNormalization": _layernorm,
    "Concat": _concat,
    "Slice": _slice,
    "Reshape": _reshape,
    "Transpose": _transpose,
    "Flatten": _flatten,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Pad": _pad,
    "Gather": _gather,
    "ReduceMean": _reduce,
    "ReduceSum": _reduce,
    "ReduceMax": _reduce,
    "Cast": _cast,
    "Shape": _shape,
    "Sum": _variadic,
    "Where": lambda a, x, c: [(x[1].dtype, broadcast(*[v.shape for v in x]))],
    **{op: _same for op in UNARY_OPS},
    **{op: _binary for op in BINARY_OPS},
    **{op: _compare for op in COMPARE_OPS},
}


def infer_shapes(
    op_type: str,
    attrs: Mapping[str, object],
    inputs: Sequence,
    n_outputs: int = 1,
    const: Const = lambda name: None,
) -> list[tuple[int, Shape]]:
    """``[(dtype, shape), ...]`` of a node's outputs.

    Args:
        op_type: ONNX op type (default domain).
        attrs: attribute values by name.
        inputs: input :class:`~gspo.ir.graph.Value` objects (``None`` for skipped ones).
        n_outputs: number of outputs the node declares.
        const: returns the array of a constant input by value name, or ``None``.

    Raises:
        KeyError: no shape function for ``op_type``.
        ValueError: the inputs do not fit the op.
    """
    fn = SHAPE_FUNCTIONS[op_type]
    if op_type == "Split":
        return _split(attrs, inputs, const, n_outputs)
    return fn(attrs, inputs, const)[:n_outputs]


SHAPE_FUNCTIONS["Split"] = lambda a, x, c: _split(a, x, c, 1)
