"""Lazy weights: a reference to an original initializer, or an expression over such references.

A rewrite that merges two convolutions does not copy arrays: it records
``Concat((Init("w1"), Init("w2")), axis=0)``. Arrays are computed once, by :func:`materialize`,
when the winning graph is saved.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import external_data_helper, numpy_helper

from gspo.ir.digests import digest

__all__ = [
    "Weight",
    "Init",
    "Literal",
    "Random",
    "Concat",
    "Pad",
    "Scale",
    "SliceW",
    "CastW",
    "WeightStore",
    "concat",
    "slice_weight",
    "np_dtype",
    "dtype_named",
    "materialize",
    "materialized_bytes",
]


def np_dtype(elem_type: int) -> np.dtype:
    """numpy dtype of an ONNX ``TensorProto`` element type."""
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))


def dtype_named(name: str) -> int:
    """The ONNX element type of a runtime's type name (``"float"``, ``"int64"``, ``"float16"``;
    0 for a name onnx does not know)."""
    return int(onnx.TensorProto.DataType.Value(name.upper())) if name.upper() in onnx.TensorProto.DataType.keys() else 0


class WeightStore:
    """The original initializers of a loaded model, by name (kept as protobufs, decoded lazily)."""

    def __init__(self, tensors: Mapping[str, onnx.TensorProto] | None = None, base_dir: str = ""):
        self._tensors = dict(tensors or {})
        self.base_dir = base_dir

    def __contains__(self, name: str) -> bool:
        return name in self._tensors

    def proto(self, name: str) -> onnx.TensorProto:
        """The stored tensor ``name`` as a TensorProto."""
        return self._tensors[name]

    def array(self, name: str) -> np.ndarray:
        """The stored tensor ``name`` as an array (external data read from ``base_dir``)."""
        return numpy_helper.to_array(self._tensors[name], self.base_dir)

    def sharing(self, other: WeightStore, names) -> WeightStore:
        """This store with the tensors ``names`` taken from ``other`` (the same bytes held once)
        and the others copied out of the model they were parsed with, which can then be let go
        (a tensor of a parsed model holds the whole model in memory)."""
        tensors = {}
        for name, t in self._tensors.items():
            if name in names:
                tensors[name] = other.proto(name)
            else:
                tensors[name] = onnx.TensorProto()
                tensors[name].CopyFrom(t)
        return WeightStore(tensors, self.base_dir)


class Weight:
    """Base of weight expressions: ``dtype`` (ONNX element type), ``shape`` and ``key``."""

    dtype: int
    shape: tuple[int, ...]
    key: bytes

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Weight) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    @property
    def size(self) -> int:
        """Number of elements."""
        return int(np.prod(self.shape, dtype=np.int64))

    def evaluate(self, store: WeightStore) -> np.ndarray:
        """The weight's values, computed from ``store`` when derived."""
        raise NotImplementedError


def _set_key(obj: object, *parts: object) -> None:
    object.__setattr__(obj, "key", digest(type(obj).__name__, *parts))


@dataclass(frozen=True, eq=False)
class Init(Weight):
    """An initializer of the original model, by name; ``content`` is a digest of its bytes."""

    name: str
    dtype: int
    shape: tuple[int, ...]
    content: bytes = b""
    key: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        _set_key(self, self.name, self.dtype, self.shape, self.content)

    def evaluate(self, store: WeightStore) -> np.ndarray:
        """The initializer's values, read from ``store``."""
        return store.array(self.name)


@dataclass(frozen=True, eq=False)
class Literal(Weight):
    """A small constant computed by a rule (e.g. a folded bias)."""

    data: bytes
    dtype: int
    shape: tuple[int, ...]
    key: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        _set_key(self, self.data, self.dtype, self.shape)

    @classmethod
    def from_array(cls, array: np.ndarray) -> Literal:
        """A literal holding a copy of ``array``."""
        array = np.ascontiguousarray(array)
        elem = onnx.helper.np_dtype_to_tensor_dtype(array.dtype)
        return cls(array.tobytes(), elem, tuple(int(d) for d in array.shape))

    def evaluate(self, store: WeightStore) -> np.ndarray:
        """The literal's values."""
        return np.frombuffer(self.data, dtype=np_dtype(self.dtype)).reshape(self.shape).copy()


