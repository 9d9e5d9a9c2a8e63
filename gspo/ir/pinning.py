"""Pinning a model's dynamic inputs (``--input-shape``, else defaults) and inferring the shape
of every value, on a copy whose large weights carry their dims only."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import onnx
from onnx import TensorProto

from gspo.errors import InputShapeError, UnsupportedModelError
from gspo.errors import first_line as _first_line
from gspo.ir import frontend
from gspo.ir.checks import numel
from gspo.ir.protos import type_of

__all__ = ["pinned_model", "check_pins", "infer_values", "STRIP_ELEMENTS"]

log = logging.getLogger(__name__)

STRIP_ELEMENTS = 4096


def pinned_model(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]], label: str, plain: bool):
    """The model with its inputs pinned (dynamic dimensions given a default when not pinned)
    and, with ``plain``, through the front end; also the defaulted dimensions and the dynamic
    graph inputs and outputs to write back (empty when the result cannot keep them)."""
    weight_names = {t.name for t in model.graph.initializer}
    real_inputs = [vi for vi in model.graph.input if vi.name not in weight_names]
    pins = check_pins(real_inputs, input_shapes, label)
    defaults, defaulted = frontend.default_pins(real_inputs, pins)
    dynamic_io: tuple[bytes, ...] = ()
    if defaulted:
        dynamic_io = tuple(frontend.pinned_value_info(vi, pins.get(vi.name)).SerializeToString()
                           for vi in list(model.graph.input) + list(model.graph.output) if vi.name not in weight_names)
    pins = {**defaults, **pins}
    if plain:
        model, generic = frontend.plain(model, pins, dynamic=bool(defaulted), label=label)
        dynamic_io = dynamic_io if generic else ()
    elif pins:
        model = frontend.pin_inputs(model, pins)
    return model, defaulted, dynamic_io


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


def infer_values(model: onnx.ModelProto, label: str) -> dict[str, tuple[int, tuple | None]]:
    """Shape inference on a copy whose large initializers carry dims but no data."""
    light = onnx.ModelProto()
    light.CopyFrom(model)
    for t in light.graph.initializer:
        if len(t.dims) and numel(t.dims) > STRIP_ELEMENTS:
            stub = TensorProto(name=t.name, data_type=t.data_type, dims=t.dims)
            stub.data_location = TensorProto.EXTERNAL
            stub.external_data.add(key="location", value="__gspo_stripped__")
            t.CopyFrom(stub)
    try:
        inferred = onnx.shape_inference.infer_shapes(light, check_type=False, data_prop=True)
    except Exception as e:
        log.warning("%s: shape inference failed (%s); shapes left unknown", label, _first_line(e))
        inferred = light
    g = inferred.graph
    values: dict[str, tuple[int, tuple | None]] = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        values[vi.name] = type_of(vi)
    for t in model.graph.initializer:
        values[t.name] = (t.data_type, tuple(int(d) for d in t.dims))
    return values
