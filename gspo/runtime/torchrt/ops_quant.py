"""Quantization ops of the torch runtime: QuantizeLinear, DequantizeLinear (per tensor and per
axis), DynamicQuantizeLinear, MatMulInteger and ConvInteger.

Rounding is half to even (``torch.round``), as ONNX; quantized values saturate to their type.
Integer products are computed in float64, exact for every sum below 2**53 (torch has no integer
matrix product or convolution on CUDA).
"""

from __future__ import annotations

import torch

from gspo.runtime.torchrt.helpers import arg, norm_axis
from gspo.runtime.torchrt.ops_nn import conv, conv_check
from gspo.runtime.torchrt.registry import Call, Unsupported, op

_QTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32) + tuple(
    getattr(torch, n) for n in ("uint16",) if hasattr(torch, n))


def _per_axis(p: torch.Tensor, t: torch.Tensor, axis: int) -> torch.Tensor:
    """A scale or zero point shaped to broadcast along ``axis`` of ``t`` when it is per axis."""
    if p.dim() == 0 or p.numel() == 1 or t.dim() == 0:
        return p.reshape(())
    shape = [1] * t.dim()
    shape[norm_axis(axis, t.dim())] = -1
    return p.reshape(shape)


def _quant_check(c: Call) -> str | None:
    if c.attr("block_size", 0):
        return "blocked quantization (block_size) is not implemented"
    try:
        dtype = c.out_dtype()
    except Unsupported as e:
        return str(e)
    if c.node.op_type == "QuantizeLinear" and dtype not in _QTYPES:
        return f"quantization to {dtype}"
    return None


@op("QuantizeLinear", check=_quant_check)
def _quantize(c: Call, x):
    t, scale, zp = x[0], x[1], arg(x, 2)
    axis = c.attr("axis", 1)
    dtype = c.out_dtype()
    q = torch.round(t.float() / _per_axis(scale.float(), t, axis))
    if zp is not None:
        q = q + _per_axis(zp, t, axis).float()
    info = torch.iinfo(dtype)
    return [q.clamp(info.min, info.max).to(dtype)]


@op("DequantizeLinear", check=_quant_check)
def _dequantize(c: Call, x):
    t, scale, zp = x[0], x[1], arg(x, 2)
    axis = c.attr("axis", 1)
    q = t.to(torch.int32)
    if zp is not None:
        q = q - _per_axis(zp, t, axis).to(torch.int32)
    y = q.to(scale.dtype) * _per_axis(scale, t, axis)
    dtype = c.out_dtype()
    return [y if y.dtype == dtype else y.to(dtype)]


@op("DynamicQuantizeLinear")
def _dynamic_quantize(c: Call, x):
    t = x[0].float()
    lo, hi = t.amin().clamp(max=0.0), t.amax().clamp(min=0.0)
    scale = torch.where(hi == lo, torch.ones_like(hi), (hi - lo) / 255.0)  # onnxruntime: 1 when all zero
    zp = torch.round(torch.clamp(0.0 - lo / scale, 0.0, 255.0))
    y = torch.clamp(torch.round(t / scale) + zp, 0.0, 255.0)
    return [y.to(torch.uint8), scale, zp.to(torch.uint8)]


def _centered(t: torch.Tensor, zp: torch.Tensor | None, shape=None) -> torch.Tensor:
    f = t.double()
    if zp is None:
        return f
    z = zp.double()
    return f - (z.reshape(shape) if shape is not None and z.numel() > 1 else z.reshape(()) if z.numel() == 1 else z)


@op("MatMulInteger")
def _matmul_integer(c: Call, x):
    a = _centered(x[0], arg(x, 2), (-1, 1))  # a's zero point: per row
    b = _centered(x[1], arg(x, 3))  # b's: per column
    return [torch.matmul(a, b).to(torch.int32)]


@op("ConvInteger", check=conv_check)
def _conv_integer(c: Call, x):
    t = _centered(x[0], arg(x, 2))
    w = x[1]
    w = _centered(w, arg(x, 3), (-1,) + (1,) * (w.dim() - 1))  # per output channel
    return [conv(c, t, w, None).to(torch.int32)]
