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


def _copy(src, offset: int, out, length: int, name: str) -> None:
    """``length`` bytes of ``src`` from ``offset`` appended to ``out``: by the kernel where it
    can (``os.copy_file_range``: no pass through Python's memory, a clone where the file system
    shares blocks), else in chunks."""
    out.flush()
    left, at = length, offset
    if hasattr(os, "copy_file_range"):
        try:
            while left:
                done = os.copy_file_range(src.fileno(), out.fileno(), min(left, _COPY_CHUNK), at)
                if not done:
                    break
                left, at = left - done, at + done
        except OSError:  # not between these files (another file system, an old kernel): in chunks
            pass
        out.seek(0, os.SEEK_END)
    src.seek(at)
    while left:
        chunk = src.read(min(left, _COPY_CHUNK))
        if not chunk:
            raise OSError(f"external data of {name!r} ends early")
        out.write(chunk)
        left -= len(chunk)


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
                    _copy(src, int(info.get("offset", 0) or 0), out, length, t.name)
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
