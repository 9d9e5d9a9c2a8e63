"""Resize and Upsample of the torch runtime, as onnxruntime's CPU provider computes them.

Each resized axis maps its output positions to input coordinates in float32 (onnxruntime's
arithmetic, so that ties round the same way), then gathers (nearest) or blends two neighbours
(linear, separably per axis). The index tables depend only on the sizes and attributes and are
cached on the device. Cubic interpolation, antialiasing, ``axes``, ``keep_aspect_ratio_policy``
and ``tf_crop_and_resize`` are refused.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from gspo.runtime.torchrt.helpers import arg, scalars
from gspo.runtime.torchrt.registry import Call, op

_TRANSFORMS = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nn")
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _resize_check(c: Call) -> str | None:
    mode = c.attr("mode", "nearest")
    if mode not in ("nearest", "linear"):
        return f"mode={mode!r} is not implemented"
    if mode == "linear" and not c.out_dtype().is_floating_point:
        return "linear interpolation of integers"
    ctm = c.attr("coordinate_transformation_mode", "half_pixel")
    if ctm not in _TRANSFORMS:
        return f"coordinate_transformation_mode={ctm!r} is not implemented"
    if c.attr("nearest_mode", "round_prefer_floor") not in _NEAREST:
        return f"nearest_mode={c.attr('nearest_mode')!r}"
    if c.attr("antialias", 0):
        return "antialias=1 is not implemented"
    if c.attr("axes") is not None:
        return "axes is not implemented"
    if c.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
        return f"keep_aspect_ratio_policy={c.attr('keep_aspect_ratio_policy')!r} is not implemented"
    return None


def _original(size_in: int, size_out: int, scale: float, ctm: str) -> np.ndarray:
    """The input coordinate of each output position (float32, as onnxruntime)."""
    f = np.float32
    x = np.arange(size_out, dtype=f)
    s = f(scale)
    if ctm == "asymmetric":
        return x / s
    if ctm == "tf_half_pixel_for_nn":
        return (x + f(0.5)) / s
    if ctm == "align_corners":
        return np.zeros_like(x) if size_out == 1 else x * f(size_in - 1) / f(size_out - 1)
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
def _nearest_index(size_in, size_out, scale, ctm, mode, device) -> torch.Tensor:
    i = _round(_original(size_in, size_out, scale, ctm), mode, scale < 1)
    return torch.as_tensor(np.clip(i, 0, size_in - 1).astype(np.int64), device=device)


@functools.lru_cache(maxsize=512)
def _linear_table(size_in, size_out, scale, ctm, dtype, device):
    xo = np.clip(_original(size_in, size_out, scale, ctm), 0, np.float32(size_in - 1))
    lo = np.minimum(xo.astype(np.int64), size_in - 1)
    hi = np.minimum(lo + 1, size_in - 1)
    w_hi = np.abs(xo - lo.astype(np.float32))  # the weight of the upper neighbour
    w_lo = np.abs(xo - hi.astype(np.float32))
    same = lo == hi
    w_lo[same], w_hi[same] = 0.5, 0.5
    return tuple(torch.as_tensor(a, device=device) for a in (lo, hi)) + tuple(
        torch.as_tensor(a, device=device).to(dtype) for a in (w_lo, w_hi))


def _lerp(t: torch.Tensor, axis: int, size_out: int, scale: float, ctm: str) -> torch.Tensor:
    lo, hi, w_lo, w_hi = _linear_table(t.shape[axis], size_out, scale, ctm, t.dtype, t.device)
    shape = [1] * t.dim()
    shape[axis] = size_out
    return t.index_select(axis, lo) * w_lo.reshape(shape) + t.index_select(axis, hi) * w_hi.reshape(shape)


def _plan(c: Call, x, t: torch.Tensor) -> tuple[list[float], list[int], str, str]:
    """Scales, output sizes, coordinate transform and nearest rounding of a Resize/Upsample."""
    sizes = None
    if c.node.op_type == "Upsample" or c.opset < 11:
        scales = c.attr("scales") if c.opset < 9 else scalars(c, 1, x[1])
        ctm, nearest = "asymmetric", "simple"
    else:
        scales = scalars(c, 2, arg(x, 2))
        sizes = c.ints(3, arg(x, 3))
        ctm = c.attr("coordinate_transformation_mode", "half_pixel")
        nearest = c.attr("nearest_mode", "round_prefer_floor")
    dims = list(t.shape)
    if sizes:
        scales = [float(np.float32(o) / np.float32(d)) for o, d in zip(sizes, dims)]
        return scales, [int(s) for s in sizes], ctm, nearest
    scales = [float(np.float32(s)) for s in scales]
    return scales, [int(np.float32(s) * np.float32(d)) for s, d in zip(scales, dims)], ctm, nearest


@op("Resize", "Upsample", check=_resize_check)
def _resize(c: Call, x):
    t = x[0]
    scales, sizes, ctm, nearest = _plan(c, x, t)
    linear = c.attr("mode", "nearest") == "linear"
    narrow = t.dtype in (torch.float16, torch.bfloat16)
    y = t.float() if linear and narrow else t
    for axis, (scale, size) in enumerate(zip(scales, sizes)):
        if scale == 1 and size == t.shape[axis]:
            continue
        if linear:
            y = _lerp(y, axis, size, scale, ctm)
        else:
            y = y.index_select(axis, _nearest_index(y.shape[axis], size, scale, ctm, nearest, y.device))
    return [y.to(t.dtype) if y.dtype != t.dtype else y]
