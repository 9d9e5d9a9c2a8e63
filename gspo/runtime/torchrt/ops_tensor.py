"""Shape and layout ops of the torch runtime: views and copies, no arithmetic.

Shape-like inputs (a Reshape's shape, a Slice's bounds, ...) are read with :meth:`Call.ints`:
known at conversion they cost nothing; computed from the data, reading them syncs the device.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from gspo.runtime.torchrt.helpers import (
    arg,
    axes_of,
    known_dtype,
    norm_axis,
    scalars,
    tensor,
    torch_pads,
)
from gspo.runtime.torchrt.registry import Call, op


@op("Reshape")
def _reshape(c: Call, x):
    t = x[0]
    shape = c.ints(1, x[1]) if c.opset >= 5 else [int(d) for d in c.attr("shape")]
    if not c.attr("allowzero", 0):  # 0 copies the input's dimension
        shape = [t.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return [t.reshape(shape)]


@op("Flatten")
def _flatten(c: Call, x):
    t = x[0]
    axis = norm_axis(c.attr("axis", 1), t.dim())
    return [t.reshape(math.prod(t.shape[:axis]), math.prod(t.shape[axis:]))]


@op("Transpose")
def _transpose(c: Call, x):
    t = x[0]
    perm = c.attr("perm") or list(reversed(range(t.dim())))
    return [t.permute(*[int(p) for p in perm])]


@op("Concat")
def _concat(c: Call, x):
    ts = [t for t in x if t is not None]
    return [torch.cat(ts, dim=norm_axis(c.attr("axis"), ts[0].dim()))]


@op("Split")
def _split(c: Call, x):
    t = x[0]
    axis = norm_axis(c.attr("axis", 0), t.dim())
    sizes = c.ints(1, arg(x, 1)) if c.opset >= 13 else c.attr("split")
    if not sizes:
        dim, parts = t.shape[axis], c.attr("num_outputs")
        if parts is not None:  # opset 18: the last chunk is smaller when the axis does not divide
            chunk = -(-dim // parts)
            sizes = [chunk] * (parts - 1) + [dim - chunk * (parts - 1)]
        else:
            parts = len(c.node.outputs)
            sizes = [dim // parts] * parts
    return list(torch.split(t, [int(s) for s in sizes], dim=axis))


def _slice_axis(start: int, end: int, step: int, dim: int) -> tuple[slice, bool]:
    """A positive-step slice of one axis and whether to flip it after, as ONNX clamps the bounds."""
    if step > 0:
        start = min(max(start + dim if start < 0 else start, 0), dim)
        end = min(max(end + dim if end < 0 else end, 0), dim)
        return slice(start, end, step), False
    start = min(max(start + dim if start < 0 else start, 0), dim - 1)
    end = min(max(end + dim if end < 0 else end, -1), dim - 1)
    n = max(0, (start - end + (-step) - 1) // (-step)) if end < start else 0
    if n == 0:
        return slice(0, 0), False
    low = start + (n - 1) * step
    return slice(low, start + 1, -step), True


@op("Slice")
def _slice(c: Call, x):
    t = x[0]
    if c.opset >= 10:
        starts, ends = c.ints(1, x[1]), c.ints(2, x[2])
        axes, steps = c.ints(3, arg(x, 3)), c.ints(4, arg(x, 4))
    else:
        starts, ends, axes, steps = c.attr("starts"), c.attr("ends"), c.attr("axes"), None
    axes = [norm_axis(a, t.dim()) for a in (axes or range(len(starts)))]
    steps = steps or [1] * len(starts)
    index: list[slice] = [slice(None)] * t.dim()
    flips = []
    for s, e, a, st in zip(starts, ends, axes, steps):
        index[a], flip = _slice_axis(int(s), int(e), int(st), t.shape[a])
        if flip:
            flips.append(a)
    y = t[tuple(index)]
    return [y.flip(flips) if flips else y]


def _pad_check(c: Call) -> str | None:
    mode = c.attr("mode", "constant")
    return None if mode in ("constant", "reflect", "edge", "wrap") else f"mode={mode!r}"


def _full_pads(c: Call, x, rank: int) -> list[int]:
    if c.opset < 11:
        return [int(p) for p in c.attr("pads")]
    pads = c.ints(1, x[1])
    axes = c.ints(3, arg(x, 3)) if c.opset >= 18 else None
    if axes is None:
        return pads
    full = [0] * (2 * rank)
    for j, a in enumerate(axes):
        a = norm_axis(a, rank)
        full[a], full[rank + a] = pads[j], pads[len(axes) + j]
    return full


def _pad_indices(begin: int, end: int, dim: int, mode: str, device) -> torch.Tensor:
    i = torch.arange(-begin, dim + end, device=device)
    if mode == "edge":
        return i.clamp(0, dim - 1)
    if mode == "wrap":
        return i.remainder(dim)
    if dim == 1:  # reflect
        return torch.zeros_like(i)
    m = i.remainder(2 * (dim - 1))
    return torch.where(m >= dim, 2 * (dim - 1) - m, m)


@op("Pad", check=_pad_check)
def _pad(c: Call, x):
    t, mode = x[0], c.attr("mode", "constant")
    r = t.dim()
    pads = _full_pads(c, x, r)
    if mode == "constant":
        first = next((a for a in range(r) if pads[a] or pads[r + a]), r)
        tp = torch_pads(pads[first:r] + pads[r + first:])
        if c.opset < 11 or arg(x, 2) is None or c.const(2) is not None:
            value = c.attr("value", 0.0) if c.opset < 11 else scalars(c, 2, arg(x, 2))
            value = value[0] if isinstance(value, list) else value
            return [F.pad(t, tp, value=value if value is not None else 0)]
        mask = F.pad(torch.zeros_like(t, dtype=torch.bool), tp, value=True)
        return [torch.where(mask, x[2].to(t.dtype), F.pad(t, tp))]
    for a in range(r):  # negative pads crop first, as onnxruntime does
        b, e = pads[a], pads[r + a]
        if b < 0 or e < 0:
            t = t.narrow(a, max(-b, 0), t.shape[a] - max(-b, 0) - max(-e, 0))
        if b > 0 or e > 0:
            t = t.index_select(a, _pad_indices(max(b, 0), max(e, 0), t.shape[a], mode, t.device))
    return [t]


@op("Squeeze")
def _squeeze(c: Call, x):
    t = x[0]
    axes = axes_of(c, x, 1, 13)
    if not axes:  # none given (or an empty list, as onnxruntime reads it): every axis of size 1
        return [t.squeeze()]
    return [t.squeeze(tuple(norm_axis(a, t.dim()) for a in axes))]


@op("Unsqueeze")
def _unsqueeze(c: Call, x):
    t = x[0]
    axes = axes_of(c, x, 1, 13) or []
    rank = t.dim() + len(axes)
    shape = list(t.shape)
    for a in sorted(norm_axis(a, rank) for a in axes):
        shape.insert(a, 1)
    return [t.reshape(shape)]


@op("Expand")
def _expand(c: Call, x):
    t = x[0]
    return [t.expand(torch.broadcast_shapes(tuple(t.shape), tuple(c.ints(1, x[1]))))]


@op("Tile")
def _tile(c: Call, x):
    return [x[0].repeat(c.ints(1, x[1]))]


@op("Shape")
def _shape(c: Call, x):
    start, end = c.attr("start", 0), c.attr("end")
    return [torch.tensor(list(x[0].shape)[start:end], dtype=torch.int64, device=c.device)]


@op("Size")
def _size(c: Call, x):
    return [torch.tensor(x[0].numel(), dtype=torch.int64, device=c.device)]


_CONSTANT_ATTRS = {"value": None, "value_float": torch.float32, "value_floats": torch.float32,
                   "value_int": torch.int64, "value_ints": torch.int64}


def _constant_check(c: Call) -> str | None:
    given = [a.name for a in c.node.attrs]
    bad = [n for n in given if n not in _CONSTANT_ATTRS]
    return f"{bad[0]} is not supported" if bad else known_dtype(c)


@op("Constant", check=_constant_check)
def _constant(c: Call, x):
    for name, dtype in _CONSTANT_ATTRS.items():
        v = c.attr(name)
        if v is not None:
            return [tensor(c, v, dtype or c.out_dtype())]
    raise ValueError("Constant without a value")


@op("ConstantOfShape", check=known_dtype)
def _constant_of_shape(c: Call, x):
    v = c.attr("value")
    if v is not None and (v.dtype.kind == "V" or v.dtype.name == "bfloat16"):
        v = v.astype(np.float32)
    value = 0.0 if v is None else np.asarray(v).reshape(-1)[0].item()
    return [torch.full(c.ints(0, x[0]), value, dtype=c.out_dtype(), device=c.device)]


@op("Range", check=known_dtype)
def _range(c: Call, x):
    start, limit, delta = (scalars(c, i, x[i])[0] for i in range(3))
    dtype = c.out_dtype()
    if dtype.is_floating_point:  # onnxruntime: the difference in the type, the quotient in double
        span = float(torch.tensor(limit, dtype=dtype) - torch.tensor(start, dtype=dtype))
        n = max(0, math.ceil(span / float(torch.tensor(delta, dtype=dtype))))
        return [(torch.arange(n, dtype=torch.float64, device=c.device) * delta + start).to(dtype)]
    n = max(0, -((start - limit) // delta))
    return [(torch.arange(n, dtype=torch.int64, device=c.device) * delta + start).to(dtype)]


@op("EyeLike", check=known_dtype)
def _eye_like(c: Call, x):
    n, m = x[0].shape
    i = torch.arange(n, device=c.device)[:, None]
    j = torch.arange(m, device=c.device)[None, :]
    return [(j - i == c.attr("k", 0)).to(c.out_dtype())]


@op("DepthToSpace")
def _depth_to_space(c: Call, x):
    t, b = x[0], int(c.attr("blocksize"))
    n, ch, h, w = t.shape
    if c.attr("mode", "DCR") == "CRD":
        y = t.reshape(n, ch // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
    else:
        y = t.reshape(n, b, b, ch // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
    return [y.reshape(n, ch // (b * b), h * b, w * b)]


@op("SpaceToDepth")
def _space_to_depth(c: Call, x):
    t, b = x[0], int(c.attr("blocksize"))
    n, ch, h, w = t.shape
    order = (0, 1, 3, 5, 2, 4) if c.attr("mode", "DCR") == "CRD" else (0, 3, 5, 1, 2, 4)  # mode: opset 28
    y = t.reshape(n, ch, h // b, b, w // b, b).permute(*order)
    return [y.reshape(n, ch * b * b, h // b, w // b)]