@dataclass(frozen=True, eq=False)
class Random(Weight):
    """Deterministic random weights: ``loc + scale * N(0, 1)``, or ``U(loc, loc + scale)``.

    Integer dtypes draw from ``[loc, loc + scale)``. Used by the model zoo, so that a full-size
    model can be built, counted and hashed without allocating its arrays.
    """

    seed: int
    dtype: int
    shape: tuple[int, ...]
    loc: float = 0.0
    scale: float = 1.0
    dist: str = "normal"
    key: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.dist not in ("normal", "uniform"):
            raise ValueError(f"unknown distribution {self.dist!r}")
        _set_key(self, self.seed, self.dtype, self.shape, self.loc, self.scale, self.dist)

    def evaluate(self, store: WeightStore) -> np.ndarray:
        """The seeded random values (the same for the same seed)."""
        rng = np.random.default_rng(self.seed)
        dt = np_dtype(self.dtype)
        if np.issubdtype(dt, np.integer):
            lo = int(self.loc)
            return rng.integers(lo, lo + int(self.scale), size=self.shape).astype(dt)
        if self.dist == "uniform":
            x = rng.uniform(self.loc, self.loc + self.scale, size=self.shape)
        else:
            x = rng.standard_normal(self.shape, dtype=np.float32) * self.scale + self.loc
        return x.astype(dt)


@dataclass(frozen=True, eq=False)
class Concat(Weight):
    """``numpy.concatenate(parts, axis)``."""

    parts: tuple[Weight, ...]
    axis: int
    dtype: int = field(init=False)
    shape: tuple[int, ...] = field(init=False)
    key: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        first = self.parts[0].shape
        ax = self.axis % len(first)
        for p in self.parts:
            if len(p.shape) != len(first) or any(
                a != b for i, (a, b) in enumerate(zip(p.shape, first)) if i != ax
            ):
                raise ValueError(f"cannot concatenate weights of shapes {first} and {p.shape}")
        shape = list(first)
        shape[ax] = sum(p.shape[ax] for p in self.parts)
        object.__setattr__(self, "dtype", self.parts[0].dtype)
        object.__setattr__(self, "shape", tuple(shape))
        object.__setattr__(self, "axis", ax)
        _set_key(self, self.parts, ax)

    def evaluate(self, store: WeightStore) -> np.ndarray:
        """The parts' values concatenated along ``axis``."""
        return np.concatenate([p.evaluate(store) for p in self.parts], axis=self.axis)


@dataclass(frozen=True, eq=False)
class Pad(Weight):
    """Zero padding: ``pads[i] = (before, after)`` for axis ``i``."""

    base: Weight
    pads: tuple[tuple[int, int], ...]
    dtype: int = field(init=False)
    shape: tuple[int, ...] = field(init=False)
    key: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if len(self.pads) != len(self.base.shape):
            raise ValueError("one (before, after) pair per axis is needed")
        shape = tuple(d + a + b for d, (a, b) in zip(self.base.shape, self.pads))
        object.__setattr__(self, "dtype", self.base.dtype)
        object.__setattr__(self, "shape", shape)
        _set_key(self, self.base, self.pads)

    def evaluate(self, store: WeightStore) -> np.ndarray:
        """The base's values zero-padded by ``pads``."""
        return np.pad(self.base.evaluate(store), self.pads)


@dataclass(frozen=True, eq=False)
class Scale(Weight):
    """``base * factor`` where the 1-D ``factor`` runs along ``axis`` of ``base``."""

    base: Weight
    factor: Weight
    axis: int
    dtype: int = field(init=False)
    shape: tuple[int, ...] = field(init=False)
    key: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        ax = self.axis % len(self.base.shape)
        if self.factor.shape != (self.base.shape[ax],):
            raise ValueError(f"scale of shape {self.factor.shape} does not fit axis {ax}")
        object.__setattr__(self, "dtype", self.base.dtype)
        object.__setattr__(self, "shape", self.base.shape)
        object.__setattr__(self, "axis", ax)
        _set_key(self, self.base, self.factor, ax)

    def evaluate(self, store: WeightStore) -> np.ndarray:
        """``base * factor``, the factor broadcast along ``axis``."""
        shape = [1] * len(self.shape)
        shape[self.axis] = self.shape[self.axis]
        base = self.base.evaluate(store)
        return (base * self.factor.evaluate(store).reshape(shape)).astype(base.dtype)


