"""CUDA backend: onnxruntime's CUDA provider on cuda-python streams, timed with CUDA events.

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
onnxruntime-gpu and cuda-python APIs; its GPU tests skip with :func:`gpu_status`'s reason, and
``benchmarks/gpu_check.py`` checks the whole path on the first machine with an NVIDIA GPU.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gspo.errors import GspoError, first_line
from gspo.ir import Graph, serialize
from gspo.runtime.bench import DeviceTime
from gspo.runtime.plan import make_plan
from gspo.runtime.runtimes import (
    GPU_INSTALL,
    import_onnxruntime,
    installed_runtimes,
    runtime_conflict,
)
from gspo.streams import Schedule

__all__ = ["CUDA_MAJOR", "CudaConfig", "CudaError", "CudaExecutor", "CudaRunner", "PieceTime", "backend_key", "check",
           "cuda_provider_options", "device_name", "gpu_status", "load_cuda_runner", "native_handle",
           "require_cuda_provider", "require_gpu", "stream_overlap"]

log = logging.getLogger(__name__)

#: The CUDA major of the onnxruntime-gpu and cuda-python that ``gspo[gpu]`` installs.
CUDA_MAJOR = 12
CUDA = "CUDAExecutionProvider"


class CudaError(GspoError):
    """CUDA cannot run here, or a CUDA call failed (one line naming the call and the error)."""


@dataclass(frozen=True)
class CudaConfig:
    """How to run on the GPU.

    ``tf32`` lets convolutions and matrix products round their inputs to TF32 (Ampere and later):
    faster, but ~1e-3 relative error against fp32, so it is off by default and always off when
    outputs are compared with the CPU's. ``shared_arena``: one device memory arena for every
    session instead of one each.
    """

    device_id: int = 0
    tf32: bool = False
    shared_arena: bool = True


@dataclass(frozen=True)
class PieceTime:
    """When one piece ran, in ms from the start of the run (CUDA events on its stream)."""

    segment: int
    stream: int
    start_ms: float
    end_ms: float


# ----------------------------------------------------------------- cuda-python
def _onnxruntime():
    return import_onnxruntime()


def _cudart():
    from cuda.bindings import runtime

    return runtime


def _cuda_utils():
    from cuda.bindings import utils

    return utils


def native_handle(obj) -> int:
    """The address of a cuda-python object (a stream) as an int, the documented way."""
    return int(_cuda_utils().get_cuda_native_handle(obj))


def _error_text(cudart, err) -> str:
    name = getattr(err, "name", str(err))
    try:
        text = cudart.cudaGetErrorString(err)[1]
        text = text.decode() if isinstance(text, bytes) else str(text)
    except Exception:
        return name
    return f"{name}: {text}"


def check(result, what: str):
    """cuda-python calls return ``(err, *values)``: raise :class:`CudaError` naming ``what`` on an
    error; else return the value (``None`` without one, a tuple with several)."""
    cudart = _cudart()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != cudart.cudaError_t.cudaSuccess:
        raise CudaError(f"{what} failed ({_error_text(cudart, err)})")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


# ------------------------------------------------------------- can CUDA run?
def _major(version: str) -> int | None:
    head = str(version).strip().split(".")[0]
    return int(head) if head.isdigit() else None


def _version_problem(ort, cuda_python_version: str) -> str | None:
    """The onnxruntime-gpu build's CUDA major against cuda-python's."""
    ort_major = _major(getattr(ort, "cuda_version", "") or "")
    py_major = _major(cuda_python_version)
    if ort_major is not None and py_major is not None and ort_major != py_major:
        return (f"onnxruntime-gpu {ort.__version__} is built for CUDA {ort_major} but cuda-python "
                f"{cuda_python_version} is for CUDA {py_major}: install matching ones ({GPU_INSTALL}: CUDA {CUDA_MAJOR})")
    return None


def _runtime_problem(ort) -> str | None:
    conflict = runtime_conflict(installed_runtimes())
    if conflict:
        return conflict
    if CUDA not in ort.get_available_providers():
        return f"this onnxruntime ({ort.__version__}) has no CUDAExecutionProvider: {GPU_INSTALL}"
    return None


def _cuda_python_problem() -> str | None:
    try:
        _cudart()
        utils = _cuda_utils()
    except ImportError:
        return f"cuda-python is not installed: {GPU_INSTALL}"
    if not hasattr(utils, "get_cuda_native_handle"):
        return f"cuda-python is older than 12.9.1 (no cuda.bindings.utils.get_cuda_native_handle): {GPU_INSTALL}"
    return None


def _cuda_python_version() -> str:
    from importlib import metadata

    for name in ("cuda-bindings", "cuda-python"):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return ""


def _preload(ort) -> None:
    """``onnxruntime.preload_dlls()`` where it exists (onnxruntime-gpu >= 1.21): load the CUDA and
    cuDNN libraries of the nvidia-* wheels before the provider looks for them. It prints; what it
    printed is logged instead."""
    preload = getattr(ort, "preload_dlls", None)
    if preload is None:
        return
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            preload()
    except Exception as e:
        log.warning("onnxruntime.preload_dlls() failed: %s", first_line(e))
    if out.getvalue().strip():
        log.info("onnxruntime.preload_dlls(): %s", " ".join(out.getvalue().split()))


def _device_problem(device_id: int) -> str | None:
    cudart = _cudart()
    try:
        err, count = cudart.cudaGetDeviceCount()
    except Exception as e:
        return f"the CUDA runtime cannot start ({first_line(e)})"
    if err != cudart.cudaError_t.cudaSuccess:
        derr, driver = cudart.cudaDriverGetVersion()
        has = f"; the NVIDIA driver supports CUDA {driver // 1000}.{driver % 1000 // 10}" if derr == cudart.cudaError_t.cudaSuccess and driver else ""
        return f"no usable CUDA device ({_error_text(cudart, err)}{has}; CUDA {CUDA_MAJOR} is needed)"
    if not 0 <= device_id < count:
        return f"CUDA device {device_id} does not exist ({count} visible)"
    return None


def _provider_library_error(ort) -> str:
    """Why onnxruntime's CUDA provider library does not load (what the dynamic loader says)."""
    import ctypes

    name = "onnxruntime_providers_cuda.dll" if sys.platform == "win32" else "libonnxruntime_providers_cuda.so"
    path = os.path.join(os.path.dirname(ort.__file__), "capi", name)
    if not os.path.exists(path):
        return f"{name} is missing from the onnxruntime package"
    try:
        ctypes.CDLL(path)
    except OSError as e:
        return f"{name} does not load: {first_line(e)}"
    return "onnxruntime.print_debug_info() says more"


