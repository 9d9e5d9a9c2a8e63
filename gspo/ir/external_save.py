"""A result's weights written into its own ``.data`` file at save, one tensor at a time (those
still in the source model's external data copied from their file in chunks), beside the model
and moved into place with it (:func:`save_external`)."""

from __future__ import annotations

import os
from pathlib import Path

import onnx
from onnx import TensorProto

from gspo.ir.external import tensor_bytes
from gspo.outputs import replacing_together

__all__ = ["save_external", "write_data"]

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
