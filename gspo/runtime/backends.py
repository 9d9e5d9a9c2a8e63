"""Backends: the runtimes a model, or a piece of one, can run on.

Every backend loads serialized ONNX bytes into a *runner* with onnxruntime's call shape,
``runner.run(output_names, feeds) -> list of arrays``, so the executors treat them alike:

* ``ort``: onnxruntime's CPU provider (all graph optimizations, no spinning threads);
* ``openvino``: OpenVINO's CPU plugin (``pip install 'gspo[openvino]'``), compiled for latency
  at f32 precision (no bf16 or f16 arithmetic, so results stay equivalent);
* ``openvino:bf16``: the same at bf16 inference precision, where the CPU has bf16 instructions.
  Never searched for an exact result: only ``gspo optimize --precision bf16`` places ops there,
  within the accuracy budget the user states (:mod:`gspo.precision`), and only on a CPU with bf16
  instructions (:func:`backend_status`). A saved model placed there runs on any CPU OpenVINO
  runs on: without bf16 instructions at f32 (:func:`run_precision`), which computes what bf16
  approximates and so stays within the budget, said once a process;
* ``cuda``: onnxruntime's CUDA provider on device 0 (``pip install 'gspo[gpu]'`` and an NVIDIA
  GPU), TF32 off; host arrays in and out (:class:`~gspo.runtime.cuda.CudaRunner`), so a value
  crossing between the CPU and the GPU is copied. Available only when
  :func:`~gspo.runtime.cuda.gpu_status` finds a working device (checked once a process).

No backend is imported before it is asked for; a missing one is a one-line error naming the
package to install. This module is the registry (which backends exist, which run here, and a
runner of each); the OpenVINO adapter is :mod:`gspo.runtime.openvino`, the CUDA one
:mod:`gspo.runtime.cuda`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from gspo.errors import GspoError
from gspo.ir import Graph, serialize
from gspo.runtime.openvino import (
    bf16_missing,
    bf16_refusal,
    load_openvino,
    openvino_status,
    openvino_version,
)
from gspo.runtime.protocols import Runner
from gspo.runtime.session import SessionConfig, make_session

__all__ = ["BACKENDS", "REDUCED_BACKENDS", "RUNNABLE_BACKENDS", "DEFAULT_BACKEND", "backend_status", "available_backends",
           "check_backends", "load_runner", "backend_versions", "run_precision"]

log = logging.getLogger(__name__)

#: Every backend gspo knows, in the order they are preferred on a tie.
BACKENDS = ("ort", "openvino", "cuda")
DEFAULT_BACKEND = "ort"
#: Backends at reduced precision (never equivalent at fp32 tolerance), by the precision they run.
REDUCED_BACKENDS = {"openvino:bf16": "bf16"}
#: Every backend a saved placement may name.
RUNNABLE_BACKENDS = BACKENDS + tuple(REDUCED_BACKENDS)
#: gpu_status() of device 0, once a process (its probe builds a CUDA session).
_cuda_checked: dict[int, tuple[bool, str]] = {}
#: The reduced backends whose saved placement this process was told runs at f32 here (said once).
_told_f32: set[str] = set()
_told_lock = threading.Lock()


def backend_status(name: str) -> tuple[bool, str]:
    """Whether backend ``name`` can run here, and if not, why not."""
    if name == "ort":
        return True, "onnxruntime CPU"
    if name == "openvino":
        return openvino_status()
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
    refusal = bf16_refusal()
    return (False, refusal) if refusal else (True, f"{why} at bf16")


def run_precision(name: str) -> str:
    """The precision the pieces of a saved model placed on backend ``name`` run at here: the
    backend's own, except ``openvino:bf16`` where OpenVINO has no bf16 arithmetic (a CPU without
    bf16 instructions): f32, pinned, which computes what bf16 approximates, so the model's stated
    budget holds; a warning says so once a process. (A search still refuses such a backend here:
    :func:`backend_status`.)

    Raises:
        GspoError: the backend cannot run here at all (OpenVINO missing, an unknown backend, ...).
    """
    if name not in REDUCED_BACKENDS:
        ok, why = backend_status(name)
        if not ok:
            raise GspoError(f"backend {name!r} cannot run here: {why}")
        return "f32"
    ok, why = openvino_status()
    if not ok:
        raise GspoError(f"backend {name!r} cannot run here: {why}")
    missing = bf16_missing()
    if missing is None:
        return REDUCED_BACKENDS[name]
    with _told_lock:
        tell = name not in _told_f32
        _told_f32.add(name)
    if tell:
        log.warning("%s: the ops placed on %s run at f32 (exact, within the model's stated budget)", missing, name)
    return "f32"


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
            parts.append(f"{name.replace(':', '-')}-{openvino_version()}")
        elif name == "cuda":
            from gspo.runtime import cuda

            parts.append(cuda.backend_key(0))
    return "+".join(parts)


def load_runner(name: str, model: bytes | Graph, config: SessionConfig = SessionConfig(),
                keep_f32: Sequence[str] = ()) -> Runner:
    """A :class:`~gspo.runtime.protocols.Runner` of ``model`` (a graph or serialized ONNX) on backend ``name`` (threads from ``config``).
    On ``openvino:bf16``, the ops computing the values ``keep_f32`` names compute at f32 (all of
    them where the CPU has no bf16 instructions: :func:`run_precision`).

    Raises:
        BackendError: the backend refuses the model (the reason in one line).
        GspoError: the backend cannot run here.
    """
    if name == "ort":
        return make_session(model, config)
    precision = run_precision(name)
    if name == "cuda":
        from gspo.runtime.cuda import load_cuda_runner

        return load_cuda_runner(serialize(model) if isinstance(model, Graph) else model, config.intra_op_threads)
    return load_openvino(model, config.intra_op_threads, precision, keep_f32)
