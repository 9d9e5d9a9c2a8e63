"""What the CUDA status checks and the CUDA executor share: the settings, the error, the
onnxruntime-gpu and cuda-python modules (imported when first used), the checking of
cuda-python's results and the CUDA provider's options.

Every call into onnxruntime-gpu or cuda-python goes through :func:`import_ort`,
:func:`import_cudart` and :func:`import_cuda_utils`, looked up on this module at call time, so
that the stand-ins of ``tests/runtime/fake_cuda.py`` replace them in one place.
"""

from __future__ import annotations

from dataclasses import dataclass

from gspo.errors import GspoError
from gspo.runtime.runtimes import import_onnxruntime

__all__ = ["CUDA", "CUDA_MAJOR", "CudaConfig", "CudaError", "check", "cuda_provider_options", "error_text",
           "import_cuda_utils", "import_cudart", "import_ort", "native_handle"]

#: The CUDA major of the onnxruntime-gpu and cuda-python that ``gspo[gpu]`` installs.
CUDA_MAJOR = 12
#: onnxruntime's name of its CUDA provider.
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


def import_ort():
    """The ``onnxruntime`` module (the onnxruntime-gpu build where CUDA can run)."""
    return import_onnxruntime()


def import_cudart():
    """cuda-python's runtime API, ``cuda.bindings.runtime``."""
    from cuda.bindings import runtime

    return runtime


def import_cuda_utils():
    """cuda-python's ``cuda.bindings.utils`` (``get_cuda_native_handle``)."""
    from cuda.bindings import utils

    return utils


def native_handle(obj) -> int:
    """The address of a cuda-python object (a stream) as an int, the documented way."""
    return int(import_cuda_utils().get_cuda_native_handle(obj))


def error_text(cudart, err) -> str:
    """A cuda-python error code's name and, where the runtime gives it, its description."""
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
    cudart = import_cudart()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != cudart.cudaError_t.cudaSuccess:
        raise CudaError(f"{what} failed ({error_text(cudart, err)})")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def cuda_provider_options(stream: int | None, config: CudaConfig) -> dict[str, str]:
    """The CUDA provider's options for a session on stream handle ``stream`` (None: its own):
    the device and TF32 from ``config``."""
    options = {"device_id": str(config.device_id), "use_tf32": "1" if config.tf32 else "0"}
    if stream is not None:
        options.update(user_compute_stream=str(stream), has_user_compute_stream="1")
    return options
