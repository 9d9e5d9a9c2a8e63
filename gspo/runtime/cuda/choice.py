"""Which runtime ``--device cuda`` runs on: onnxruntime-gpu's CUDA provider (``ort``) or PyTorch
(``torch``, :mod:`gspo.runtime.torchrt`).

``auto`` (the default) takes onnxruntime-gpu where its CUDA provider works, else torch; ``ort``
or ``torch`` forces one (``--cuda-runtime``, ``gspo.optimize(cuda_runtime=...)``, or the
environment variable ``GSPO_CUDA_RUNTIME``). Every CUDA executor of the process is made by
:func:`cuda_executor`, so ``optimize``, ``run``, ``bench``, ``calibrate --gpu`` and the deploy
API run on the same one.
"""

from __future__ import annotations

import os

from gspo.errors import GspoError, clipped
from gspo.runtime.cuda.common import CudaConfig, CudaError

__all__ = ["CUDA_RUNTIMES", "cuda_executor", "cuda_runtime", "device_block", "require_cuda", "runtime_key",
           "set_cuda_runtime"]

#: The runtimes ``--cuda-runtime`` takes.
CUDA_RUNTIMES = ("auto", "ort", "torch")
_requested: list[str] = []


def _check(name: str, where: str = "--cuda-runtime") -> str:
    """``name`` as a runtime of :data:`CUDA_RUNTIMES`, or a one-line error showing what was given
    (cut at 80 characters: a 5,000-character ``$GSPO_CUDA_RUNTIME`` was echoed in full)."""
    given, name = name, str(name).strip().lower()
    if name not in CUDA_RUNTIMES:
        raise GspoError(f"{where} takes {', '.join(CUDA_RUNTIMES)} (got {clipped(given, quote=True)})")
    return name


def set_cuda_runtime(name: str | None) -> None:
    """Ask for runtime ``name`` (``None``: back to ``GSPO_CUDA_RUNTIME`` or ``auto``)."""
    _requested[:] = [] if name is None else [_check(name)]


def requested() -> str:
    """The runtime asked for: :func:`set_cuda_runtime`'s, else ``GSPO_CUDA_RUNTIME``, else ``auto``."""
    if _requested:
        return _requested[0]
    return _check(os.environ.get("GSPO_CUDA_RUNTIME", "auto") or "auto", "GSPO_CUDA_RUNTIME")


def _ort_status(device_id: int) -> tuple[bool, str]:
    from gspo.runtime.cuda.status import gpu_status

    return gpu_status(CudaConfig(device_id=device_id))


def _torch_status(device_id: int) -> tuple[bool, str]:
    from gspo.runtime.torchrt.status import torch_status

    return torch_status(device_id)


def cuda_runtime(device_id: int = 0, option: str = "--device cuda") -> str:
    """The runtime CUDA work runs on here: ``ort`` or ``torch``.

    Raises:
        CudaError: the one asked for cannot run, or (``auto``) neither can; one line naming what
            is missing for each.
    """
    want = requested()
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


def runtime_key() -> str:
    """What a GPU profile's timings depend on besides the device: the chosen runtime's version
    (onnxruntime-gpu's as ``X.Y.Z``, as CPU profiles are keyed; torch's as ``torch-X.Y.Z``)."""
    from gspo.runtime.session import runtime_version

    try:
        chosen = cuda_runtime()
    except CudaError:  # nothing runs on CUDA here: keyed as before, by onnxruntime
        return runtime_version()
    if chosen == "ort":
        return runtime_version()
    import torch

    return f"torch-{torch.__version__}"


def require_cuda(option: str = "--device cuda") -> None:
    """Raise :class:`CudaError` (one line) unless some CUDA runtime can run here."""
    cuda_runtime(0, option)


def cuda_executor(graph, schedule=None, one_stream: bool = False, tf32: bool = False, cuda_graph: bool | None = None):
    """The CUDA executor of the chosen runtime for ``graph`` on ``schedule`` (TF32 off unless
    asked). ``cuda_graph`` (torch only; default on there): the schedule is captured once and
    replayed, Nimble's ahead-of-time scheduling, where the program allows it (else it runs
    eagerly and ``graph_refusal`` says why). Measured on an H100, eager PyTorch is bound by the
    host's launches at batch 1: its streams never overlapped (``benchmarks/gpu/gpu_check.md``)."""
    if cuda_runtime() == "ort":
        from gspo.runtime.cuda.executor import CudaExecutor

        if cuda_graph:
            raise CudaError("CUDA graph replay is the torch runtime's (--cuda-runtime torch)")
        return CudaExecutor(graph, schedule, CudaConfig(tf32=tf32), one_stream=one_stream)
    from gspo.runtime.torchrt.executor import TorchConfig, TorchExecutor

    return TorchExecutor(graph, schedule, TorchConfig(tf32=tf32, cuda_graph=cuda_graph is not False),
                         one_stream=one_stream)


def device_block(device_id: int = 0) -> dict:
    """The report's ``device`` block for the chosen runtime: which runtime, the device, the driver
    and the versions."""
    if cuda_runtime(device_id) == "ort":
        from gspo.runtime.cuda.status import device_info

        return {"runtime": "ort", **device_info(device_id)}
    from gspo.runtime.torchrt.status import torch_versions

    return torch_versions(device_id)
