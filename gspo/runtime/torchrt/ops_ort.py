"""onnxruntime's fused ops (domain ``com.microsoft``, and ``SimplifiedLayerNormalization``, which
onnxruntime registers in the default domain), as its transformer optimizer writes them.

A node of these ops is loaded by gspo as opaque bytes (they have no ONNX schema), which
:func:`~gspo.runtime.torchrt.ops.lookup` refuses: these entries serve a converter that decodes
such a node into a plain :class:`~gspo.ir.Node` first.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from gspo.runtime.torchrt.helpers import arg, n_wanted, wants
from gspo.runtime.torchrt.ops_norm import rms_norm
from gspo.runtime.torchrt.registry import Call, op

MS = "com.microsoft"


@op("Gelu", domain=MS)
def _gelu(c: Call, x):
    return [F.gelu(x[0])]


@op("BiasGelu", domain=MS)
def _bias_gelu(c: Call, x):
    return [F.gelu(x[0] + x[1])]


@op("FastGelu", domain=MS)
def _fast_gelu(c: Call, x):
    t = x[0] if arg(x, 1) is None else x[0] + x[1]
    return [F.gelu(t, approximate="tanh")]


@op("QuickGelu", domain=MS)
def _quick_gelu(c: Call, x):
    return [x[0] * torch.sigmoid(x[0] * c.attr("alpha", 1.702))]


def _fused_matmul_check(c: Call) -> str | None:
    if c.attr("transBatchA", 0) or c.attr("transBatchB", 0):
        return "transBatchA/transBatchB are not implemented"
    return None


@op("FusedMatMul", domain=MS, check=_fused_matmul_check)
def _fused_matmul(c: Call, x):
    a, b = x[0], x[1]
    a = a.transpose(-1, -2) if c.attr("transA", 0) else a
    b = b.transpose(-1, -2) if c.attr("transB", 0) else b
    y = torch.matmul(a, b)
    alpha = c.attr("alpha", 1.0)
    return [y if alpha == 1 else y * alpha]


def _skip_check(c: Call) -> str | None:
    if wants(c, 1) or wants(c, 2):
        return "the mean and inverse standard deviation outputs are not computed"
    return None


def _skip_sum(x) -> torch.Tensor:
    s = x[0] + x[1]
    bias = arg(x, 4)
    return s if bias is None else s + bias


@op("SkipLayerNormalization", domain=MS, check=_skip_check)
def _skip_layer_norm(c: Call, x):
    s = _skip_sum(x)
    y = F.layer_norm(s, s.shape[-1:], x[2], arg(x, 3), c.attr("epsilon", 1e-12))
    return [y, None, None, s] if n_wanted(c) > 3 else [y]


@op("SkipSimplifiedLayerNormalization", domain=MS, check=_skip_check)
def _skip_simplified_layer_norm(c: Call, x):
    s = x[0] + x[1] if arg(x, 3) is None else x[0] + x[1] + x[3]
    y = rms_norm(s, x[2], (-1,), c.attr("epsilon", 1e-12))
    return [y, None, None, s] if n_wanted(c) > 3 else [y]


def _simplified_check(c: Call) -> str | None:
    return "the inverse standard deviation output is not computed" if wants(c, 1) else None


@op("SimplifiedLayerNormalization", check=_simplified_check)
def _simplified_layer_norm(c: Call, x):
    t = x[0]
    axis = c.attr("axis", -1)
    axis = axis + t.dim() if axis < 0 else axis
    return [rms_norm(t, x[1], tuple(range(axis, t.dim())), c.attr("epsilon", 1e-5))]
