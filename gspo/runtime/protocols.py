"""What the runtime's runners and executors share, named as protocols.

A *runner* runs one serialized model (a whole model or a piece of one) on one backend with
onnxruntime's call shape: ``onnxruntime.InferenceSession`` itself (the ``ort`` backend), the
OpenVINO runner and :class:`~gspo.runtime.cuda.CudaRunner` (host arrays in and out). The
executors run a piece's runners one after another or on streams, whichever backend each is on.

An *executor* runs a whole graph with a schedule on one device: :class:`~gspo.runtime.CpuExecutor`
(threads per stream, each piece on the runner of its placed backend) and
:class:`~gspo.runtime.cuda.CudaExecutor` (CUDA streams and events, values on the device).
:func:`~gspo.runtime.executor.device_executor` gives the one of a device. An executor that times
itself on the device also has ``timed_runner(feeds)`` (see :func:`gspo.runtime.bench.timed_runner`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from gspo.ir import Graph

__all__ = ["Executor", "Runner"]


@runtime_checkable
class Runner(Protocol):
    """One loaded model on one backend."""

    def run(self, names: Sequence[str], feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """The outputs ``names`` of one run on ``feeds`` (host arrays), in that order."""
        ...


@runtime_checkable
class Executor(Protocol):
    """A whole graph, scheduled on one device; a context manager that closes itself."""

    graph: Graph
    outputs: Sequence[str]

    @property
    def num_streams(self) -> int:
        """Number of streams the executor runs on."""
        ...

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once on ``feeds`` (host arrays); the graph's outputs by name, as host arrays."""
        ...

    def close(self) -> None:
        """Free what the executor holds (threads, sessions, streams); a second close does nothing."""
        ...

    def __enter__(self) -> Executor: ...

    def __exit__(self, *exc) -> None: ...
