"""Can CUDA run here, and if not, what is missing: the checks behind ``--device cuda``.

:func:`gpu_status` checks, in order: one onnxruntime installed, with the CUDA provider;
cuda-python, for the same CUDA major; the CUDA and cuDNN libraries preloaded; a visible device;
a probe session really on the GPU. Each failure is one line saying what to install or fix.
:func:`device_name` and :func:`device_info` describe the device (for keys and reports).

What the checks read of the machine goes through names looked up at call time, so that the
stand-ins of ``tests/runtime/fake_cuda.py`` replace all of it: the modules through
:mod:`gspo.runtime.cuda.common`'s ``import_*``, and on this module ``installed_runtimes`` (the
onnxruntime distributions) and ``cuda_python_version`` (cuda-python's version).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys

from gspo.errors import GspoError, first_line
from gspo.ir import serialize
from gspo.runtime.cuda import common
from gspo.runtime.cuda.common import (
    CUDA,
    CUDA_MAJOR,
    CudaConfig,
    CudaError,
    check,
    cuda_provider_options,
)
from gspo.runtime.runtimes import GPU_INSTALL, installed_runtimes, runtime_conflict
from gspo.runtime.torchrt.status import cuda_python_version

__all__ = ["backend_key", "device_info", "device_name", "gpu_status", "require_cuda_provider", "require_gpu"]

log = logging.getLogger(__name__)


def _major(version: str) -> int | None:
    head = str(version).strip().split(".")[0]
    return int(head) if head.isdigit() else None


def _version_problem(ort, py_version: str) -> str | None:
    """The onnxruntime-gpu build's CUDA major against cuda-python's (version ``py_version``)."""
    ort_major = _major(getattr(ort, "cuda_version", "") or "")
    py_major = _major(py_version)
    if ort_major is not None and py_major is not None and ort_major != py_major:
        return (f"onnxruntime-gpu {ort.__version__} is built for CUDA {ort_major} but cuda-python "
                f"{py_version} is for CUDA {py_major}: install matching ones ({GPU_INSTALL}: CUDA {CUDA_MAJOR})")
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
        common.import_cudart()
        utils = common.import_cuda_utils()
    except ImportError:
        return f"cuda-python is not installed: {GPU_INSTALL}"
    if not hasattr(utils, "get_cuda_native_handle"):
        return f"cuda-python is older than 12.9.1 (no cuda.bindings.utils.get_cuda_native_handle): {GPU_INSTALL}"
    return None


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
    cudart = common.import_cudart()
    try:
        err, count = cudart.cudaGetDeviceCount()
    except Exception as e:
        return f"the CUDA runtime cannot start ({first_line(e)})"
    if err != cudart.cudaError_t.cudaSuccess:
        derr, driver = cudart.cudaDriverGetVersion()
        has = f"; the NVIDIA driver supports CUDA {driver // 1000}.{driver % 1000 // 10}" if derr == cudart.cudaError_t.cudaSuccess and driver else ""
        return f"no usable CUDA device ({common.error_text(cudart, err)}{has}; CUDA {CUDA_MAJOR} is needed)"
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
        ort = common.import_ort()
    except GspoError as e:
        return False, str(e)
    problem = _runtime_problem(ort) or _cuda_python_problem()
    if problem is None:
        problem = _version_problem(ort, cuda_python_version())
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
    name = check(common.import_cudart().cudaGetDeviceProperties(device_id), "cudaGetDeviceProperties").name
    return (name.decode(errors="replace") if isinstance(name, bytes) else str(name)).rstrip("\x00").strip()


def backend_key(device_id: int = 0) -> str:
    """What measurements on the CUDA backend depend on: onnxruntime-gpu's version and the device."""
    return f"cuda-{common.import_ort().__version__}-{device_name(device_id)}"


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
