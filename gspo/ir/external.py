"""Weights kept in external data: found and checked where they lie at load, and left in their
files (read one tensor at a time when needed). Writing a result's own ``.data`` file at save is
:mod:`gspo.ir.external_save`'s."""

from __future__ import annotations

import os

import onnx
from onnx import TensorProto, helper

from gspo.errors import ModelLoadError
from gspo.ir.graph import Graph
from gspo.ir.weights import Init, np_dtype

__all__ = ["check_external_data", "external_locations", "read_header", "without_external_data", "tensor_bytes",
           "inline_tensor", "inline_bytes"]


def read_header(model: str | os.PathLike | bytes) -> onnx.ModelProto | None:
    """The model at a path, or serialized, without reading its external weights (``None``: not
    a model onnx can read; loading it says why in its own words)."""
    try:
        if isinstance(model, bytes):
            return onnx.load_from_string(model)
        return onnx.load(os.fspath(model), load_external_data=False)
    except Exception:
        return None


def _external_tensors(model: onnx.ModelProto) -> list[TensorProto]:
    from onnx import external_data_helper as edh

    return [t for t in edh._get_all_tensors(model) if edh.uses_external_data(t)]


def external_locations(model: onnx.ModelProto) -> list[str]:
    """The files (relative locations, as the tensors name them) ``model`` keeps weights in."""
    return sorted({e.value for t in _external_tensors(model) for e in t.external_data
                   if e.key == "location" and e.value})


def check_external_data(model: onnx.ModelProto, base_dir: str | None, label: str) -> bool:
    """Whether the model keeps weights in files beside it, after checking that each lies in
    the model's directory and holds the bytes its tensor claims (the files are not read)."""
    tensors = _external_tensors(model)
    if not tensors:
        return False
    if base_dir is None:
        raise ModelLoadError(f"{label}: the model has external data but no directory to read it from")
    root = os.path.realpath(base_dir)
    for t in tensors:
        info = {e.key: e.value for e in t.external_data}
        loc = info.get("location", "")
        target = os.path.realpath(os.path.join(root, loc))
        if not loc or os.path.isabs(loc) or os.path.commonpath([root, target]) != root:
            raise ModelLoadError(
                f"{label}: external data location {loc!r} of {t.name!r} points outside the "
                "model's directory; refused"
            )
        if not os.path.isfile(target):
            raise ModelLoadError(f"{label}: external data file {loc!r} of {t.name!r} is missing")
        end = int(info.get("offset", 0) or 0) + int(info.get("length", 0) or 0)
        if end > os.path.getsize(target):
            raise ModelLoadError(f"{label}: cannot read external data: {loc!r} is shorter than {t.name!r} needs")
    return True


def without_external_data(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model``, or a copy whose weights kept in external data are graph inputs of their type
    and shape: onnx's checker reads an in-memory model's external files relative to the working
    directory (the files themselves are checked through the path API, see :func:`load_bytes`)."""
    from onnx import external_data_helper as edh

    external = [t for t in model.graph.initializer if edh.uses_external_data(t)]
    if not external:
        return model
    light = onnx.ModelProto()
    light.CopyFrom(model)
    names = {t.name for t in external}
    kept = [t for t in light.graph.initializer if t.name not in names]
    del light.graph.initializer[:]
    light.graph.initializer.extend(kept)
    listed = {vi.name for vi in light.graph.input}
    light.graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                             for t in external if t.name not in listed)
    return light


def tensor_bytes(t: TensorProto, base_dir: str) -> int:
    """The bytes of a tensor's data, in the model or in its external file."""
    from onnx import external_data_helper as edh

    if not edh.uses_external_data(t):
        return len(t.raw_data) if t.HasField("raw_data") else t.ByteSize()
    info = {e.key: e.value for e in t.external_data}
    if "length" in info:
        return int(info["length"])
    return os.path.getsize(os.path.join(base_dir, info["location"])) - int(info.get("offset", 0) or 0)


def inline_tensor(t: TensorProto, base_dir: str) -> None:
    """Read a tensor kept in external data into it."""
    from onnx import external_data_helper as edh

    if edh.uses_external_data(t):
        edh.load_external_data_for_tensor(t, base_dir)
        t.data_location = TensorProto.DEFAULT
        del t.external_data[:]


def inline_bytes(graph: Graph, inline: bool = True) -> int:
    """The bytes of weights ``serialize(graph, inline=inline)`` holds in the model itself (with
    ``inline`` false, the originals kept in external data stay in their files); counted from
    the weights' types and shapes, nothing read."""
    from onnx import external_data_helper as edh

    total = 0
    for name, w in graph.weights.items():
        if not inline and isinstance(w, Init) and w.name == name and name in graph.store \
                and edh.uses_external_data(graph.store.proto(name)):
            continue
        total += w.size * np_dtype(w.dtype).itemsize
    return total
