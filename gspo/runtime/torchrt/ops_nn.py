"""Convolutions, pooling, Gemm/MatMul and softmax of the torch runtime.

Padding: ONNX pads each spatial axis at both ends independently; torch's convolutions and pools
pad symmetrically. Symmetric pads go to torch; others are applied first with ``F.pad`` (zeros
for convolutions and averages, -inf for MaxPool) and the op then runs unpadded.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from gspo.runtime.torchrt.helpers import (
    arg,
    extra_outputs,
    known_dtype,
    norm_axis,
    out_rank,
    torch_pads,
    wants,
)
from gspo.runtime.torchrt.registry import Call, op

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
_MAXPOOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVGPOOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}
_AUTO_PADS = ("NOTSET", "", "VALID", "SAME_UPPER", "SAME_LOWER")


def resolve_pads(c: Call, spatial, kernel, strides, dilations) -> list[int]:
    """The node's pads ``[begins..., ends...]``, auto_pad resolved for the input's spatial shape."""
    n = len(kernel)
    auto = c.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        return [int(p) for p in (c.attr("pads") or [0] * (2 * n))]
    if auto == "VALID":
        return [0] * (2 * n)
    begins, ends = [], []
    for size, k, s, d in zip(spatial, kernel, strides, dilations):
        total = max(0, (math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size)
        small, big = total // 2, total - total // 2
        begins.append(small if auto == "SAME_UPPER" else big)
        ends.append(big if auto == "SAME_UPPER" else small)
    return begins + ends


def _spatial_check(c: Call, kernel_from_weight: bool) -> str | None:
    if c.attr("auto_pad", "NOTSET") not in _AUTO_PADS:
        return f"auto_pad={c.attr('auto_pad')!r}"
    w = c.const(1) if kernel_from_weight else None
    kernel = c.attr("kernel_shape")
    n = w.ndim - 2 if w is not None else len(kernel) if kernel else None
    if n is None:
        rank = out_rank(c)
        n = None if rank is None else rank - 2
    if n not in (1, 2, 3):
        return f"{n if n is not None else 'unknown'} spatial axes (torch has 1-D to 3-D)"
    return None


def conv_check(c: Call) -> str | None:
    return _spatial_check(c, True)


def _pad_input(t: torch.Tensor, pads: list[int], value: float = 0.0) -> tuple[torch.Tensor, list[int]]:
    """``t`` padded as ``pads`` says, and the symmetric padding left for torch to apply."""
    n = len(pads) // 2
    if pads[:n] == pads[n:]:
        return t, pads[:n]
    return F.pad(t, torch_pads(pads), value=value), [0] * n


def _geometry(c: Call, t: torch.Tensor, kernel) -> tuple[list[int], list[int], list[int]]:
    n = len(kernel)
    strides = [int(s) for s in (c.attr("strides") or [1] * n)]
    dilations = [int(d) for d in (c.attr("dilations") or [1] * n)]
    pads = resolve_pads(c, t.shape[2:], kernel, strides, dilations)
    return strides, dilations, pads


def conv(c: Call, t: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """The node's convolution of ``t`` by ``w`` (pads, strides, dilations, group as attributed)."""
    strides, dilations, pads = _geometry(c, t, list(w.shape[2:]))
    t, padding = _pad_input(t, pads)
    return _CONV[w.dim() - 2](t, w, b, strides, padding, dilations, c.attr("group", 1))


@op("Conv", check=conv_check)
def _conv(c: Call, x):
    return [conv(c, x[0], x[1], arg(x, 2))]


def _conv_transpose_check(c: Call) -> str | None:
    if c.attr("output_shape") is not None:
        return "output_shape is not supported"
    if c.attr("auto_pad", "NOTSET") not in ("NOTSET", "", "VALID"):
        return f"auto_pad={c.attr('auto_pad')}"
    return _spatial_check(c, True)


