"""Pinning a model's dynamic inputs: the ``--input-shape`` pins checked against the graph
(:func:`check_pins`), a stated value for each dimension left dynamic (:func:`default_pins`: batch
1, other symbolic dimensions 128, so that every value gets a static shape), and the model or its
value infos with the pins applied (:func:`pin_inputs`, :func:`pinned_value_info`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import onnx

from gspo.errors import InputShapeError, UnsupportedModelError

__all__ = ["DEFAULT_BATCH", "DEFAULT_EXTENT", "DefaultedDim", "check_pins", "default_pins", "describe_defaults",
           "pin_inputs", "pinned_value_info"]

#: The value given to a dynamic first dimension (the batch) when the user pins nothing.
DEFAULT_BATCH = 1
#: The value given to any other dynamic dimension (a sequence length, as a rule).
DEFAULT_EXTENT = 128


@dataclass(frozen=True)
class DefaultedDim:
    """A dynamic dimension of a graph input that was given a default value."""

    input: str
    axis: int
    symbol: str
    value: int


def _dims(vi: onnx.ValueInfoProto):
    return list(vi.type.tensor_type.shape.dim)


def default_pins(
    inputs: Sequence[onnx.ValueInfoProto], explicit: Mapping[str, Sequence[int]]
) -> tuple[dict[str, tuple[int, ...]], tuple[DefaultedDim, ...]]:
    """Static shapes for the inputs ``explicit`` leaves dynamic, and the dimensions defaulted.

    A symbolic dimension gets :data:`DEFAULT_BATCH` if it is the first dimension of some input
    and :data:`DEFAULT_EXTENT` otherwise; one symbol gets one value wherever it appears (the
    exporters name equal dimensions alike). Inputs without a shape are left out.
    """
    first = {d.dim_param for vi in inputs if vi.name not in explicit
             for d in _dims(vi)[:1] if not d.HasField("dim_value") and d.dim_param}
    pins: dict[str, tuple[int, ...]] = {}
    defaulted: list[DefaultedDim] = []
    for vi in inputs:
        tt = vi.type.tensor_type
        if vi.name in explicit or not tt.HasField("shape"):
            continue
        dims = []
        for axis, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value"):
                dims.append(int(d.dim_value))
                continue
            batch = axis == 0 or (d.dim_param and d.dim_param in first)
            value = DEFAULT_BATCH if batch else DEFAULT_EXTENT
            dims.append(value)
            defaulted.append(DefaultedDim(vi.name, axis, d.dim_param or "?", value))
        if any(x.input == vi.name for x in defaulted):
            pins[vi.name] = tuple(dims)
    return pins, tuple(defaulted)


def describe_defaults(defaulted: Iterable[DefaultedDim], pins: Mapping[str, Sequence[int]]) -> str:
    """One line saying which dynamic dimensions got which value, and the flag that pins them."""
    defaulted = list(defaulted)
    names = list(dict.fromkeys(d.input for d in defaulted))
    symbols = dict.fromkeys(f"{d.symbol}={d.value}" for d in defaulted if d.symbol != "?")
    flags = " ".join(f"--input-shape {n}={','.join(map(str, pins[n]))}" for n in names)
    what = f" ({', '.join(symbols)})" if symbols else ""
    return f"dynamic dimensions set to their defaults{what}; to choose, pass {flags}"


def _set_dims(vi: onnx.ValueInfoProto, dims: Sequence[int]) -> None:
    shape = vi.type.tensor_type.shape
    del shape.dim[:]
    for d in dims:
        shape.dim.add().dim_value = int(d)


def pinned_value_info(vi: onnx.ValueInfoProto, dims: Sequence[int] | None) -> onnx.ValueInfoProto:
    """A copy of ``vi``, with the static shape ``dims`` when given."""
    out = onnx.ValueInfoProto()
    out.CopyFrom(vi)
    if dims is not None:
        _set_dims(out, dims)
    return out


def pin_inputs(model: onnx.ModelProto, pins: Mapping[str, Sequence[int]]) -> onnx.ModelProto:
    """A copy of ``model`` whose named graph inputs have the given static shapes."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for vi in out.graph.input:
        if vi.name in pins:
            _set_dims(vi, pins[vi.name])
    return out


def check_pins(inputs, pins: Mapping[str, Sequence[int]], label: str) -> dict[str, tuple[int, ...]]:
    """The ``--input-shape`` pins, checked against the graph inputs (names, ranks, fixed dims)."""
    names = [vi.name for vi in inputs]
    for name in pins:
        if name not in names:
            raise InputShapeError(
                f"{label}: --input-shape names {name!r}, which is not a graph input "
                f"(inputs: {', '.join(names) or 'none'})"
            )
    for vi in inputs:
        if not vi.type.HasField("tensor_type"):
            raise UnsupportedModelError(f"{label}: input {vi.name!r} is not a tensor")
        tt = vi.type.tensor_type
        if vi.name not in pins:
            if not tt.HasField("shape"):
                raise InputShapeError(
                    f"{label}: input {vi.name!r} has no shape; give one with --input-shape {vi.name}=D1,D2,..."
                )
            continue
        dims = tuple(pins[vi.name])
        if tt.HasField("shape") and len(tt.shape.dim) != len(dims):
            raise InputShapeError(
                f"{label}: --input-shape gives {vi.name!r} rank {len(dims)}, "
                f"the model says rank {len(tt.shape.dim)}"
            )
        for i, d in enumerate(dims):
            if tt.HasField("shape"):
                old = tt.shape.dim[i]
                if old.HasField("dim_value") and old.dim_value != d:
                    raise InputShapeError(
                        f"{label}: --input-shape sets dim {i} of {vi.name!r} to {d}, "
                        f"but the model fixes it at {old.dim_value}"
                    )
    return {name: tuple(int(d) for d in dims) for name, dims in pins.items()}
