"""Shape inference on an ONNX model: every value's element type and shape, inferred by onnx on a
copy whose large weights carry their dims only (:func:`infer_values`)."""

from __future__ import annotations

import logging

import onnx
from onnx import TensorProto

from gspo.errors import first_line as _first_line
from gspo.ir.checks import numel
from gspo.ir.protos import type_of

__all__ = ["infer_values", "STRIP_ELEMENTS"]

log = logging.getLogger(__name__)

#: Initializers of more elements than this are stripped of their data for shape inference.
STRIP_ELEMENTS = 4096


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