def require_cuda_provider(session, ort, what: str) -> None:
    """Raise :class:`CudaError` unless ``session`` runs on the CUDA provider (onnxruntime falls
    back to the CPU silently when the CUDA or cuDNN libraries are missing)."""
    providers = list(session.get_providers())
    if not providers or providers[0] != CUDA:
        raise CudaError(f"onnxruntime fell back to the CPU for {what} (providers {providers}): "
                        f"{_provider_library_error(ort)}")


def _probe_problem(ort, config: CudaConfig) -> str | None:
    """Load a one-op model on the CUDA provider and see that it stays there."""
    from gspo.ir.builder import GraphBuilder

    b = GraphBuilder("probe")
    model = serialize(b.output(b.op("Relu", [b.input("x", (1, 4))])).build())
    try:
        session = ort.InferenceSession(model, providers=[(CUDA, cuda_provider_options(None, config)), "CPUExecutionProvider"])
        require_cuda_provider(session, ort, "a one-op model")
    except CudaError as e:
        return str(e)
    except Exception as e:
        return f"onnxruntime cannot start its CUDA provider: {first_line(e)}"
    return None


def gpu_status(config: CudaConfig = CudaConfig()) -> tuple[bool, str]:
    """Whether gspo can run on CUDA device ``config.device_id`` here, and if not, what is missing.

    Checked in order: one onnxruntime installed, with the CUDA provider; cuda-python, for the same
    CUDA major; the libraries preloaded; a visible device; a probe session really on the GPU.
    """
    try:
        ort = _onnxruntime()
    except GspoError as e:
        return False, str(e)
    problem = _runtime_problem(ort) or _cuda_python_problem()
    if problem is None:
        problem = _version_problem(ort, _cuda_python_version())
    if problem is None:
        _preload(ort)
        problem = _device_problem(config.device_id) or _probe_problem(ort, config)
    if problem:
        return False, problem
    return True, f"CUDA device {config.device_id} with onnxruntime-gpu {ort.__version__}"


