"""Helpers of the op modules (``ops_*``) of the PyTorch runtime: inputs and outputs of a
:class:`~gspo.runtime.torchrt.registry.Call`, the checks an op is registered with, and ONNX's
conventions (axes, pads) in torch's terms."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from gspo.runtime.torchrt.registry import Call, Unsupported

__all__ = ["arg", "axes_of", "extra_outputs", "known_dtype", "n_wanted", "norm_axis", "out_rank", "scalars", "tensor",
           "torch_pads", "wants"]


def arg(x: Sequence, i: int) -> torch.Tensor | None:
    """Input ``i`` of ``x``, ``None`` when skipped or past the end."""
    return x[i] if i < len(x) else None


def wants(c: Call, k: int) -> bool:
    """Whether the node asks for output ``k``."""
    return k < len(c.node.outputs) and bool(c.node.outputs[k].name)


def n_wanted(c: Call) -> int:
    """How many outputs the node asks for (the last named one's position + 1)."""
    return max((k + 1 for k, v in enumerate(c.node.outputs) if v.name), default=0)


def extra_outputs(c: Call, first: int = 1) -> str | None:
    """A check: refuses a node that asks for outputs from position ``first`` on."""
    if n_wanted(c) > first:
        return f"outputs past the first {first} (training statistics, indices) are not computed"
    return None


def known_dtype(c: Call, k: int = 0) -> str | None:
    """A check: refuses a node whose output ``k`` has no torch dtype (unknown, string, 8-bit float)."""
    try:
        c.out_dtype(k)
    except (Unsupported, IndexError) as e:
        return str(e) or f"output {k} has no known type"
    return None


def norm_axis(axis: int, rank: int) -> int:
    """``axis`` in ``[0, rank)`` (a negative one counts from the end)."""
    axis = int(axis)
    return axis + rank if axis < 0 else axis


def out_rank(c: Call, k: int = 0) -> int | None:
    """The rank of output ``k`` when the graph declares it."""
    shape = c.node.outputs[k].shape if k < len(c.node.outputs) else None
    return None if shape is None else len(shape)


def scalars(c: Call, i: int, x: torch.Tensor | None) -> list | None:
    """Input ``i`` as Python numbers (floats stay floats): its known value, else read from
    ``x`` (a device sync, like :meth:`Call.ints`); ``None`` when absent."""
    known = c.numbers(i)
    if known is not None:
        return list(known)
    v = c.const(i)
    if v is not None:  # too large to be kept as Python values
        return np.asarray(v).reshape(-1).tolist()
    return None if x is None else x.reshape(-1).tolist()


def axes_of(c: Call, x: Sequence, i: int, since: int, name: str = "axes") -> list[int] | None:
    """The axes of a node that has them as attribute ``name`` before opset ``since`` and as
    input ``i`` from then on; ``None`` when not given."""
    if c.opset >= since:
        return c.ints(i, arg(x, i))
    axes = c.attr(name)
    return None if axes is None else [int(a) for a in axes]


def tensor(c: Call, array: Any, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``array`` (numpy or Python numbers) as a tensor on the call's device."""
    a = np.asarray(array)
    if a.dtype.kind == "V" or a.dtype.name == "bfloat16":  # ml_dtypes' bfloat16 and the like
        a = a.astype(np.float32)
    t = torch.as_tensor(a if a.flags.c_contiguous and a.flags.writeable else a.copy(), device=c.device)
    return t if dtype is None or t.dtype == dtype else t.to(dtype)


def torch_pads(pads: Sequence[int]) -> list[int]:
    """ONNX pads ``[b1, .., bn, e1, .., en]`` of the last n axes as F.pad's list (last axis first)."""
    n = len(pads) // 2
    out: list[int] = []
    for i in reversed(range(n)):
        out += [int(pads[i]), int(pads[n + i])]
    return out
