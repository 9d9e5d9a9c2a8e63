"""The op table of the PyTorch runtime: each ONNX op as a function on torch tensors.

An op function takes a :class:`Call` (the node, its attributes decoded, the values of the inputs
known when the model is converted) and its input tensors (``None`` for a skipped optional input)
and returns its outputs, in order. Nothing here synchronizes the device except :meth:`Call.ints`
on an input whose value is not known at conversion (a shape computed from the data): the
converter folds constants and static ``Shape`` values first, so on static shapes no op waits.

An op the table lacks, or a case of it the torch version cannot compute exactly as ONNX
defines it, raises :class:`Unsupported` with the reason when the model is converted; the
executor then runs that piece on onnxruntime's CPU provider and says why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx import AttributeProto, TensorProto

from gspo.ir import Node
from gspo.ir.protos import node_attrs, tensor_value

__all__ = ["OPS", "Call", "Unsupported", "lookup", "op", "torch_dtype"]

import torch  # noqa: E402  (the runtime's own import: gspo imports this module only when torch is asked for)


class Unsupported(Exception):
    """This op (or this case of it) has no torch implementation here: the reason, one line."""


_DTYPES = {
    TensorProto.FLOAT: torch.float32, TensorProto.DOUBLE: torch.float64, TensorProto.FLOAT16: torch.float16,
    TensorProto.BFLOAT16: torch.bfloat16, TensorProto.INT8: torch.int8, TensorProto.UINT8: torch.uint8,
    TensorProto.INT16: torch.int16, TensorProto.INT32: torch.int32, TensorProto.INT64: torch.int64,
    TensorProto.BOOL: torch.bool,
}
for _name, _code in (("uint16", TensorProto.UINT16), ("uint32", TensorProto.UINT32), ("uint64", TensorProto.UINT64)):
    if hasattr(torch, _name):
        _DTYPES[_code] = getattr(torch, _name)


def torch_dtype(elem_type: int) -> torch.dtype:
    """The torch dtype of ONNX element type ``elem_type``.

    Raises:
        Unsupported: strings, complex and the 8/4-bit float types.
    """
    try:
        return _DTYPES[elem_type]
    except KeyError:
        raise Unsupported(f"element type {TensorProto.DataType.Name(elem_type)} has no torch dtype here") from None


def _decode(a) -> Any:
    if a.type == AttributeProto.STRING:
        return a.value.decode() if isinstance(a.value, bytes) else str(a.value)
    if a.type == AttributeProto.STRINGS:
        return [v.decode() if isinstance(v, bytes) else str(v) for v in a.value]
    if a.type == AttributeProto.TENSOR:
        return tensor_value(a.value)
    if a.type in (AttributeProto.INTS, AttributeProto.FLOATS):
        return list(a.value)
    if a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS, AttributeProto.SPARSE_TENSOR):
        raise Unsupported(f"attribute {a.name} holds a subgraph or a sparse tensor")
    return a.value


_SUBGRAPHS = (AttributeProto.GRAPH, AttributeProto.GRAPHS)


@dataclass(frozen=True)
class Call:
    """One node as its op function sees it.

    ``consts[i]`` is input i's value when it is known at conversion (a weight, a folded constant,
    the shape of a value of static shape), else ``None`` (also for a skipped input).
    """

    node: Node
    consts: tuple[np.ndarray | None, ...]
    opset: int
    device: torch.device

    def attr(self, name: str, default: Any = None) -> Any:
        """Attribute ``name`` decoded (STRING -> str, INTS -> list[int], TENSOR -> array), or ``default``."""
        for a in node_attrs(self.node):
            if a.name == name:
                return _decode(a)
        return default

    def const(self, i: int) -> np.ndarray | None:
        """Input ``i``'s value when known at conversion, else ``None``."""
        return self.consts[i] if i < len(self.consts) else None

    def ints(self, i: int, x: torch.Tensor | None) -> list[int] | None:
        """Input ``i`` as Python ints: its known value, else read from ``x`` (a device sync);
        ``None`` when the input is absent."""
        c = self.const(i)
        if c is not None:
            return [int(v) for v in np.asarray(c).reshape(-1)]
        if x is None:
            return None
        return [int(v) for v in x.reshape(-1).tolist()]

    def out_dtype(self, k: int = 0) -> torch.dtype:
        """The torch dtype of output ``k``, as the graph declares it."""
        return torch_dtype(self.node.outputs[k].dtype)


OpFn = Callable[[Call, list], Sequence]
#: (domain, op_type) -> (function, conversion-time check returning a reason or None).
OPS: dict[tuple[str, str], tuple[OpFn, Callable[[Call], str | None] | None]] = {}


def op(*names: str, domain: str = "", check: Callable[[Call], str | None] | None = None):
    """Register the decorated function for ``names`` (in ``domain``; ``""`` is ai.onnx).
    ``check(call)`` says, at conversion, why a case is not supported (``None``: supported)."""
    def register(fn: OpFn) -> OpFn:
        for name in names:
            OPS[(domain, name)] = (fn, check)
        return fn
    return register


def lookup(call: Call) -> OpFn:
    """The function of ``call``'s node.

    Raises:
        Unsupported: no function for the op, or its check refuses this case.
    """
    node = call.node
    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    entry = OPS.get((domain, node.op_type))
    # gspo keeps a node it does not interpret as bytes (opaque): one the table has an entry for
    # (onnxruntime's fused ops) runs, with its attributes read from the bytes; not a subgraph
    if node.is_opaque and (entry is None or node.implicit_inputs or any(a.type in _SUBGRAPHS for a in node_attrs(node))):
        raise Unsupported(f"{node.op_type} holds a subgraph or is outside gspo's op set (run by onnxruntime)")
    if entry is None:
        where = f"{domain}." if domain else ""
        raise Unsupported(f"{where}{node.op_type} is not in the torch runtime's op table")
    fn, check = entry
    if check is not None:
        reason = check(call)
        if reason:
            raise Unsupported(f"{node.op_type}: {reason}")
    return fn


# ---------------------------------------------------------------- helpers of the op modules
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
    v = c.const(i)
    if v is not None:
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


# the table lives in these modules; importing them registers their ops
from gspo.runtime.torchrt import (  # noqa: E402, F401, I001
    ops_index, ops_math, ops_nn, ops_norm, ops_ort, ops_quant, ops_reduce, ops_resize, ops_rnn, ops_tensor,
)
