"""Indexing ops of the torch runtime: Gather*, Scatter*, OneHot, NonZero, Trilu, Einsum.

ONNX allows negative indices (counted from the end of their axis); they are wrapped on the
device with ``torch.where`` unless the indices are known at conversion to be non-negative.
"""

from __future__ import annotations

import math

import torch

from gspo.runtime.torchrt.helpers import arg, norm_axis, scalars
from gspo.runtime.torchrt.registry import Call, op


def _wrap(idx: torch.Tensor, dim: int, non_negative: bool = False) -> torch.Tensor:
    """``idx`` with negative indices counted from the end of an axis of ``dim``; as it is when
    known at conversion to hold none (:meth:`Call.non_negative`)."""
    if non_negative:
        return idx
    return torch.where(idx < 0, idx + dim, idx)


@op("Gather")
def _gather(c: Call, x):
    t, idx = x[0], x[1]
    axis = norm_axis(c.attr("axis", 0), t.dim())
    if c.known_shape(1) == () and c.numbers(1) is not None:
        return [t.select(axis, int(c.numbers(1)[0]))]
    idx = _wrap(idx, t.shape[axis], c.non_negative(1))
    y = t.index_select(axis, idx.reshape(-1))
    return [y.reshape(t.shape[:axis] + idx.shape + t.shape[axis + 1:])]


@op("GatherElements")
def _gather_elements(c: Call, x):
    t = x[0]
    axis = norm_axis(c.attr("axis", 0), t.dim())
    return [torch.gather(t, axis, _wrap(x[1], t.shape[axis], c.non_negative(1)).long())]


def _linear_index(idx: torch.Tensor, dims) -> torch.Tensor:
    """The row-major position of each index tuple (the last axis of ``idx``) in ``dims``."""
    lin = None
    for j, d in enumerate(dims):
        i = idx[..., j]
        i = torch.where(i < 0, i + d, i) * math.prod(dims[j + 1:])
        lin = i if lin is None else lin + i
    return lin if lin is not None else torch.zeros(idx.shape[:-1], dtype=torch.int64, device=idx.device)


@op("GatherND")
def _gather_nd(c: Call, x):
    t, idx = x[0], x[1].long()
    b, k = int(c.attr("batch_dims", 0)), idx.shape[-1]
    batch = math.prod(t.shape[:b])
    inner, rest = tuple(t.shape[b:b + k]), tuple(t.shape[b + k:])
    lin = _linear_index(idx.reshape(batch, -1, k), inner)
    data = t.reshape(batch, math.prod(inner), *rest)
    rows = torch.arange(batch, device=t.device).unsqueeze(1)
    return [data[rows, lin].reshape(tuple(idx.shape[:-1]) + rest)]


_REDUCTIONS = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


def _reduction_check(c: Call) -> str | None:
    red = c.attr("reduction", "none")
    return None if red == "none" or red in _REDUCTIONS else f"reduction={red!r}"


@op("ScatterElements", "Scatter", check=_reduction_check)
def _scatter_elements(c: Call, x):
    t, upd = x[0], x[2]
    axis = norm_axis(c.attr("axis", 0), t.dim())
    idx = _wrap(x[1], t.shape[axis], c.non_negative(1)).long()
    red = c.attr("reduction", "none")
    if red == "none":
        return [t.scatter(axis, idx, upd)]
    return [t.scatter_reduce(axis, idx, upd, _REDUCTIONS[red], include_self=True)]


@op("ScatterND", check=_reduction_check)
def _scatter_nd(c: Call, x):
    t, idx, upd = x[0], x[1].long(), x[2]
    k = idx.shape[-1]
    inner, rest = tuple(t.shape[:k]), tuple(t.shape[k:])
    lin = _linear_index(idx, inner).reshape(-1)
    data = t.reshape(math.prod(inner), *rest)
    u = upd.reshape(-1, *rest)
    red = c.attr("reduction", "none")
    if red == "none":
        y = data.index_copy(0, lin, u)
    elif red == "add":
        y = data.index_add(0, lin, u)
    else:
        idx = lin.reshape((-1,) + (1,) * len(rest)).expand(u.shape)
        y = data.scatter_reduce(0, idx, u, _REDUCTIONS[red], include_self=True)
    return [y.reshape(t.shape)]


@op("OneHot")
def _one_hot(c: Call, x):
    idx, values = x[0], x[2]
    depth = int(scalars(c, 1, x[1])[0])
    axis = norm_axis(c.attr("axis", -1), idx.dim() + 1)
    i = (idx.trunc() if idx.is_floating_point() else idx).long()
    i = torch.where(i < 0, i + depth, i)  # still outside [0, depth): all off
    shape = [1] * (idx.dim() + 1)
    shape[axis] = depth
    hot = i.unsqueeze(axis) == torch.arange(depth, device=idx.device).reshape(shape)
    return [torch.where(hot, values[1], values[0])]


@op("NonZero")
def _nonzero(c: Call, x):
    t = x[0]
    if t.dim() == 0:
        t = t.reshape(1)
    return [torch.nonzero(t).t().contiguous()]


@op("Trilu")
def _trilu(c: Call, x):
    k = c.ints(1, arg(x, 1))
    k = k[0] if k else 0
    return [torch.triu(x[0], k) if c.attr("upper", 1) else torch.tril(x[0], k)]


@op("Einsum")
def _einsum(c: Call, x):
    return [torch.einsum(c.attr("equation").replace(" ", ""), *x)]
