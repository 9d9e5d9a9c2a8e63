"""Large outputs written into arrays the process reuses once nobody holds them.

A runtime keeps a buffer for each output of a model: onnxruntime's arena keeps the block it
handed out, OpenVINO allocates its outputs when it compiles and copies them out on every call.
With two runtimes compared on one model, each holds its own copy of every output, beside the
inputs: a model of one 400 MB input and one 400 MB output then takes four times its input.

Outputs of :data:`LARGE_OUTPUT` bytes or more are instead written straight into arrays from
:data:`BUFFERS`. An array is handed out again only when no one but the pool refers to it (the
caller dropped it and every view of it), so an output a caller keeps is never overwritten;
the runtimes write into it in place, without a copy.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence

import numpy as np

__all__ = ["LARGE_OUTPUT", "OutputBuffers", "BUFFERS"]

#: Outputs of at least this many bytes are written into reused arrays.
LARGE_OUTPUT = 64 << 20
#: Arrays the pool tracks per shape and type (those callers still hold are forgotten beyond it).
_KEEP = 2


class OutputBuffers:
    """Arrays by shape and type, each handed out again once only the pool refers to it."""

    def __init__(self):
        self._arrays: dict[tuple, list[np.ndarray]] = {}
        self._lock = threading.Lock()

    def take(self, shape: Sequence[int], dtype) -> np.ndarray:
        """An array of ``shape`` and ``dtype`` nobody else holds (its contents undefined)."""
        key = (tuple(int(d) for d in shape), np.dtype(dtype).str)
        with self._lock:
            arrays = self._arrays.setdefault(key, [])
            for i in range(len(arrays)):
                if _refs(arrays, i) <= _ALONE:  # nobody outside the pool
                    return arrays[i]
            array = np.empty(key[0], dtype=key[1])
            arrays.append(array)
            del arrays[:-_KEEP]
            return array

    def clear(self) -> None:
        """Forget every array (those callers hold stay theirs)."""
        with self._lock:
            self._arrays.clear()


def _refs(arrays: list, i: int) -> int:
    return sys.getrefcount(arrays[i])


#: What :func:`_refs` counts for an object only a list refers to (measured: it varies between
#: Python versions).
_ALONE = _refs([object()], 0)

#: The process's pool.
BUFFERS = OutputBuffers()