@op("ConvTranspose", check=_conv_transpose_check)
def _conv_transpose(c: Call, x):
    t, w, b = x[0], x[1], arg(x, 2)
    n = w.dim() - 2
    strides = [int(s) for s in (c.attr("strides") or [1] * n)]
    dilations = [int(d) for d in (c.attr("dilations") or [1] * n)]
    out_pad = [int(p) for p in (c.attr("output_padding") or [0] * n)]
    pads = [0] * (2 * n) if c.attr("auto_pad", "NOTSET") == "VALID" else [int(p) for p in (c.attr("pads") or [0] * (2 * n))]
    group = c.attr("group", 1)
    fits = all(p < max(s, d) for p, s, d in zip(out_pad, strides, dilations))
    if pads[:n] == pads[n:] and fits:
        return [_CONV_T[n](t, w, b, strides, pads[:n], out_pad, group, dilations)]
    # unpadded, then each axis cropped by its pads and extended by output_padding
    y = _CONV_T[n](t, w, None, strides, 0, 0, group, dilations)
    y = F.pad(y, torch_pads([-p for p in pads[:n]] + [op_ - p for op_, p in zip(out_pad, pads[n:])]))
    if b is not None:
        y = y + b.reshape([1, -1] + [1] * n)
    return [y]


# ---------------------------------------------------------------- pooling
def _pool_check(c: Call) -> str | None:
    reason = _spatial_check(c, False) or extra_outputs(c)
    if reason:
        return reason
    if c.attr("storage_order", 0):
        return "storage_order=1"
    if c.node.op_type == "AveragePool" and any(int(d) != 1 for d in (c.attr("dilations") or [])):
        return "dilations on AveragePool (torch's avg_pool has none)"
    return None


