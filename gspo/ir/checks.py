"""What a model must be for gspo to load it: UTF-8 names, a supported opset, onnx's checker,
no negative dimensions (read as dynamic) and no tensor past :data:`MAX_ELEMENTS` elements."""

from __future__ import annotations

from collections.abc import Mapping

import onnx

from gspo.errors import ModelLoadError, UnsupportedModelError
from gspo.errors import first_line as _first_line
from gspo.ir.external import without_external_data

__all__ = ["MIN_OPSET", "MAX_ELEMENTS", "check_text", "check_model", "shapes_declared", "negative_dims_unknown",
           "check_sizes", "numel"]

#: Oldest default-domain opset gspo accepts.
MIN_OPSET = 7
#: Elements a tensor may hold at most (4 TiB of float32: more than any machine gspo runs on).
MAX_ELEMENTS = 2**40


def check_text(model: onnx.ModelProto, label: str) -> None:
    """Refuse names that are not valid UTF-8 (protobuf hands them over as ``bytes``)."""
    g = model.graph
    texts = [model.producer_name, model.producer_version, model.domain, model.doc_string]
    texts += [g.name, g.doc_string]
    texts += [x for p in model.metadata_props for x in (p.key, p.value)]
    texts += [o.domain for o in model.opset_import]
    texts += [vi.name for vi in list(g.input) + list(g.output) + list(g.value_info)]
    texts += [t.name for t in g.initializer]
    for n in g.node:
        texts += [n.name, n.op_type, n.domain, n.doc_string, *n.input, *n.output]
        texts += [a.name for a in n.attribute]
        texts += [x for p in n.metadata_props for x in (p.key, p.value)]
    if any(isinstance(t, bytes) for t in texts):
        raise ModelLoadError(f"{label}: not an ONNX model (a name or text field is not valid UTF-8)")


def check_model(model: onnx.ModelProto, label: str) -> tuple[tuple[str, int], ...]:
    """The model's opsets, after checking that gspo supports them and that onnx's checker passes."""
    opsets = tuple((o.domain, int(o.version)) for o in model.opset_import)
    default = [v for d, v in opsets if d in ("", "ai.onnx")]
    if default and default[0] < MIN_OPSET:
        raise UnsupportedModelError(
            f"{label}: opset {default[0]} is not supported (gspo needs opset {MIN_OPSET} or newer)"
        )
    if default and default[0] > onnx.defs.onnx_opset_version():
        raise UnsupportedModelError(
            f"{label}: opset {default[0]} is newer than this onnx knows "
            f"({onnx.defs.onnx_opset_version()})"
        )
    try:
        onnx.checker.check_model(shapes_declared(without_external_data(model)))
    except Exception as e:
        raise ModelLoadError(f"{label}: fails the ONNX checker: {_first_line(e)}") from None
    return opsets


def shapes_declared(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` as onnx's checker wants it: a graph input or output without a shape (which
    onnxruntime runs) gets an empty one in a copy, only to be checked (an input must still be
    given a shape with --input-shape; an output gets the inferred one)."""
    def shapeless(m):
        return [vi.type.tensor_type for vi in list(m.graph.input) + list(m.graph.output)
                if vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape")]

    if not shapeless(model):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for tt in shapeless(out):
        tt.shape.SetInParent()
    return out


def negative_dims_unknown(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every negative dimension the main graph declares made unknown, as
    onnxruntime reads it (a copy when there is one; ONNX dimensions are never negative)."""
    def negative(m):
        return [d for vi in list(m.graph.input) + list(m.graph.output) + list(m.graph.value_info)
                if vi.type.HasField("tensor_type") for d in vi.type.tensor_type.shape.dim
                if d.HasField("dim_value") and d.dim_value < 0]

    if not negative(model):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for d in negative(out):
        d.Clear()
    return out


def check_sizes(values: Mapping[str, tuple], label: str) -> None:
    """Refuse a value whose static shape holds more than :data:`MAX_ELEMENTS` elements
    (``values``: name -> :func:`~gspo.ir.protos.type_of`'s element type, shape, ...)."""
    for name, (_, shape, *_) in values.items():
        dims = [d for d in shape or () if isinstance(d, int)]
        if numel(dims) > MAX_ELEMENTS:
            axis, d = max(enumerate(dims), key=lambda x: x[1])
            raise UnsupportedModelError(
                f"{label}: value {name!r} of shape {list(shape)} would hold {numel(dims):.3g} elements "
                f"(dimension {axis} is {d}); gspo handles at most 2**{MAX_ELEMENTS.bit_length() - 1} per tensor"
            )


def numel(dims) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n
