"""Normalizations of the torch runtime (inference only: no running statistics are updated,
and the optional mean/variance outputs of the training forms are refused)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from gspo.runtime.torchrt.helpers import arg, extra_outputs, norm_axis, torch_pads
from gspo.runtime.torchrt.registry import Call, op


def _like(p: torch.Tensor | None, t: torch.Tensor) -> torch.Tensor | None:
    return p if p is None or p.dtype == t.dtype else p.to(t.dtype)


def _bn_check(c: Call) -> str | None:
    if c.attr("training_mode", 0):
        return "training_mode=1"
    if c.opset < 9 and c.attr("spatial", 1) == 0:
        return "spatial=0"
    return extra_outputs(c)


@op("BatchNormalization", check=_bn_check)
def _batch_norm(c: Call, x):
    t = x[0]
    scale, bias, mean, var = (_like(p, t) for p in x[1:5])
    return [F.batch_norm(t, mean, var, scale, bias, False, 0.0, c.attr("epsilon", 1e-5))]


@op("InstanceNormalization")
def _instance_norm(c: Call, x):
    t = x[0]
    return [F.instance_norm(t, weight=_like(x[1], t), bias=_like(x[2], t), eps=c.attr("epsilon", 1e-5))]


def _affine_shape(p: torch.Tensor | None, shape) -> torch.Tensor | None:
    return p if p is None or tuple(p.shape) == tuple(shape) else p.expand(shape)


@op("LayerNormalization", check=extra_outputs)
def _layer_norm(c: Call, x):
    t = x[0]
    shape = t.shape[norm_axis(c.attr("axis", -1), t.dim()):]
    scale, bias = _affine_shape(x[1], shape), _affine_shape(arg(x, 2), shape)
    return [F.layer_norm(t, shape, scale, bias, c.attr("epsilon", 1e-5))]


@op("GroupNormalization")
def _group_norm(c: Call, x):
    t, scale, bias = x[0], x[1], x[2]
    groups, channels = int(c.attr("num_groups")), t.shape[1]
    if scale.numel() != channels:  # opset 18: one scale and bias per group (21: per channel)
        scale = scale.repeat_interleave(channels // groups)
        bias = bias.repeat_interleave(channels // groups)
    return [F.group_norm(t, groups, scale, bias, c.attr("epsilon", 1e-5))]


@op("RMSNormalization")
def _rms_norm(c: Call, x):
    t = x[0]
    axis = norm_axis(c.attr("axis", -1), t.dim())
    return [rms_norm(t, x[1], tuple(range(axis, t.dim())), c.attr("epsilon", 1e-5))]


def rms_norm(t: torch.Tensor, scale: torch.Tensor, dims: tuple[int, ...], eps: float) -> torch.Tensor:
    """``t / sqrt(mean(t^2 over dims) + eps) * scale``, computed in float32 for narrower floats."""
    f = t.float() if t.dtype in (torch.float16, torch.bfloat16) else t
    y = f * torch.rsqrt(f.pow(2).mean(dim=dims, keepdim=True) + eps)
    return y.to(t.dtype) * scale


def _lp_check(c: Call) -> str | None:
    p = c.attr("p", 2)
    return None if p in (1, 2) else f"p={p}"


@op("LpNormalization", check=_lp_check)
def _lp_norm(c: Call, x):
    t = x[0]
    axis = norm_axis(c.attr("axis", -1), t.dim())
    norm = torch.linalg.vector_norm(t, ord=c.attr("p", 2), dim=axis, keepdim=True)
    return [torch.where(norm == 0, torch.zeros_like(t), t / norm)]  # ONNX: a zero vector stays zero


@op("LRN")
def _lrn(c: Call, x):
    t = x[0]
    size = int(c.attr("size"))
    alpha, beta, bias = c.attr("alpha", 1e-4), c.attr("beta", 0.75), c.attr("bias", 1.0)
    front = (size - 1) // 2  # ONNX: the channels c - floor((size-1)/2) .. c + ceil((size-1)/2)
    pads = [front] + [0] * (t.dim() - 2) + [size - 1 - front] + [0] * (t.dim() - 2)
    sq = F.pad(t * t, torch_pads(pads))
    window = sq.unfold(1, size, 1).sum(-1)
    return [t / (window * (alpha / size) + bias).pow(beta)]
