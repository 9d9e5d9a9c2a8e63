"""What ``gspo optimize --device cuda`` needs of the device: the executor its options are verified
and timed on (TF32 off, fallback to the CPU refused), and a description of the device for the report.

Verification compares these executors' outputs with the original run by onnxruntime's CPU
provider; timing goes through :func:`gspo.runtime.bench.timed_runner`, which uses the
executor's own CUDA-event timing (inputs uploaded once, no host copies counted).
"""

from __future__ import annotations

import logging

from gspo.errors import GspoError, first_line
from gspo.ir import Graph
from gspo.runtime.cuda import common
from gspo.runtime.cuda.common import CudaConfig, check
from gspo.runtime.cuda.status import device_name
from gspo.runtime.protocols import Executor
from gspo.runtime.torchrt.status import cuda_python_version
from gspo.streams import Placement, Schedule

__all__ = ["VERIFY_CONFIG", "device_info", "verifying_executor"]

log = logging.getLogger(__name__)

#: Options are verified against the CPU and timed with TF32 off: the outputs stay fp32.
VERIFY_CONFIG = CudaConfig(tf32=False)


def verifying_executor(graph: Graph, schedule: Schedule | None, placement: Placement | None = None,
                       settings=None) -> Executor:
    """The CUDA executor an option of ``gspo optimize --device cuda`` is verified and timed on:
    ``schedule`` on CUDA streams (``None`` or one stream: one session), TF32 off. A session that
    onnxruntime puts on the CPU is refused (:class:`~gspo.runtime.cuda.CudaError`).

    Raises:
        GspoError: a placement on another backend (on the GPU the whole model runs there), a
            thread setting (one of the CPU backends'), or CUDA refused the option.
    """
    if placement is not None and not placement.is_default:
        raise GspoError("a placement (backend per op) runs on the cpu device; on cuda the whole model runs on the GPU")
    if settings is not None and not settings.is_default:
        raise GspoError("thread settings (gspo.settings) apply to the cpu backends, not to cuda")
    from gspo.runtime.cuda.choice import cuda_executor

    ex = cuda_executor(graph, schedule if schedule is not None and schedule.num_streams > 1 else None,
                       tf32=VERIFY_CONFIG.tf32)
    for k, fallback in getattr(ex, "fallbacks", ()):
        log.warning("on the CPU (onnxruntime) in segment %d of %s: %s", k, graph.name, fallback)
    return ex


def _version(value: int | None) -> str | None:
    """CUDA's encoded version (1000 * major + 10 * minor) as ``major.minor``."""
    return None if not value else f"{value // 1000}.{value % 1000 // 10}"


def _cudnn_version(ort) -> str | None:
    """The cuDNN version onnxruntime-gpu was built for, where its package info says it."""
    try:
        from importlib import import_module

        info = import_module(f"{ort.__name__}.capi.build_and_package_info")
    except (ImportError, AttributeError):
        info = None
    return getattr(ort, "cudnn_version", None) or getattr(info, "cudnn_version", None)


def device_info(device_id: int = 0) -> dict:
    """The device that measured: its name, the driver's and the runtime's CUDA versions, the
    cuDNN version onnxruntime-gpu was built for, and the onnxruntime-gpu and cuda-python versions
    (``None`` where the runtime does not say; ``error`` when a query failed)."""
    ort, cudart = common.import_ort(), common.import_cudart()
    info: dict = {"device": "cuda", "device_id": device_id, "onnxruntime_gpu": getattr(ort, "__version__", None),
                  "onnxruntime_build_cuda": getattr(ort, "cuda_version", None), "cudnn": _cudnn_version(ort),
                  "cuda_python": cuda_python_version() or None}
    try:
        info["name"] = device_name(device_id)
        info["driver_cuda"] = _version(check(cudart.cudaDriverGetVersion(), "cudaDriverGetVersion"))
        info["runtime_cuda"] = _version(check(cudart.cudaRuntimeGetVersion(), "cudaRuntimeGetVersion"))
    except (GspoError, AttributeError) as e:
        info["error"] = first_line(e)
    return info
