"""The op table of the PyTorch runtime: each ONNX op as a function on torch tensors, registered
with :func:`op` into :data:`OPS` by the op modules (``ops_*``); :mod:`gspo.runtime.torchrt.ops`
imports them all and looks an op up.

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
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from onnx import AttributeProto, TensorProto

from gspo.ir import Node
from gspo.ir.protos import node_attrs, tensor_value

__all__ = ["OPS", "Call", "OpFn", "Unsupported", "op", "torch_dtype"]

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


#: Known integer (and boolean) inputs up to this many elements (shapes, axes, pads, sizes) are also
#: kept as Python values (not an int8 weight of a quantized model: it would cost memory for nothing).
_INTS_LIMIT = 4096
#: Known floating-point inputs up to this many elements (scales, a fill value, a Range's bounds).
_FLOATS_LIMIT = 64


def _python(c: np.ndarray | None) -> tuple | None:
    """A known input's values flattened as Python numbers, when it is small enough to be read
    as numbers (a shape, axes, scales); else ``None``."""
    if c is None:
        return None
    a = np.asarray(c)
    limit = _INTS_LIMIT if a.dtype == np.bool_ or a.dtype.kind in "iu" else _FLOATS_LIMIT
    return tuple(a.reshape(-1).tolist()) if a.size <= limit else None


def _non_negative(c: np.ndarray | None) -> bool:
    a = None if c is None else np.asarray(c)
    return a is not None and (a.dtype.kind == "u" or (a.dtype.kind in "ib" and bool((a >= 0).all())))


@dataclass(frozen=True)
class Call:
    """One node as its op function sees it.

    ``consts[i]`` is input i's value when it is known at conversion (a weight, a folded constant,
    the shape of a value of static shape), else ``None`` (also for a skipped input);
    ``in_types[i]`` input i's ONNX element type when the graph declares it (0 when unknown).

    What an op function decides from a known input (:meth:`ints`, :meth:`numbers`,
    :meth:`non_negative`, :meth:`known_shape`) is computed here once, as plain Python values, so
    that a run decides in Python alone (torch dynamo traces it without a graph break: a numpy
    array read at run time would become a tensor, and each decision a data-dependent read).
    """

    node: Node
    consts: tuple[np.ndarray | None, ...]
    opset: int
    device: torch.device
    in_types: tuple[int, ...] = ()
    _numbers: tuple[tuple | None, ...] = field(init=False, repr=False, compare=False)
    _shapes: tuple[tuple[int, ...] | None, ...] = field(init=False, repr=False, compare=False)
    _non_negative: tuple[bool, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_numbers", tuple(_python(c) for c in self.consts))
        object.__setattr__(self, "_shapes", tuple(None if c is None else tuple(int(d) for d in np.shape(c))
                                                  for c in self.consts))
        object.__setattr__(self, "_non_negative", tuple(_non_negative(c) for c in self.consts))

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
        known = self.numbers(i)
        if known is not None:
            return [int(v) for v in known]
        c = self.const(i)
        if c is not None:  # too large to be kept as Python values
            return [int(v) for v in np.asarray(c).reshape(-1)]
        if x is None:
            return None
        return [int(v) for v in x.reshape(-1).tolist()]

    def numbers(self, i: int) -> tuple | None:
        """Input ``i``'s known value flattened as Python numbers (computed at conversion), or
        ``None``: not known, or too large to be read as numbers."""
        return self._numbers[i] if i < len(self._numbers) else None

    def known_shape(self, i: int) -> tuple[int, ...] | None:
        """The shape of input ``i``'s known value, or ``None`` when it is not known."""
        return self._shapes[i] if i < len(self._shapes) else None

    def non_negative(self, i: int) -> bool:
        """Whether input ``i`` is known at conversion to hold no negative index."""
        return self._non_negative[i] if i < len(self._non_negative) else False

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
