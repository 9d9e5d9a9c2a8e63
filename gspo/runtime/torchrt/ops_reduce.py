"""Reductions of the torch runtime: Reduce*, ArgMax/ArgMin, TopK, CumSum.

Axes are an attribute until opset 13 (ReduceSum) or 18 (the others) and an input from then on.
No axes reduce every axis, unless ``noop_with_empty_axes`` asks for the input unchanged.
Integer sums and products keep the input's type (torch would widen them to int64).
"""

from __future__ import annotations

import torch

from gspo.runtime.torchrt.helpers import axes_of, norm_axis
from gspo.runtime.torchrt.registry import Call, op


def _int(t: torch.Tensor) -> torch.dtype | None:
    return None if t.dtype.is_floating_point else t.dtype


def _sum(t, dims, keep):
    return torch.sum(t, dims, keepdim=keep, dtype=_int(t))


def _mean(t, dims, keep):
    if t.dtype.is_floating_point:
        return torch.mean(t, dims, keepdim=keep)
    count = 1
    for d in dims:
        count *= t.shape[d]
    return torch.div(_sum(t, dims, keep), count, rounding_mode="trunc")


def _prod(t, dims, keep):
    for d in sorted(dims, reverse=True):
        t = torch.prod(t, d, keepdim=True, dtype=_int(t))
    return t if keep else t.squeeze(dims)


def _float_back(fn):
    """``fn`` computed in float for integer inputs, truncated back to their type."""
    def run(t, dims, keep):
        if t.dtype.is_floating_point:
            return fn(t, dims, keep)
        return fn(t.double(), dims, keep).to(t.dtype)
    return run


def _extreme(fn, largest: bool):
    """``torch.amax``/``amin``; over an empty axis the standard's identity: the type's lowest
    value for a maximum (-inf, False), its highest for a minimum (torch refuses empty axes)."""
    def run(t, dims, keep):
        if all(t.shape[d] for d in dims):
            return fn(t, dims, keepdim=keep)
        shape = [1 if d in dims else n for d, n in enumerate(t.shape)] if keep else \
            [n for d, n in enumerate(t.shape) if d not in dims]
        if t.dtype == torch.bool:
            fill = not largest
        elif t.dtype.is_floating_point:
            fill = float("-inf") if largest else float("inf")
        else:
            fill = torch.iinfo(t.dtype).min if largest else torch.iinfo(t.dtype).max
        return torch.full(shape, fill, dtype=t.dtype, device=t.device)
    return run


_REDUCE = {
    "ReduceSum": (_sum, lambda t: t),
    "ReduceMean": (_mean, lambda t: t),
    "ReduceMax": (_extreme(torch.amax, True), lambda t: t),
    "ReduceMin": (_extreme(torch.amin, False), lambda t: t),
    "ReduceProd": (_prod, lambda t: t),
    "ReduceL1": (lambda t, d, k: _sum(t.abs(), d, k), torch.abs),
    "ReduceL2": (_float_back(lambda t, d, k: torch.sqrt(torch.sum(t * t, d, keepdim=k))), torch.abs),
    "ReduceSumSquare": (lambda t, d, k: _sum(t * t, d, k), lambda t: t * t),
    "ReduceLogSum": (_float_back(lambda t, d, k: torch.log(torch.sum(t, d, keepdim=k))), torch.log),
    "ReduceLogSumExp": (_float_back(lambda t, d, k: torch.logsumexp(t, d, keepdim=k)), lambda t: t),
}


def _reduction(name: str):
    fn, noop = _REDUCE[name]
    since = 13 if name == "ReduceSum" else 18

    def run(c: Call, x):
        t = x[0]
        axes = axes_of(c, x, 1, since)
        if not axes:
            if c.attr("noop_with_empty_axes", 0):
                return [noop(t)]
            axes = range(t.dim())
        dims = tuple(sorted({norm_axis(a, t.dim()) for a in axes}))
        keep = bool(c.attr("keepdims", 1))
        if t.dim() == 0:
            return [fn(t.reshape(1), (0,), False).reshape(())]
        return [fn(t, dims, keep)]
    return run


for _name in _REDUCE:
    op(_name)(_reduction(_name))


def _arg(fn):
    def run(c: Call, x):
        t = x[0]
        axis = norm_axis(c.attr("axis", 0), t.dim())
        keep = bool(c.attr("keepdims", 1))
        if c.attr("select_last_index", 0):
            return [t.shape[axis] - 1 - fn(t.flip(axis), dim=axis, keepdim=keep)]
        return [fn(t, dim=axis, keepdim=keep)]  # the first of equal values, as ONNX
    return run


op("ArgMax")(_arg(torch.argmax))
op("ArgMin")(_arg(torch.argmin))


@op("TopK")
def _topk(c: Call, x):
    t = x[0]
    k = c.ints(1, x[1])[0] if c.opset >= 10 else int(c.attr("k"))
    axis = norm_axis(c.attr("axis", -1), t.dim())
    # a stable sort: equal values in index order, as onnxruntime (torch.topk orders ties freely)
    values, indices = torch.sort(t, dim=axis, descending=bool(c.attr("largest", 1)), stable=True)
    return [values.narrow(axis, 0, k), indices.narrow(axis, 0, k)]


@op("CumSum")
def _cumsum(c: Call, x):
    t = x[0]
    axis = norm_axis(c.ints(1, x[1])[0], t.dim())
    if t.shape[axis] == 0:
        return [t]
    rev, excl = c.attr("reverse", 0), c.attr("exclusive", 0)
    y = torch.cumsum(t.flip(axis) if rev else t, axis, dtype=t.dtype)
    if excl:
        y = torch.cat([torch.zeros_like(y.narrow(axis, 0, 1)), y.narrow(axis, 0, y.shape[axis] - 1)], axis)
    return [y.flip(axis) if rev else y]
