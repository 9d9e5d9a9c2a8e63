"""Which runtime ``--device cuda`` runs on: onnxruntime-gpu's CUDA provider (``ort``) or PyTorch
(``torch``, :mod:`gspo.runtime.torchrt`).

``auto`` (the default) takes onnxruntime-gpu where its CUDA provider works, else torch; ``ort``
or ``torch`` forces one. What is asked for is a value the caller passes (``--cuda-runtime``,
``gspo.optimize(cuda_runtime=...)``, ``gspo.InferenceSession(cuda_runtime=...)``, else the
environment variable ``GSPO_CUDA_RUNTIME``, else ``auto``: :func:`requested_runtime`); nothing
in the process remembers it. :func:`cuda_runtime` turns it into the runtime that runs here, and
:func:`cuda_executor` makes the executor of a chosen runtime, so that ``optimize`` (through
:class:`~gspo.search.device.CudaDevice`), ``run``, ``bench``, ``calibrate --gpu`` and the deploy
API each run on the runtime they were given.
"""

from __future__ import annotations

import os

from gspo.errors import GspoError, clipped
from gspo.runtime.cuda.common import CudaConfig, CudaError

__all__ = ["CUDA_RUNTIMES", "cuda_executor", "cuda_runtime", "device_block", "require_cuda", "requested_runtime",
           "runtime_key"]

#: The runtimes ``--cuda-runtime`` takes.
CUDA_RUNTIMES = ("auto", "ort", "torch")
#: The runtimes that run (what :func:`cuda_runtime` chooses among).
CHOSEN = ("ort", "torch")


def _check(name: str, where: str = "--cuda-runtime") -> str:
    """``name`` as a runtime of :data:`CUDA_RUNTIMES`, or a one-line error showing what was given
    (cut at 80 characters: a 5,000-character ``$GSPO_CUDA_RUNTIME`` was echoed in full)."""
    given, name = name, str(name).strip().lower()
    if name not in CUDA_RUNTIMES:
        raise GspoError(f"{where} takes {', '.join(CUDA_RUNTIMES)} (got {clipped(given, quote=True)})")
    return name


def requested_runtime(name: str | None = None) -> str:
    """The runtime asked for: ``name`` (``--cuda-runtime``), else ``$GSPO_CUDA_RUNTIME``, else
    ``auto``; checked (``auto``, ``ort`` or ``torch``).

    Raises:
        GspoError: another name (one line naming where it came from).
    """
    if name is not None:
        return _check(name)
    return _check(os.environ.get("GSPO_CUDA_RUNTIME", "auto") or "auto", "GSPO_CUDA_RUNTIME")


def _ort_status(device_id: int) -> tuple[bool, str]:
    from gspo.runtime.cuda.status import gpu_status

    return gpu_status(CudaConfig(device_id=device_id))


def _torch_status(device_id: int) -> tuple[bool, str]:
    from gspo.runtime.torchrt.status import torch_status

    return torch_status(device_id)


def cuda_runtime(runtime: str | None = None, device_id: int = 0, option: str = "--device cuda") -> str:
    """The runtime CUDA work runs on here, ``ort`` or ``torch``, for ``runtime`` asked for
    (:func:`requested_runtime`: ``None`` is ``$GSPO_CUDA_RUNTIME`` or ``auto``).

    Raises:
        CudaError: the one asked for cannot run, or (``auto``) neither can; one line naming what
            is missing for each.
    """
    want = requested_runtime(runtime)
    if want in ("auto", "ort"):
        ok, why_ort = _ort_status(device_id)
        if ok:
            return "ort"
        if want == "ort":
            raise CudaError(f"{option} --cuda-runtime ort: {why_ort}")
    ok, why_torch = _torch_status(device_id)
    if ok:
        return "torch"
    if want == "torch":
        raise CudaError(f"{option} --cuda-runtime torch: {why_torch}")
    raise CudaError(f"{option}: no CUDA runtime works here (onnxruntime: {why_ort}; torch: {why_torch})")


def _chosen(runtime: str | None) -> str:
    """``runtime`` when it names one that runs (already chosen), else the one chosen for it here."""
    return runtime if runtime in CHOSEN else cuda_runtime(runtime)


def runtime_key(runtime: str | None = None) -> str:
    """What a GPU profile's timings depend on besides the device: the version of ``runtime``
    (``ort`` or ``torch`` as chosen; a request is chosen first, :func:`cuda_runtime`):
    onnxruntime-gpu's as ``X.Y.Z``, as CPU profiles are keyed; torch's as ``torch-X.Y.Z``."""
    from gspo.runtime.session import runtime_version

    try:
        chosen = _chosen(runtime)
    except CudaError:  # nothing runs on CUDA here: keyed as before, by onnxruntime
        return runtime_version()
    if chosen == "ort":
        return runtime_version()
    import torch

    return f"torch-{torch.__version__}"


def require_cuda(runtime: str | None = None, option: str = "--device cuda") -> str:
    """The runtime chosen for ``runtime`` asked for (:func:`cuda_runtime`), so that what is
    missing is said (one line, :class:`CudaError`) before anything else is built."""
    return cuda_runtime(runtime, 0, option)


def cuda_executor(graph, schedule=None, *, runtime: str | None, one_stream: bool = False, tf32: bool = False,
                  cuda_graph: bool | None = None):
    """The CUDA executor of ``runtime`` (``ort`` or ``torch``; a request is chosen first,
    :func:`cuda_runtime`) for ``graph`` on ``schedule`` (TF32 off unless asked). ``cuda_graph``
    (torch only; default on there): the schedule is captured once and replayed, Nimble's
    ahead-of-time scheduling, where the program allows it (else it runs eagerly and
    ``graph_refusal`` says why). Measured on an H100, eager PyTorch is bound by the host's
    launches at batch 1: its streams never overlapped (``benchmarks/gpu/gpu_check.md``)."""
    if _chosen(runtime) == "ort":
        from gspo.runtime.cuda.executor import CudaExecutor

        if cuda_graph:
            raise CudaError("CUDA graph replay is the torch runtime's (--cuda-runtime torch)")
        return CudaExecutor(graph, schedule, CudaConfig(tf32=tf32), one_stream=one_stream)
    from gspo.runtime.torchrt.executor import TorchConfig, TorchExecutor

    return TorchExecutor(graph, schedule, TorchConfig(tf32=tf32, cuda_graph=cuda_graph is not False),
                         one_stream=one_stream)


def device_block(runtime: str | None = None, device_id: int = 0) -> dict:
    """The report's ``device`` block for ``runtime`` (as chosen; a request is chosen first): which
    runtime, the device, the driver and the versions."""
    if (runtime if runtime in CHOSEN else cuda_runtime(runtime, device_id)) == "ort":
        from gspo.runtime.cuda.status import device_info

        return {"runtime": "ort", **device_info(device_id)}
    from gspo.runtime.torchrt.status import torch_versions

    return torch_versions(device_id)
