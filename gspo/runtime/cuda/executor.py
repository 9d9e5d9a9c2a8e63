"""Running on CUDA: onnxruntime's CUDA provider on cuda-python streams, timed with CUDA events.

Each stream of the plan is a non-blocking CUDA stream created with cuda-python
(``cuda.bindings.runtime``); every piece's session runs on its stream (provider options
``user_compute_stream`` / ``has_user_compute_stream``, the handle from
``cuda.bindings.utils.get_cuda_native_handle``), with TF32 off unless asked for, so results stay
fp32 and comparable with the CPU's. Tensors stay on the device: inputs are copied once by
``cudaMemcpyAsync`` on an upload stream that is synchronized before any piece starts (host
memory never crosses the non-blocking streams), pieces are bound to device OrtValues (IOBinding),
runs are asynchronous (run option ``disable_synchronize_execution_providers``), and each
cross-stream dependency is ``cudaEventRecord`` on the producer's stream and
``cudaStreamWaitEvent`` on the consumer's. Every session must report ``CUDAExecutionProvider``
first: onnxruntime's silent fallback to the CPU is an error here. Sessions share one CUDA memory
arena registered with onnxruntime's environment (its CUDA arena is stream-aware and does not
hand a block freed on one stream to another).

No GPU exists where gspo is built and tested: this module is written against the documented
onnxruntime-gpu and cuda-python APIs; its GPU tests skip with
:func:`~gspo.runtime.cuda.status.gpu_status`'s reason, and ``benchmarks/gpu_check.py`` checks the
whole path on the first machine with an NVIDIA GPU.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gspo.errors import first_line
from gspo.ir import Graph, serialize
from gspo.runtime.bench import DeviceTime
from gspo.runtime.cuda import common
from gspo.runtime.cuda.common import (
    CUDA,
    CudaConfig,
    CudaError,
    check,
    cuda_provider_options,
    native_handle,
)
from gspo.runtime.cuda.status import require_cuda_provider, require_gpu
from gspo.runtime.plan import make_plan
from gspo.runtime.session import session_options
from gspo.streams import Schedule

__all__ = ["CudaExecutor", "CudaRunner", "PieceTime", "load_cuda_runner", "stream_overlap"]

log = logging.getLogger(__name__)
#: onnxruntime's log severity for CUDA sessions (3: errors only).
_LOG_SEVERITY = 3


@dataclass(frozen=True)
class PieceTime:
    """When one piece ran, in ms from the start of the run (CUDA events on its stream)."""

    segment: int
    stream: int
    start_ms: float
    end_ms: float


_arena_lock = threading.Lock()
#: Devices whose shared arena is registered with onnxruntime's (process-wide) environment, which
#: refuses a second registration for the same device.
_arenas: set[int] = set()


def _shared_arena(ort, device_id: int) -> bool:
    """Register one CUDA arena for ``device_id`` with onnxruntime's environment (once a process);
    sessions use it with ``session.use_env_allocators``. False if onnxruntime refuses."""
    with _arena_lock:
        if device_id in _arenas:
            return True
        try:
            info = ort.OrtMemoryInfo("Cuda", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, device_id, ort.OrtMemType.DEFAULT)
            ort.create_and_register_allocator_v2(CUDA, info, {"device_id": str(device_id)}, ort.OrtArenaCfg(0, -1, -1, -1))
        except Exception as e:
            log.warning("no shared CUDA arena (each session keeps its own): %s", first_line(e))
            return False
        _arenas.add(device_id)
        return True


def stream_overlap(pieces: Sequence[PieceTime]) -> float:
    """Milliseconds during which pieces on two or more streams ran at once (from event times).

    >>> stream_overlap([PieceTime(0, 0, 0.0, 2.0), PieceTime(1, 1, 1.0, 3.0), PieceTime(2, 0, 2.0, 4.0)])
    2.0
    """
    edges = sorted([(p.start_ms, 1) for p in pieces] + [(p.end_ms, -1) for p in pieces])
    busy, last, total = 0, 0.0, 0.0
    for t, step in edges:
        if busy >= 2:
            total += t - last
        busy, last = busy + step, t
    return total


class CudaRunner:
    """One model on onnxruntime's CUDA provider behind the backends' ``run(names, feeds)``: host
    arrays in and out, onnxruntime copying them to and from the device, so that a piece placed on
    the GPU can sit between pieces on the CPU (see :mod:`gspo.runtime.backends`). For a whole
    model on streams, with values kept on the device, see :class:`CudaExecutor`."""

    def __init__(self, session):
        self._session = session

    def run(self, names: Sequence[str], feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """The outputs ``names`` of one run on ``feeds`` (host arrays)."""
        try:
            return self._session.run(list(names), dict(feeds))
        except Exception as e:
            raise CudaError(f"onnxruntime CUDA failed to run the model: {first_line(e)}") from None


def load_cuda_runner(model: bytes, threads: int = 0, config: CudaConfig = CudaConfig()) -> CudaRunner:
    """A :class:`CudaRunner` of serialized ONNX ``model`` (TF32 off unless ``config`` asks;
    ``threads``: intra-op threads of the ops that stay on the CPU).

    Raises:
        CudaError: onnxruntime cannot load the model on CUDA, or fell back to the CPU for it.
    """
    ort = common.import_ort()
    so = session_options(ort, threads=threads, allow_spinning=False, log_severity=_LOG_SEVERITY)
    session = _cuda_session(ort, model, so, None, config, "the model", "a piece placed on CUDA")
    return CudaRunner(session)


def _cuda_session(ort, model: bytes, so, stream: int | None, config: CudaConfig, loading: str, checking: str):
    """A session of ``model`` on the CUDA provider (on stream handle ``stream``; None: its own),
    the CPU provider only for what CUDA cannot run; refused if onnxruntime fell back to the CPU.
    ``loading`` and ``checking`` name the model in the errors."""
    providers = [(CUDA, cuda_provider_options(stream, config)), "CPUExecutionProvider"]
    try:
        session = ort.InferenceSession(model, sess_options=so, providers=providers)
    except Exception as e:
        raise CudaError(f"onnxruntime cannot load {loading} on CUDA: {first_line(e)}") from None
    require_cuda_provider(session, ort, checking)
    return session


class CudaExecutor:
    """Run ``graph`` with ``schedule`` on a CUDA device (see the module docstring).

    Args:
        graph: the model.
        schedule: stream assignment (``None``: one stream, one session).
        config: device, TF32, shared arena.
        one_stream: run the schedule's pieces one after another on a single stream (what the
            pieces cost apart from their overlap: calibration's ``segments_in_order``).
    """

    def __init__(self, graph: Graph, schedule: Schedule | None = None, config: CudaConfig = CudaConfig(),
                 one_stream: bool = False):
        self._streams: list = []
        self._events: list = []
        self._marks: list = []
        self._sessions: list = []
        self._upload = None
        require_gpu(config)
        self.graph, self.config = graph, config
        self.outputs = graph.output_names()
        self.plan = make_plan(graph, schedule or Schedule.single(graph))
        self._stream_of = [0 if one_stream else seg.stream for seg in self.plan.segments]
        try:
            self._start(1 if one_stream else self.plan.num_streams)
        except BaseException:
            self.close()
            raise

    def _start(self, num_streams: int) -> None:
        ort, cudart = common.import_ort(), common.import_cudart()
        check(cudart.cudaSetDevice(self.config.device_id), "cudaSetDevice")
        for _ in range(num_streams):
            self._streams.append(check(cudart.cudaStreamCreateWithFlags(cudart.cudaStreamNonBlocking), "cudaStreamCreateWithFlags"))
        self._upload = check(cudart.cudaStreamCreateWithFlags(cudart.cudaStreamNonBlocking), "cudaStreamCreateWithFlags")
        for _ in range(self.plan.num_events):
            self._events.append(check(cudart.cudaEventCreateWithFlags(cudart.cudaEventDisableTiming), "cudaEventCreateWithFlags"))
        self._run_options = ort.RunOptions()
        self._run_options.add_run_config_entry("disable_synchronize_execution_providers", "1")
        shared = self.config.shared_arena and _shared_arena(ort, self.config.device_id)
        for k, seg in enumerate(self.plan.segments):
            self._sessions.append(self._load(ort, k, serialize(seg.graph), shared))

    def _load(self, ort, k: int, model: bytes, shared: bool):
        so = session_options(ort, log_severity=_LOG_SEVERITY,
                             entries={"session.use_env_allocators": "1"} if shared else None)
        stream = native_handle(self._streams[self._stream_of[k]])
        return _cuda_session(ort, model, so, stream, self.config, f"piece {k}", f"piece {k} of {self.graph.name}")

    @property
    def num_streams(self) -> int:
        """Number of CUDA streams the plan runs on."""
        return len(self._streams) or self.plan.num_streams

    def providers(self) -> list[list[str]]:
        """The providers each piece's session really uses (the first is the one it runs on)."""
        return [list(s.get_providers()) for s in self._sessions]

    def upload(self, feeds: Mapping[str, np.ndarray]) -> dict:
        """Copy ``feeds`` to device OrtValues (``cudaMemcpyAsync`` on the upload stream, which is
        synchronized before this returns, so every stream sees the copies complete)."""
        ort, cudart = common.import_ort(), common.import_cudart()
        values, hosts = {}, []
        for name, arr in feeds.items():
            host = np.ascontiguousarray(arr)
            hosts.append(host)  # alive until the copies are done
            dev = ort.OrtValue.ortvalue_from_shape_and_type(list(host.shape), host.dtype.type, "cuda", self.config.device_id)
            if host.nbytes:
                check(cudart.cudaMemcpyAsync(dev.data_ptr(), host.ctypes.data, host.nbytes,
                                             cudart.cudaMemcpyKind.cudaMemcpyHostToDevice, self._upload), "cudaMemcpyAsync")
            values[name] = dev
        check(cudart.cudaStreamSynchronize(self._upload), "cudaStreamSynchronize")
        return values

    def _launch(self, values: dict, marks: list | None = None) -> dict:
        """Issue every piece on its stream in the plan's order; ``marks``: a (start, end) timing
        event pair per piece, recorded around it on its stream."""
        cudart = common.import_cudart()
        for k, (seg, session) in enumerate(zip(self.plan.segments, self._sessions)):
            stream = self._streams[self._stream_of[k]]
            for e in seg.waits:
                check(cudart.cudaStreamWaitEvent(stream, self._events[e], 0), "cudaStreamWaitEvent")
            if marks:
                check(cudart.cudaEventRecord(marks[k][0], stream), "cudaEventRecord")
            binding = session.io_binding()
            for name in seg.inputs:
                binding.bind_ortvalue_input(name, values[name])
            for name in seg.outputs:
                binding.bind_output(name, "cuda", self.config.device_id)
            session.run_with_iobinding(binding, self._run_options)
            values.update(zip(seg.outputs, binding.get_outputs()))
            if marks:
                check(cudart.cudaEventRecord(marks[k][1], stream), "cudaEventRecord")
            for e in seg.signals:
                check(cudart.cudaEventRecord(self._events[e], stream), "cudaEventRecord")
        return values

    def _synchronize(self) -> None:
        cudart = common.import_cudart()
        for stream in self._streams:
            check(cudart.cudaStreamSynchronize(stream), "cudaStreamSynchronize")

    def run_device(self, values: Mapping) -> dict:
        """Run on uploaded inputs (:meth:`upload`); every value of the run, on the device, after
        all streams finished."""
        if not self._sessions:
            raise CudaError("the executor is closed")
        out = self._launch(dict(values))
        self._synchronize()
        return out

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Upload, run, and copy the outputs back: outputs by name."""
        values = self.run_device(self.upload(feeds))
        return {name: values[name].numpy() for name in self.outputs}

    def _timing_marks(self) -> list:
        """Timing events, created once: the run's start and end, then a pair per piece."""
        if not self._marks:
            cudart = common.import_cudart()
            for _ in range(2 + 2 * len(self.plan.segments) + len(self._streams)):
                self._marks.append(check(cudart.cudaEventCreateWithFlags(cudart.cudaEventDefault), "cudaEventCreateWithFlags"))
        return self._marks

    def time_run(self, values: Mapping) -> tuple[float, list[PieceTime]]:
        """One run on uploaded inputs timed with CUDA events: seconds from the start (recorded on
        stream 0, which every stream waits for) to the end (after stream 0 waited for every
        stream), and when each piece ran on its stream."""
        cudart = common.import_cudart()
        marks = self._timing_marks()
        start, end, joins, rest = marks[0], marks[1], marks[2:2 + len(self._streams)], marks[2 + len(self._streams):]
        pairs = list(zip(rest[0::2], rest[1::2]))
        first = self._streams[0]
        check(cudart.cudaEventRecord(start, first), "cudaEventRecord")
        for stream in self._streams[1:]:
            check(cudart.cudaStreamWaitEvent(stream, start, 0), "cudaStreamWaitEvent")
        self._launch(dict(values), pairs)
        for stream, join in zip(self._streams[1:], joins):
            check(cudart.cudaEventRecord(join, stream), "cudaEventRecord")
            check(cudart.cudaStreamWaitEvent(first, join, 0), "cudaStreamWaitEvent")
        check(cudart.cudaEventRecord(end, first), "cudaEventRecord")
        check(cudart.cudaEventSynchronize(end), "cudaEventSynchronize")
        self._synchronize()

        def ms(event) -> float:
            return float(check(cudart.cudaEventElapsedTime(start, event), "cudaEventElapsedTime"))

        pieces = [PieceTime(k, self._stream_of[k], ms(a), ms(b)) for k, (a, b) in enumerate(pairs)]
        return ms(end) / 1e3, pieces

    def timed_runner(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], DeviceTime]:
        """Inputs uploaded once; each call one run, its device time (no host copies counted)."""
        values = self.upload(feeds)
        return lambda: DeviceTime(self.time_run(values)[0])

    def close(self) -> None:
        """Free in dependency order: wait for the streams, drop the sessions (their providers use
        the streams), then destroy the events and the streams. Every destroy is attempted; the
        first failure is raised after."""
        if not (self._streams or self._sessions or self._events or self._marks or self._upload):
            return
        cudart = common.import_cudart()
        errors: list[CudaError] = []

        def attempt(result, what: str) -> None:
            try:
                check(result, what)
            except CudaError as e:
                errors.append(e)

        streams = self._streams + ([self._upload] if self._upload is not None else [])
        for s in streams:
            attempt(cudart.cudaStreamSynchronize(s), "cudaStreamSynchronize")
        self._sessions = []
        for e in self._events + self._marks:
            attempt(cudart.cudaEventDestroy(e), "cudaEventDestroy")
        for s in streams:
            attempt(cudart.cudaStreamDestroy(s), "cudaStreamDestroy")
        self._events, self._marks, self._streams, self._upload = [], [], [], None
        if errors:
            raise errors[0]

    def __enter__(self) -> CudaExecutor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
