"""Weights kept in external data: checked where they lie at load, left in their files, and
written one tensor at a time into a result's own ``.data`` file at save."""

from __future__ import annotations

import os
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from gspo.errors import ModelLoadError
from gspo.outputs import replacing_together

__all__ = ["check_external_data", "external_locations", "read_header", "without_external_data", "tensor_bytes",
           "inline_tensor", "write_data", "save_external"]


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


_COPY_CHUNK = 1 << 26


#: Tensors smaller than this stay in the model file when the weights go to external data.
_EXTERNAL_MIN_BYTES = 1024


def write_data(model: onnx.ModelProto, data_path: Path, location: str, base_dir: str) -> None:
    """Move the weights of ``model`` into ``data_path`` one tensor at a time (those already in
    external data copied from their file in chunks): never more than one tensor in memory."""
    from onnx import external_data_helper as edh

    offset = 0
    with open(data_path, "wb") as out:
        for t in model.graph.initializer:
            if edh.uses_external_data(t):
                info = {e.key: e.value for e in t.external_data}
                length = tensor_bytes(t, base_dir)
                with open(os.path.join(base_dir, info["location"]), "rb") as src:
                    src.seek(int(info.get("offset", 0) or 0))
                    left = length
                    while left:
                        chunk = src.read(min(left, _COPY_CHUNK))
                        if not chunk:
                            raise OSError(f"external data of {t.name!r} ends early")
                        out.write(chunk)
                        left -= len(chunk)
            elif t.HasField("raw_data") and len(t.raw_data) >= _EXTERNAL_MIN_BYTES:
                length = len(t.raw_data)
                out.write(t.raw_data)
                t.ClearField("raw_data")
            else:
                continue
            del t.external_data[:]
            t.data_location = TensorProto.EXTERNAL
            for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
                t.external_data.add(key=k, value=v)
            offset += length


def save_external(model, p: Path, base_dir: str = "", overwrite: bool = False) -> None:
    """Save with weights in ``<file>.data``: both written complete in a temporary folder beside
    ``p`` (the weights one tensor at a time, :func:`write_data`), then moved into place under
    :func:`~gspo.outputs.replacing_together`'s rules (the weights first, so a model never names
    missing data)."""
    data = p.with_name(p.name + ".data")
    with replacing_together([data, p], overwrite) as folder:
        write_data(model, folder / data.name, data.name, base_dir)
        (folder / p.name).write_bytes(model.SerializeToString())
