"""Reference outputs too large to hold beside a candidate's, kept in a temporary file.

Checking a candidate holds its inputs, the reference's outputs and the candidate's outputs at
once: three times the data of a model whose output is as large as its input. Above
:data:`SPILL_BYTES` the reference's tensors are written to a folder of their own and compared a
chunk at a time from there (:class:`SpilledArray`), so memory holds the inputs and one set of
outputs. The folder is named with the process id (``gspo-spill-<pid>-*``): a run removes the
folders of processes that no longer exist (a run killed before it could clean up).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

__all__ = ["SPILL_BYTES", "SpilledArray", "Spill"]

#: Reference outputs of more bytes than this (over all input sets) go to a temporary file.
SPILL_BYTES = 256 << 20
_PREFIX = "gspo-spill-"


class SpilledArray:
    """A numeric tensor in a file: its shape and dtype, and its elements a chunk at a time."""

    def __init__(self, array: np.ndarray, path: Path):
        self.shape, self.dtype, self.path = tuple(array.shape), array.dtype, path
        with open(path, "wb") as f:
            np.ascontiguousarray(array).tofile(f)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def chunks(self, count: int) -> Iterator[np.ndarray]:
        """The elements in C order, ``count`` at a time (the last chunk may be shorter)."""
        with open(self.path, "rb") as f:
            for _ in range(0, self.size, count):
                yield np.fromfile(f, dtype=self.dtype, count=count)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale(root: Path) -> None:
    """Remove the spill folders of processes that no longer exist."""
    with contextlib.suppress(OSError):
        for folder in root.glob(_PREFIX + "*"):
            pid = folder.name[len(_PREFIX):].split("-", 1)[0]
            if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
                shutil.rmtree(folder, ignore_errors=True)


class Spill:
    """The folder one check spills to; :meth:`outputs` spills a set of reference outputs when they
    are large. Close it (or use it as a context manager) to remove the folder."""

    def __init__(self, limit: int | None = None):
        self.limit = SPILL_BYTES if limit is None else limit
        self._folder: Path | None = None
        self._count = 0

    def outputs(self, sets: list[dict]) -> list[dict]:
        """``sets`` (one dict of outputs per input set) with each numeric tensor in a file when
        their bytes together exceed the limit; unchanged otherwise, or when the file cannot be
        written (a full disk keeps them in memory)."""
        arrays = [a for s in sets for a in s.values() if _spillable(a)]
        if sum(a.nbytes for a in arrays) <= self.limit:
            return sets
        try:
            return [{k: (self._write(a) if _spillable(a) else a) for k, a in s.items()} for s in sets]
        except OSError:
            self.close()
            return sets

    def _write(self, array: np.ndarray) -> SpilledArray:
        if self._folder is None:
            root = Path(tempfile.gettempdir())
            _remove_stale(root)
            self._folder = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-", dir=root))
        self._count += 1
        return SpilledArray(array, self._folder / f"{self._count}.bin")

    def close(self) -> None:
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def __enter__(self) -> Spill:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _spillable(x) -> bool:
    return isinstance(x, np.ndarray) and x.dtype.kind in "biufc" and x.nbytes > 0
