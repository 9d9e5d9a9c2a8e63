"""Model files read once, after checking what the path is: a regular file no larger than an
ONNX file can be (a FIFO or a device is refused without waiting on it)."""

from __future__ import annotations

import os
import stat

from gspo.errors import ModelLoadError

__all__ = ["MAX_MODEL_BYTES", "read_model_file"]


#: The largest ONNX file: protobuf parses no message over 2 GiB (larger models keep their
#: weights in external data files).
MAX_MODEL_BYTES = 2**31 - 1


def read_model_file(path: str | os.PathLike) -> bytes:
    """The bytes of a model file, checked before they are read: a regular file (a FIFO or a
    device is refused without waiting on it) of at most :data:`MAX_MODEL_BYTES`.

    Raises:
        ModelLoadError: one line saying what the path is instead.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise ModelLoadError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ModelLoadError(f"{path}: is a directory, not an ONNX file") from None
    except OSError as e:
        raise ModelLoadError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        why = _not_a_model_file(st)
        if why:
            raise ModelLoadError(f"{path}: {why}")
        with os.fdopen(os.dup(fd), "rb") as f:
            return _read_at_most(f, st.st_size, path)
    except OSError as e:
        raise ModelLoadError(f"{path}: cannot read: {e.strerror or e}") from None
    finally:
        os.close(fd)


def _not_a_model_file(st: os.stat_result) -> str:
    """Why a file of this status cannot be an ONNX model ('' when it can)."""
    if stat.S_ISDIR(st.st_mode):
        return "is a directory, not an ONNX file"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file (a device, FIFO or socket), not an ONNX file"
    if st.st_size > MAX_MODEL_BYTES:
        return (f"{st.st_size / 1e9:.1f} GB, larger than an ONNX file can be (2 GiB; larger models keep "
                "their weights in external data files)")
    return ""


def _read_at_most(f, size: int, path) -> bytes:
    """The file's ``size`` bytes, and more if it has more (it grew, or its size is not known),
    up to :data:`MAX_MODEL_BYTES`."""
    chunks = [f.read(size + 1)]
    total = len(chunks[0])
    while total > size and chunks[-1]:
        if total > MAX_MODEL_BYTES:
            raise ModelLoadError(f"{path}: larger than an ONNX file can be (2 GiB)")
        chunks.append(f.read(1 << 24))
        total += len(chunks[-1])
    return b"".join(chunks) if len(chunks) > 1 else chunks[0]
