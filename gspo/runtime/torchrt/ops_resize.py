"""Resize and Upsample of the torch runtime, as onnxruntime's CPU provider computes them.

Each resized axis maps its output positions to input coordinates in float32 (onnxruntime's
arithmetic, so that ties round the same way), then gathers (nearest) or blends two neighbours
(linear, separably per axis). The index tables depend only on the sizes and attributes and are
cached on the device. Where onnxruntime and the standard differ (``align_corners`` when the
resized length ``scale * size`` is not whole) the standard's reference is followed. Cubic
interpolation weighs four neighbours per axis by the standard's kernel (``cubic_coeff_a``,
``exclude_outside``). Antialiasing and ``tf_crop_and_resize`` are refused.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from gspo.runtime.torchrt.helpers import arg, scalars
from gspo.runtime.torchrt.registry import Call, op

_TRANSFORMS = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nn",
               "half_pixel_symmetric")
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _resize_check(c: Call) -> str | None:
    mode = c.attr("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic"):
        return f"mode={mode!r} is not implemented"
    if mode != "nearest" and not c.out_dtype().is_floating_point:
        return f"{mode} interpolation of integers"
    ctm = c.attr("coordinate_transformation_mode", "half_pixel")
    if ctm not in _TRANSFORMS:
        return f"coordinate_transformation_mode={ctm!r} is not implemented"
    if c.attr("nearest_mode", "round_prefer_floor") not in _NEAREST:
        return f"nearest_mode={c.attr('nearest_mode')!r}"
    if c.attr("antialias", 0):
        return "antialias=1 is not implemented"
    if c.attr("keep_aspect_ratio_policy", "stretch") not in ("stretch", "not_larger", "not_smaller"):
        return f"keep_aspect_ratio_policy={c.attr('keep_aspect_ratio_policy')!r}"
    return None


def _original(size_in: int, size_out: int, scale: float, ctm: str, length: float) -> np.ndarray:
    """The input coordinate of each output position (float32, as onnxruntime). ``length`` is
    the standard's resized length, ``scale * size_in`` unrounded: ``align_corners`` and
    ``half_pixel_symmetric`` measure with it (float64, as the standard's reference)."""
    f = np.float32
    x = np.arange(size_out, dtype=f)
    s = f(scale)
    if ctm == "asymmetric":
        return x / s
    if ctm == "tf_half_pixel_for_nn":
        return (x + f(0.5)) / s
    if ctm == "align_corners":
        if length == size_out:
            return np.zeros_like(x) if size_out == 1 else x * f(size_in - 1) / f(size_out - 1)
        y = np.arange(size_out, dtype=np.float64)
        return (np.zeros_like(y) if length == 1 else y * (size_in - 1) / (length - 1)).astype(f)
    if ctm == "half_pixel_symmetric":
        y = np.arange(size_out, dtype=np.float64)
        offset = size_in / 2 * (1 - size_out / length)
        return (offset + (y + 0.5) / scale - 0.5).astype(f)
    if ctm == "pytorch_half_pixel" and size_out == 1:
        return np.zeros_like(x)
    return (x + f(0.5)) / s - f(0.5)  # half_pixel, pytorch_half_pixel


def _round(xo: np.ndarray, mode: str, down: bool) -> np.ndarray:
    x = xo.astype(np.float64)
    away = np.sign(x) * np.floor(np.abs(x) + 0.5)  # C's round: halves away from zero
    if mode == "round_prefer_floor":
        return np.where(xo == np.trunc(xo) + np.float32(0.5), np.trunc(x), away)
    if mode == "round_prefer_ceil":
        return away
    if mode == "floor":
        return np.floor(x)
    if mode == "ceil":
        return np.ceil(x)
    return np.ceil(x) if down else np.trunc(x)  # "simple": Upsample and Resize-10


@functools.lru_cache(maxsize=512)
def _nearest_index(size_in, size_out, scale, ctm, mode, length, device) -> torch.Tensor:
    i = _round(_original(size_in, size_out, scale, ctm, length), mode, scale < 1)
    return torch.as_tensor(np.clip(i, 0, size_in - 1).astype(np.int64), device=device)


@functools.lru_cache(maxsize=512)
def _linear_table(size_in, size_out, scale, ctm, length, dtype, device):
    xo = np.clip(_original(size_in, size_out, scale, ctm, length), 0, np.float32(size_in - 1))
    lo = np.minimum(xo.astype(np.int64), size_in - 1)
    hi = np.minimum(lo + 1, size_in - 1)
    w_hi = np.abs(xo - lo.astype(np.float32))  # the weight of the upper neighbour
    w_lo = np.abs(xo - hi.astype(np.float32))
    same = lo == hi
    w_lo[same], w_hi[same] = 0.5, 0.5
    return tuple(torch.as_tensor(a, device=device) for a in (lo, hi)) + tuple(
        torch.as_tensor(a, device=device).to(dtype) for a in (w_lo, w_hi))


def _lerp(t: torch.Tensor, axis: int, size_out: int, scale: float, ctm: str, length: float) -> torch.Tensor:
    lo, hi, w_lo, w_hi = _linear_table(t.shape[axis], size_out, scale, ctm, length, t.dtype, t.device)
    shape = [1] * t.dim()
    shape[axis] = size_out
    return t.index_select(axis, lo) * w_lo.reshape(shape) + t.index_select(axis, hi) * w_hi.reshape(shape)


def _full(values, axes, rank: int, fill) -> list | None:
    """Per-axis ``values`` of the listed ``axes`` as a list over every axis (``fill(axis)`` elsewhere)."""
    if values is None or axes is None:
        return values
    out = [fill(a) for a in range(rank)]
    for a, v in zip(axes, values):
        out[a % rank] = v
    return out


def _aspect(c: Call, sizes: list[int], dims: list[int], axes) -> tuple[list[float], list[int]]:
    """``keep_aspect_ratio_policy`` not_larger/not_smaller: one scale for the resized axes."""
    axes = range(len(dims)) if axes is None else [a % len(dims) for a in axes]
    ratios = [sizes[a] / dims[a] for a in axes]
    scale = min(ratios) if c.attr("keep_aspect_ratio_policy") == "not_larger" else max(ratios)
    scales = [scale if a in axes else 1.0 for a in range(len(dims))]
    return scales, [int(scale * d + 0.5) if a in axes else d for a, d in enumerate(dims)]


@functools.lru_cache(maxsize=512)
def _cubic_table(size_in, size_out, scale, ctm, length, kernel: tuple[float, bool], dtype, device):
    """The 4 neighbours of each output position (edges repeated) and their weights: the
    standard's cubic kernel, ``kernel`` its coefficient ``a`` and ``exclude`` (none outside,
    renormalized)."""
    a, exclude = kernel
    xo = _original(size_in, size_out, scale, ctm, length).astype(np.float64)
    base = np.floor(xo)
    r = (xo - base)[:, None]
    idx = base.astype(np.int64)[:, None] + np.arange(-1, 3)[None, :]
    d = np.abs(np.concatenate([r + 1, r, 1 - r, 2 - r], axis=1))  # distance to each neighbour
    w = np.where(d <= 1, ((a + 2) * d - (a + 3)) * d * d + 1, ((a * d - 5 * a) * d + 8 * a) * d - 4 * a)
    if exclude:
        w = np.where((idx < 0) | (idx >= size_in), 0.0, w)
        w = w / np.where(w.sum(1, keepdims=True) == 0, 1.0, w.sum(1, keepdims=True))
    idx = np.clip(idx, 0, size_in - 1)
    return torch.as_tensor(idx.reshape(-1), device=device), torch.as_tensor(w, device=device).to(dtype)


def _cubic(c: Call, t: torch.Tensor, axis: int, size_out: int, scale: float, ctm: str, length: float):
    kernel = (float(c.attr("cubic_coeff_a", -0.75)), bool(c.attr("exclude_outside", 0)))
    idx, w = _cubic_table(t.shape[axis], size_out, scale, ctm, length, kernel, t.dtype, t.device)
    near = t.index_select(axis, idx)
    near = near.reshape(*t.shape[:axis], size_out, 4, *t.shape[axis + 1:])
    shape = [1] * near.dim()
    shape[axis], shape[axis + 1] = size_out, 4
    return (near * w.reshape(shape)).sum(axis + 1)


def _plan(c: Call, x, t: torch.Tensor) -> tuple[list[float], list[int], list[float], str, str]:
    """Scales, output sizes, resized lengths (see :func:`_original`), coordinate transform and
    nearest rounding of a Resize/Upsample."""
    sizes = None
    dims = list(t.shape)
    if c.node.op_type == "Upsample" or c.opset < 11:
        scales = c.attr("scales") if c.opset < 9 else scalars(c, 1, x[1])
        ctm, nearest = "asymmetric", "simple"
    else:
        axes = c.attr("axes")
        scales = _full(scalars(c, 2, arg(x, 2)) or None, axes, t.dim(), lambda a: 1.0)
        sizes = _full(c.ints(3, arg(x, 3)) or None, axes, t.dim(), lambda a: dims[a])
        ctm = c.attr("coordinate_transformation_mode", "half_pixel")
        nearest = c.attr("nearest_mode", "round_prefer_floor")
        if sizes and c.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
            scales, sizes = _aspect(c, sizes, dims, axes)
            return scales, sizes, [s * d for s, d in zip(scales, dims)], ctm, nearest
    if sizes:
        scales = [float(np.float32(o) / np.float32(d)) for o, d in zip(sizes, dims)]
        return scales, [int(s) for s in sizes], [float(s) for s in sizes], ctm, nearest
    scales = [float(np.float32(s)) for s in scales]
    sizes = [int(np.float32(s) * np.float32(d)) for s, d in zip(scales, dims)]
    return scales, sizes, [s * d for s, d in zip(scales, dims)], ctm, nearest


@op("Resize", "Upsample", check=_resize_check)
def _resize(c: Call, x):
    t = x[0]
    scales, sizes, lengths, ctm, nearest = _plan(c, x, t)
    mode = c.attr("mode", "nearest")
    narrow = t.dtype in (torch.float16, torch.bfloat16)
    y = t.float() if mode != "nearest" and narrow else t
    for axis, (scale, size, length) in enumerate(zip(scales, sizes, lengths)):
        if scale == 1 and size == t.shape[axis]:
            continue
        if mode == "cubic":
            y = _cubic(c, y, axis, size, scale, ctm, length)
        elif mode == "linear":
            y = _lerp(y, axis, size, scale, ctm, length)
        else:
            y = y.index_select(axis, _nearest_index(y.shape[axis], size, scale, ctm, nearest, length, y.device))
    return [y.to(t.dtype) if y.dtype != t.dtype else y]