def require_gpu(config: CudaConfig = CudaConfig(), option: str = "--device cuda") -> None:
    """Raise :class:`CudaError` (``"<option>: <what is missing>"``) unless CUDA can run here."""
    ok, why = gpu_status(config)
    if not ok:
        raise CudaError(f"{option}: {why}")


def device_name(device_id: int = 0) -> str:
    """The CUDA device's name, as ``cudaGetDeviceProperties`` gives it."""
    name = check(_cudart().cudaGetDeviceProperties(device_id), "cudaGetDeviceProperties").name
    return (name.decode(errors="replace") if isinstance(name, bytes) else str(name)).rstrip("\x00").strip()


def backend_key(device_id: int = 0) -> str:
    """What measurements on the CUDA backend depend on: onnxruntime-gpu's version and the device."""
    return f"cuda-{_onnxruntime().__version__}-{device_name(device_id)}"


# ----------------------------------------------------------------- sessions
def cuda_provider_options(stream: int | None, config: CudaConfig) -> dict[str, str]:
    """The CUDA provider's options for a session on stream handle ``stream`` (None: its own)."""
    options = {"device_id": str(config.device_id), "use_tf32": "1" if config.tf32 else "0"}
    if stream is not None:
        options.update(user_compute_stream=str(stream), has_user_compute_stream="1")
    return options


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
    ort = _onnxruntime()
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = int(threads)
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        session = ort.InferenceSession(model, sess_options=so,
                                       providers=[(CUDA, cuda_provider_options(None, config)), "CPUExecutionProvider"])
    except Exception as e:
        raise CudaError(f"onnxruntime cannot load the model on CUDA: {first_line(e)}") from None
    require_cuda_provider(session, ort, "a piece placed on CUDA")
    return CudaRunner(session)


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
        ort, cudart = _onnxruntime(), _cudart()
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
        so = ort.SessionOptions()
        so.log_severity_level = 3
        if shared:
            so.add_session_config_entry("session.use_env_allocators", "1")
        options = cuda_provider_options(native_handle(self._streams[self._stream_of[k]]), self.config)
        try:
            session = ort.InferenceSession(model, sess_options=so, providers=[(CUDA, options), "CPUExecutionProvider"])
        except Exception as e:
            raise CudaError(f"onnxruntime cannot load piece {k} on CUDA: {first_line(e)}") from None
        require_cuda_provider(session, ort, f"piece {k} of {self.graph.name}")
        return session

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
        ort, cudart = _onnxruntime(), _cudart()
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
        cudart = _cudart()
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
        cudart = _cudart()
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
            cudart = _cudart()
            for _ in range(2 + 2 * len(self.plan.segments) + len(self._streams)):
                self._marks.append(check(cudart.cudaEventCreateWithFlags(cudart.cudaEventDefault), "cudaEventCreateWithFlags"))
        return self._marks

    def time_run(self, values: Mapping) -> tuple[float, list[PieceTime]]:
        """One run on uploaded inputs timed with CUDA events: seconds from the start (recorded on
        stream 0, which every stream waits for) to the end (after stream 0 waited for every
        stream), and when each piece ran on its stream."""
        cudart = _cudart()
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
        cudart = _cudart()
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
