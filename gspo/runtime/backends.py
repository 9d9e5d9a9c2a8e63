"""Backends: the runtimes a model, or a piece of one, can run on.

Every backend loads serialized ONNX bytes into a *runner* with onnxruntime's call shape,
``runner.run(output_names, feeds) -> list of arrays``, so the executors treat them alike:

* ``ort``: onnxruntime's CPU provider (all graph optimizations, no spinning threads);
* ``openvino``: OpenVINO's CPU plugin (``pip install 'gspo[openvino]'``), compiled for latency
  at f32 precision (no bf16 or f16 arithmetic, so results stay equivalent);
* ``openvino:bf16``: the same at bf16 inference precision, where the CPU has bf16 instructions.
  Never searched for an exact result: only ``gspo optimize --precision bf16`` places ops there,
  within the accuracy budget the user states (:mod:`gspo.precision`);
* ``cuda``: onnxruntime's CUDA provider on device 0 (``pip install 'gspo[gpu]'`` and an NVIDIA
  GPU), TF32 off; host arrays in and out (:class:`~gspo.runtime.cuda.CudaRunner`), so a value
  crossing between the CPU and the GPU is copied. Available only when
  :func:`~gspo.runtime.cuda.gpu_status` finds a working device (checked once a process).

No backend is imported before it is asked for; a missing one is a one-line error naming the
package to install.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Mapping, Sequence

import numpy as np

from gspo.errors import GspoError
from gspo.ir import Graph, serialize
from gspo.ir.protos import control_flow_depth
from gspo.runtime.buffers import BUFFERS, LARGE_OUTPUT
from gspo.runtime.protocols import Runner
from gspo.runtime.session import BackendError, SessionConfig, make_session

__all__ = ["BACKENDS", "REDUCED_BACKENDS", "RUNNABLE_BACKENDS", "DEFAULT_BACKEND", "backend_status", "available_backends", "check_backends", "load_runner",
           "backend_versions", "MAX_OPENVINO_NESTING", "openvino_probe"]

#: Every backend gspo knows, in the order they are preferred on a tie.
BACKENDS = ("ort", "openvino", "cuda")
DEFAULT_BACKEND = "ort"
#: Backends at reduced precision (never equivalent at fp32 tolerance), by the precision they run.
REDUCED_BACKENDS = {"openvino:bf16": "bf16"}
#: Every backend a saved placement may name.
RUNNABLE_BACKENDS = BACKENDS + tuple(REDUCED_BACKENDS)
_INSTALL = {"openvino": "pip install 'gspo[openvino]' (the openvino package)"}
_core_lock = threading.Lock()
_core = None
#: gpu_status() of device 0, once a process (its probe builds a CUDA session).
_cuda_checked: dict[int, tuple[bool, str]] = {}


def _openvino():
    import openvino

    return openvino


def backend_status(name: str) -> tuple[bool, str]:
    """Whether backend ``name`` can run here, and if not, why not."""
    if name == "ort":
        return True, "onnxruntime CPU"
    if name == "openvino":
        try:
            ov = _openvino()
        except ImportError:
            return False, f"OpenVINO is not installed: {_INSTALL['openvino']}"
        return True, f"OpenVINO {ov.__version__.split('-')[0]} CPU"
    if name == "openvino:bf16":
        return _bf16_status()
    if name == "cuda":
        return _cuda_status()
    return False, f"unknown backend {name!r} (known: {', '.join(RUNNABLE_BACKENDS)})"


def _bf16_status() -> tuple[bool, str]:
    """Whether OpenVINO runs bf16 arithmetic on this CPU (without bf16 instructions it would
    quietly run f32, and a bf16 placement would only cost a compile)."""
    ok, why = backend_status("openvino")
    if not ok:
        return ok, why
    try:
        caps = _openvino_core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    except Exception as e:  # noqa: BLE001 - OpenVINO raises its own exception types
        return False, f"OpenVINO cannot tell this CPU's capabilities: {_reason(e)}"
    if "BF16" not in caps:
        return False, "this CPU has no bf16 instructions (OpenVINO would run f32)"
    return True, f"{why} at bf16"


def _cuda_status() -> tuple[bool, str]:
    from gspo.runtime import cuda

    if 0 not in _cuda_checked:
        _cuda_checked[0] = cuda.gpu_status()
    return _cuda_checked[0]


def available_backends() -> tuple[str, ...]:
    """The backends that can run here, in :data:`BACKENDS` order."""
    return tuple(b for b in BACKENDS if backend_status(b)[0])


def check_backends(names: Sequence[str]) -> tuple[str, ...]:
    """``names`` without repeats, each checked; ``ort`` always first.

    Raises:
        GspoError: one line naming a backend that cannot run here, and why.
    """
    out = []
    for name in dict.fromkeys(n.strip().lower() for n in names if n.strip()):
        if name in REDUCED_BACKENDS:
            raise GspoError(f"backend {name!r} runs at {REDUCED_BACKENDS[name]}, which changes outputs: ask for it with "
                            "--precision and an accuracy budget (--max-error), not --backends")
        ok, why = backend_status(name)
        if not ok:
            raise GspoError(f"backend {name!r} cannot run here: {why}")
        out.append(name)
    if DEFAULT_BACKEND not in out:
        out.insert(0, DEFAULT_BACKEND)
    return tuple(sorted(out, key=BACKENDS.index))


def backend_versions(names: Sequence[str]) -> str:
    """A key for measurements made with these backends (their versions)."""
    from gspo.runtime.session import runtime_version

    parts = []
    for name in names:
        if name == "ort":
            parts.append(f"ort-{runtime_version()}")
        elif name.startswith("openvino"):
            parts.append(f"{name.replace(':', '-')}-{_openvino().__version__.split('-')[0]}")
        elif name == "cuda":
            from gspo.runtime import cuda

            parts.append(cuda.backend_key(0))
    return "+".join(parts)


class _OpenVinoRunner:
    """An OpenVINO compiled model behind onnxruntime's ``run(names, feeds)``.

    The inputs are read in place. An output of fixed shape of
    :data:`~gspo.runtime.buffers.LARGE_OUTPUT` bytes or more is written straight into an array of
    :data:`~gspo.runtime.buffers.BUFFERS` (OpenVINO's own buffer for it is let go); other outputs
    come back as copies of OpenVINO's.
    """

    def __init__(self, compiled):
        self._compiled = compiled
        self._request = compiled.create_infer_request()
        #: each output name's port and its position among the model's outputs
        self._outputs = {name: (i, port) for i, port in enumerate(compiled.outputs) for name in port.get_names()}
        self._large = {}
        for i, port in enumerate(compiled.outputs):
            shape = port.get_partial_shape()
            if not shape.is_static:
                continue
            dtype = np.dtype(port.get_element_type().to_dtype())
            dims = tuple(int(d) for d in shape.to_shape())
            if dtype.kind in "biufc" and int(np.prod(dims, dtype=np.int64)) * dtype.itemsize >= LARGE_OUTPUT:
                self._large[i] = (dims, dtype)
        if self._large:
            self._bind()  # OpenVINO frees the buffers it allocated for them when it compiled

    def _bind(self) -> dict[int, np.ndarray]:
        """Point each large output at an array of the pool; the arrays by output index."""
        held = {i: BUFFERS.take(*spec) for i, spec in self._large.items()}
        for i, array in held.items():
            self._request.set_output_tensor(i, _openvino().Tensor(array, shared_memory=True))
        return held

    def run(self, names: Sequence[str], feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        held = self._bind() if self._large else {}
        try:
            result = self._request.infer({k: _contiguous(v) for k, v in feeds.items()}, share_inputs=True,
                                         share_outputs=True)
        except Exception as e:
            raise BackendError(f"OpenVINO failed to run the model: {_reason(e)}") from None
        ports = [self._outputs[n] for n in names]
        return [held[i] if i in held else result[port].copy() for i, port in ports]


def _contiguous(value) -> np.ndarray:
    """``value`` as a C-contiguous array of its own shape (``np.ascontiguousarray`` makes a
    scalar's shape ``(1,)``, which OpenVINO refuses for an input of shape ``[]``)."""
    a = np.asarray(value)
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def _reason(e: Exception) -> str:
    """The telling line of an OpenVINO exception (its first lines name source files)."""
    lines = [line.strip(" -") for line in str(e).splitlines() if line.strip()]
    telling = [line for line in lines if "No conversion rule" in line or "not supported" in line.lower()]
    useful = [line for line in lines if not line.startswith(("Exception from", "Check ", "To facilitate"))]
    return (telling or useful or [type(e).__name__])[0][:300]


def _openvino_core():
    global _core
    with _core_lock:
        if _core is None:
            _core = _openvino().Core()
        return _core


#: The deepest nesting of control flow (If, Loop, Scan in one another's branches) a model given
#: to OpenVINO may have: its compile grows exponentially with the nesting and cannot be
#: interrupted (here, Ifs nested in one another's then-branches: 14 levels 0.2 s, 16 0.7 s, 18
#: 2.5 s, 20 9.4 s, 25 over 300 s; in issue 42's model 14 levels 6 s, 18 levels 21.8 s, 25 over
#: 200 s; benchmarks/edges.md). At 10 levels the slower of the two is about 1-2 s.
MAX_OPENVINO_NESTING = 10
def _refuse_nesting(model: bytes | Graph) -> None:
    """Raise :class:`BackendError` when ``model`` nests control flow beyond :data:`MAX_OPENVINO_NESTING`."""
    depth = control_flow_depth(model)
    if depth is None:  # too deep for protobuf to parse: deeper than anything OpenVINO is given
        depth = MAX_OPENVINO_NESTING + 1
    if depth > MAX_OPENVINO_NESTING:
        raise BackendError(f"OpenVINO is not given the model: its control flow (If/Loop/Scan) is nested {depth} deep, "
                           f"beyond {MAX_OPENVINO_NESTING}, where OpenVINO's compile grows exponentially and cannot "
                           "be interrupted")


def _load_openvino(model: bytes, threads: int, precision: str = "f32") -> _OpenVinoRunner:
    # OpenVINO allocates every output as it compiles; the pool's idle arrays go first
    BUFFERS.clear()
    core = _openvino_core()
    config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": precision}
    if threads:
        config["INFERENCE_NUM_THREADS"] = int(threads)
    try:
        compiled = core.compile_model(core.read_model(io.BytesIO(model)), "CPU", config)
    except Exception as e:
        raise BackendError(f"OpenVINO cannot compile the model: {_reason(e)}") from None
    return _OpenVinoRunner(compiled)


#: What :func:`openvino_probe` runs: read and compile the model at its path, at the given precision.
_PROBE = ("import sys, openvino as ov; c = ov.Core(); "
          "c.compile_model(c.read_model(sys.argv[1]), 'CPU', {'INFERENCE_PRECISION_HINT': sys.argv[2]})")


def openvino_probe(model: bytes, precision: str = "f32", timeout: float = 300.0) -> str | None:
    """Why OpenVINO cannot compile ``model``, found in a process of its own (``None``: it compiles):
    a model OpenVINO has never been given in this form (a quantized one gspo made) can crash its
    compile (SIGSEGV), which must not take the caller's process with it."""
    import os
    import subprocess
    import sys
    import tempfile

    fd, path = tempfile.mkstemp(suffix=".onnx", prefix="gspo-probe-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(model)
        done = subprocess.run([sys.executable, "-c", _PROBE, path, precision], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"OpenVINO's compile ran past {timeout:g} s"
    finally:
        os.unlink(path)
    if done.returncode < 0:
        return f"OpenVINO's compile crashed (signal {-done.returncode})"
    if done.returncode:  # its traceback's message, without the frames and the logs before it
        said = [line for line in done.stderr.splitlines()
                if line.strip() and not line.startswith(("WARNING", "Traceback", "  "))]
        return f"OpenVINO cannot compile the model: {_reason(RuntimeError(chr(10).join(said) or 'no reason given'))}"
    return None


def load_runner(name: str, model: bytes | Graph, config: SessionConfig = SessionConfig()) -> Runner:
    """A :class:`~gspo.runtime.protocols.Runner` of ``model`` (a graph or serialized ONNX) on backend ``name`` (threads from ``config``).

    Raises:
        BackendError: the backend refuses the model (the reason in one line).
        GspoError: the backend cannot run here.
    """
    if name == "ort":
        return make_session(model, config)
    ok, why = backend_status(name)
    if not ok:
        raise GspoError(f"backend {name!r} cannot run here: {why}")
    if name.startswith("openvino"):
        _refuse_nesting(model)
    if isinstance(model, Graph):
        model = serialize(model)
    if name == "cuda":
        from gspo.runtime.cuda import load_cuda_runner

        return load_cuda_runner(model, config.intra_op_threads)
    return _load_openvino(model, config.intra_op_threads, REDUCED_BACKENDS.get(name, "f32"))