@dataclass(frozen=True, eq=False)
class SliceW(Weight):
    """``base[start:stop]`` along ``axis``."""

    base: Weight
    axis: int
    start: int
    stop: int
    dtype: int = field(init=False)
    shape: tuple[int, ...] = field(init=False)
    key: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        ax = self.axis % len(self.base.shape)
        if not 0 <= self.start < self.stop <= self.base.shape[ax]:
            raise ValueError(f"slice [{self.start}:{self.stop}] out of range for axis {ax}")
        shape = list(self.base.shape)
        shape[ax] = self.stop - self.start
        object.__setattr__(self, "axis", ax)
        object.__setattr__(self, "dtype", self.base.dtype)
        object.__setattr__(self, "shape", tuple(shape))
        _set_key(self, self.base, ax, self.start, self.stop)

    def evaluate(self, store: WeightStore) -> np.ndarray:
        """The base's values from ``start`` to ``stop`` along ``axis``."""
        index = [slice(None)] * len(self.shape)
        index[self.axis] = slice(self.start, self.stop)
        return self.base.evaluate(store)[tuple(index)].copy()


@dataclass(frozen=True, eq=False)
class CastW(Weight):
    """``base`` converted to element type ``dtype`` (float32 rounded to the nearest float16 or
    bfloat16, ties to even, past the largest value infinite, as torch converts: a weight stored
    at reduced precision)."""

    base: Weight
    dtype: int
    shape: tuple[int, ...] = field(init=False)
    key: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", self.base.shape)
        _set_key(self, self.base, self.dtype)

    def evaluate(self, store: WeightStore) -> np.ndarray:
        """The base's values as ``dtype``."""
        with np.errstate(over="ignore"):
            return np.asarray(self.base.evaluate(store)).astype(np_dtype(self.dtype))


def slice_weight(w: Weight, axis: int, start: int, stop: int) -> Weight:
    """``w[start:stop]`` along ``axis``, simplified: a whole range is ``w`` itself, a range that
    is exactly one part of a :class:`Concat` on that axis is that part, and a slice of a slice
    is one slice."""
    ax = axis % len(w.shape)
    if start == 0 and stop == w.shape[ax]:
        return w
    if isinstance(w, SliceW) and w.axis == ax:
        return slice_weight(w.base, ax, w.start + start, w.start + stop)
    if isinstance(w, Concat) and w.axis == ax:
        offset = 0
        for part in w.parts:
            size = part.shape[ax]
            if offset <= start and stop <= offset + size:
                return slice_weight(part, ax, start - offset, stop - offset)
            offset += size
    return SliceW(w, ax, start, stop)


def concat(parts, axis: int) -> Weight:
    """:class:`Concat`, simplified: nested concats on the same axis are flattened, adjacent
    slices of one weight are joined, and a single part is returned as it is."""
    ax = axis % len(parts[0].shape)
    flat: list[Weight] = []
    for p in parts:
        flat.extend(p.parts if isinstance(p, Concat) and p.axis == ax else [p])
    joined: list[Weight] = []
    for p in flat:
        prev = joined[-1] if joined else None
        if (
            isinstance(p, SliceW)
            and isinstance(prev, SliceW)
            and p.axis == ax == prev.axis
            and p.base == prev.base
            and prev.stop == p.start
        ):
            joined[-1] = slice_weight(p.base, ax, prev.start, p.stop)
        else:
            joined.append(p)
    return joined[0] if len(joined) == 1 else Concat(tuple(joined), ax)


def materialize(name: str, weight: Weight, store: WeightStore, inline: bool = True) -> onnx.TensorProto:
    """The initializer to save for ``weight``; an unchanged original is copied byte for byte
    (one kept in external data is read into it, or with ``inline=False`` still refers to its
    file in ``store.base_dir``)."""
    if isinstance(weight, Init) and weight.name == name and name in store:
        proto = onnx.TensorProto()
        proto.CopyFrom(store.proto(name))
        if inline and external_data_helper.uses_external_data(proto):
            external_data_helper.load_external_data_for_tensor(proto, store.base_dir)
            proto.data_location = onnx.TensorProto.DEFAULT
            del proto.external_data[:]
        return proto
    return numpy_helper.from_array(weight.evaluate(store), name)


def materialized_bytes(name: str, weight: Weight, store: WeightStore, inline: bool = True) -> bytes:
    """The serialized initializer :func:`materialize` makes (an unchanged original serialized
    as it is stored, not copied first)."""
    if isinstance(weight, Init) and weight.name == name and name in store:
        proto = store.proto(name)
        if not (inline and external_data_helper.uses_external_data(proto)):
            return proto.SerializeToString()
    return materialize(name, weight, store, inline).SerializeToString()