def _ceil_crop(y: torch.Tensor, t: torch.Tensor, kernel, strides, dilations, pads) -> torch.Tensor:
    """Drop the windows a ceil_mode pool starts in the end padding (onnxruntime and torch do)."""
    n = len(kernel)
    for i in range(n):
        size, k, s, d = t.shape[2 + i], kernel[i], strides[i], dilations[i]
        span = size + pads[i] + pads[n + i] - d * (k - 1) - 1
        out = -(-span // s) + 1
        if (out - 1) * s >= size + pads[i]:
            out -= 1
        if y.shape[2 + i] > out:
            y = y.narrow(2 + i, 0, out)
    return y


def _pool_args(c: Call, t: torch.Tensor):
    kernel = [int(k) for k in c.attr("kernel_shape")]
    strides, dilations, pads = _geometry(c, t, kernel)
    n = len(kernel)
    native = pads[:n] == pads[n:] and all(2 * p <= d * (k - 1) + 1 for p, k, d in zip(pads, kernel, dilations))
    return kernel, strides, dilations, pads, native


@op("MaxPool", check=_pool_check)
def _max_pool(c: Call, x):
    t = x[0]
    kernel, strides, dilations, pads, native = _pool_args(c, t)
    n, ceil = len(kernel), bool(c.attr("ceil_mode", 0))
    pool = _MAXPOOL[n]
    if native:
        return [pool(t, kernel, strides, pads[:n], dilations, ceil_mode=ceil)]
    low = float("-inf") if t.dtype.is_floating_point else torch.iinfo(t.dtype).min
    y = pool(F.pad(t, torch_pads(pads), value=low), kernel, strides, 0, dilations, ceil_mode=ceil)
    return [_ceil_crop(y, t, kernel, strides, dilations, pads) if ceil else y]


@op("AveragePool", check=_pool_check)
def _avg_pool(c: Call, x):
    t = x[0]
    if t.dim() == 5 and t.device.type == "cpu" and t.dtype in (torch.float16, torch.bfloat16):
        # torch's CPU has no float16 or bfloat16 avg_pool3d: the average in float32, rounded once
        return [_avg_pool(c, [t.float()])[0].to(t.dtype)]
    kernel, strides, dilations, pads, native = _pool_args(c, t)
    n, ceil = len(kernel), bool(c.attr("ceil_mode", 0))
    include = bool(c.attr("count_include_pad", 0))
    pool = _AVGPOOL[n]
    if native:
        return [pool(t, kernel, strides, pads[:n], ceil_mode=ceil, count_include_pad=include)]
    y = pool(F.pad(t, torch_pads(pads)), kernel, strides, 0, ceil_mode=ceil)
    if not include:  # the divisor counts only the input's own elements
        ones = F.pad(torch.ones_like(t[:1, :1]), torch_pads(pads))
        y = y / pool(ones, kernel, strides, 0, ceil_mode=ceil)
    return [_ceil_crop(y, t, kernel, strides, dilations, pads) if ceil else y]


@op("GlobalAveragePool")
def _global_avg_pool(c: Call, x):
    t = x[0]
    return [t.mean(dim=tuple(range(2, t.dim())), keepdim=True)]


@op("GlobalMaxPool")
def _global_max_pool(c: Call, x):
    t = x[0]
    return [t.amax(dim=tuple(range(2, t.dim())), keepdim=True)]


# ---------------------------------------------------------------- matrix products
def _float_on_cuda(c: Call) -> str | None:
    if c.device.type == "cuda" and not c.out_dtype().is_floating_point:
        return "integer matrix products have no CUDA kernel in torch"
    return None


@op("MatMul", check=_float_on_cuda)
def _matmul(c: Call, x):
    return [torch.matmul(x[0], x[1])]


@op("Gemm", check=_float_on_cuda)
def _gemm(c: Call, x):
    a, b, bias = x[0], x[1], arg(x, 2)
    alpha, beta = c.attr("alpha", 1.0), c.attr("beta", 1.0)
    a = a.t() if c.attr("transA", 0) else a
    if bias is None or beta == 0:
        y = torch.matmul(a, b.t() if c.attr("transB", 0) else b)
        return [y if alpha == 1 else y * alpha]
    if c.attr("transB", 0):
        if alpha == 1 and beta == 1 and bias.dim() == 1:
            return [F.linear(a, b, bias)]
        b = b.t()
    return [torch.addmm(bias, a, b, beta=beta, alpha=alpha)]


# ---------------------------------------------------------------- softmax
def _coerced(fn):
    """Softmax-like ``fn(t, dim)`` along ``axis``: opset 13 on the one axis (default -1);
    before, on the input flattened to 2-D at ``axis`` (default 1)."""
    def run(c: Call, x):
        t = x[0]
        if c.opset >= 13:
            return [fn(t, norm_axis(c.attr("axis", -1), t.dim()))]
        axis = norm_axis(c.attr("axis", 1), t.dim())
        rows = math.prod(t.shape[:axis])
        return [fn(t.reshape(rows, math.prod(t.shape[axis:])), 1).reshape(t.shape)]
    return run


def _hardmax(t: torch.Tensor, dim: int) -> torch.Tensor:
    first = torch.argmax(t, dim=dim, keepdim=True)  # the first maximum, as ONNX
    return torch.zeros_like(t).scatter_(dim, first, 1)


op("Softmax")(_coerced(lambda t, d: torch.softmax(t, d)))
op("LogSoftmax")(_coerced(lambda t, d: torch.log_softmax(t, d)))
op("Hardmax")(_coerced(_hardmax))


# ---------------------------------------------------------------- dropout
def _dropout_check(c: Call) -> str | None:
    if c.opset >= 12 and c.node.inputs[2:3] and c.node.inputs[2]:
        mode = c.const(2)
        if mode is None:
            return "training_mode is not known when the model is converted"
        if bool(mode.reshape(-1)[0]):
            return "training_mode=1 (random)"
    if c.opset < 7 and not c.attr("is_test", 0):
        return "is_test=0 (random)"
    if c.opset < 12 and wants(c, 1):
        return "the mask before opset 12 (onnxruntime gives all False, ONNX all True)"
    return known_dtype(c, 1) if wants(c, 1) else None


@op("Dropout", check=_dropout_check)
def _dropout(c: Call, x):
    if wants(c, 1):
        return [x[0], torch.ones(x[0].shape, dtype=c.out_dtype(1), device=x[0].device)]
    return [x[0]]
