"""Streams and events for the torch executor, behind one small interface.

:class:`CudaStreams`: non-blocking streams created with cuda-python (``cudaStreamCreateWithFlags``)
and handed to torch as ``torch.cuda.ExternalStream``; events are ``torch.cuda.Event``. On the
CPU, :class:`NullStreams` makes every call a no-op (ops run in the plan's order on the calling
thread). Tests pass a recording stand-in with the same methods.
"""

from __future__ import annotations

import contextlib

import torch

from gspo.runtime.cuda.common import CudaError

__all__ = ["CudaStreams", "NullStreams"]


class NullStreams:
    """The CPU device: one implicit stream, no events, nothing to synchronize."""

    on_device = False

    def stream(self):
        return None

    def event(self, timing: bool = False):
        return None

    def record(self, event, stream) -> None:
        pass

    def wait(self, stream, event) -> None:
        pass

    def use(self, stream):
        return contextlib.nullcontext()

    def synchronize(self, stream) -> None:
        pass

    def elapsed_ms(self, start, end) -> float:
        raise CudaError("the CPU device has no timing events")

    def close(self) -> None:
        pass


class CudaStreams:
    """CUDA streams made by cuda-python, used by torch through ``ExternalStream``."""

    on_device = True

    def __init__(self, device_id: int = 0):
        from gspo.runtime.cuda import common

        self._common = common
        self.device = torch.device("cuda", device_id)
        torch.cuda.set_device(self.device)
        torch.cuda.init()
        self._cudart = common.import_cudart()
        common.check(self._cudart.cudaSetDevice(device_id), "cudaSetDevice")
        self._raw: list = []

    def stream(self):
        """A new non-blocking stream (cuda-python), as a torch stream."""
        cudart = self._cudart
        raw = self._common.check(cudart.cudaStreamCreateWithFlags(cudart.cudaStreamNonBlocking),
                                 "cudaStreamCreateWithFlags")
        self._raw.append(raw)
        try:
            handle = self._common.native_handle(raw)
        except Exception:  # an older cuda-python without get_cuda_native_handle: the object's int
            handle = int(raw)
        return torch.cuda.ExternalStream(handle, device=self.device)

    def event(self, timing: bool = False):
        return torch.cuda.Event(enable_timing=timing)

    def record(self, event, stream) -> None:
        event.record(stream)

    def wait(self, stream, event) -> None:
        stream.wait_event(event)

    def use(self, stream):
        return torch.cuda.stream(stream)

    def synchronize(self, stream) -> None:
        stream.synchronize()

    def elapsed_ms(self, start, end) -> float:
        return float(start.elapsed_time(end))

    def close(self) -> None:
        """Destroy the streams (after waiting for them); the first failure is raised after."""
        first: CudaError | None = None
        for raw in self._raw:
            for call, what in ((self._cudart.cudaStreamSynchronize, "cudaStreamSynchronize"),
                               (self._cudart.cudaStreamDestroy, "cudaStreamDestroy")):
                try:
                    self._common.check(call(raw), what)
                except CudaError as e:
                    first = first or e
        self._raw = []
        if first is not None:
            raise first
