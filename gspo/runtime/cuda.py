"""CUDA backend: cuda-python streams and events, one onnxruntime CUDA session per segment.

Each stream of the plan is a non-blocking CUDA stream; every segment's session runs on its
stream (``user_compute_stream``), tensors stay on the device (IOBinding with OrtValues), runs
are asynchronous (run option ``disable_synchronize_execution_providers``), and each cross-stream
event is ``cudaEventRecord`` on the producer's stream and ``cudaStreamWaitEvent`` on the
consumer's. One host thread issues every segment in the plan's order; the device overlaps them.

No GPU exists where gspo is built and tested: this module is written against the documented
onnxruntime-gpu and cuda-python APIs, and its tests skip when :func:`gpu_status` says no GPU is
visible. Nothing here runs on the CPU and nothing claims a GPU result without one.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from gspo.errors import GspoError
from gspo.ir import Graph, serialize
from gspo.runtime.plan import make_plan
from gspo.streams import Schedule

__all__ = ["CudaExecutor", "gpu_status", "require_gpu"]


def _cudart():
    try:
        from cuda.bindings import runtime as cudart  # cuda-python >= 12.6
    except ImportError:
        from cuda import cudart  # older cuda-python
    return cudart


def gpu_status() -> tuple[bool, str]:
    """Whether a CUDA GPU can run gspo here, and if not, why not."""
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return False, "onnxruntime has no CUDAExecutionProvider (install gspo[gpu]: onnxruntime-gpu)"
    try:
        cudart = _cudart()
    except ImportError:
        return False, "cuda-python is not installed (install gspo[gpu])"
    try:
        err, count = cudart.cudaGetDeviceCount()
    except Exception as e:  # driver missing
        return False, f"the CUDA runtime cannot start ({e})"
    if err != cudart.cudaError_t.cudaSuccess or count < 1:
        return False, "no CUDA GPU is visible"
    return True, f"{count} CUDA device(s)"


def require_gpu() -> None:
    ok, why = gpu_status()
    if not ok:
        raise GspoError(f"--device cuda: {why}")


def _check(result):
    """cuda-python calls return ``(err, *values)``; raise on an error, return the values."""
    cudart = _cudart()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != cudart.cudaError_t.cudaSuccess:
        raise GspoError(f"CUDA error: {cudart.cudaGetErrorString(err)[1].decode()}")
    return values[0] if len(values) == 1 else values


def _handle(obj) -> int:
    """Integer address of a cuda-python handle (stream or event)."""
    try:
        return int(obj)
    except TypeError:
        return int(obj.getPtr())


class CudaExecutor:
    """Run ``graph`` with ``schedule`` on CUDA device ``device_id`` (see the module docstring)."""

    def __init__(self, graph: Graph, schedule: Schedule | None = None, device_id: int = 0):
        require_gpu()
        import onnxruntime as ort

        cudart = _cudart()
        self.graph = graph
        self.device_id = device_id
        self.outputs = graph.output_names()
        self.plan = make_plan(graph, schedule or Schedule.single(graph))
        _check(cudart.cudaSetDevice(device_id))
        self._streams = [
            _check(cudart.cudaStreamCreateWithFlags(cudart.cudaStreamNonBlocking)) for _ in self.plan.streams
        ]
        self._events = [
            _check(cudart.cudaEventCreateWithFlags(cudart.cudaEventDisableTiming)) for _ in range(self.plan.num_events)
        ]
        self._run_options = ort.RunOptions()
        self._run_options.add_run_config_entry("disable_synchronize_execution_providers", "1")
        so = ort.SessionOptions()
        so.log_severity_level = 4
        self._sessions = []
        for seg in self.plan.segments:
            cuda_options = {
                "device_id": str(device_id),
                "user_compute_stream": str(_handle(self._streams[seg.stream])),
            }
            self._sessions.append(
                ort.InferenceSession(
                    serialize(seg.graph),
                    sess_options=so,
                    providers=[("CUDAExecutionProvider", cuda_options), "CPUExecutionProvider"],
                )
            )

    @property
    def num_streams(self) -> int:
        return self.plan.num_streams

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        import onnxruntime as ort

        cudart = _cudart()
        values = {
            name: ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(arr), "cuda", self.device_id)
            for name, arr in feeds.items()
        }
        for seg, session in zip(self.plan.segments, self._sessions):
            stream = self._streams[seg.stream]
            for e in seg.waits:
                _check(cudart.cudaStreamWaitEvent(stream, self._events[e], 0))
            binding = session.io_binding()
            for name in seg.inputs:
                binding.bind_ortvalue_input(name, values[name])
            for name in seg.outputs:
                binding.bind_output(name, "cuda", self.device_id)
            session.run_with_iobinding(binding, self._run_options)
            values.update(zip(seg.outputs, binding.get_outputs()))
            for e in seg.signals:
                _check(cudart.cudaEventRecord(self._events[e], stream))
        for stream in self._streams:
            _check(cudart.cudaStreamSynchronize(stream))
        return {name: values[name].numpy() for name in self.outputs}

    def close(self) -> None:
        cudart = _cudart()
        for e in getattr(self, "_events", []):
            cudart.cudaEventDestroy(e)
        for s in getattr(self, "_streams", []):
            cudart.cudaStreamDestroy(s)
        self._events, self._streams = [], []

    def __enter__(self) -> CudaExecutor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
