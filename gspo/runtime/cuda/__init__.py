"""CUDA backend: onnxruntime's CUDA provider on cuda-python streams, timed with CUDA events.

``status`` says whether CUDA can run here and what is missing, and describes the device;
``choice`` picks the runtime CUDA work runs on (onnxruntime-gpu or torch) and ``trial`` the
executor ``gspo optimize --device cuda`` verifies and times on; ``executor`` runs models on the
device (:class:`CudaRunner` for a piece between CPU pieces, :class:`CudaExecutor` for a whole
model on streams, device timing); ``common`` holds what both use (settings, errors, the
onnxruntime-gpu and cuda-python modules).
"""

from gspo.runtime.cuda.common import (
    CUDA_MAJOR,
    CudaConfig,
    CudaError,
    check,
    cuda_provider_options,
    native_handle,
)
from gspo.runtime.cuda.executor import (
    CudaExecutor,
    CudaRunner,
    PieceTime,
    load_cuda_runner,
    stream_overlap,
)
from gspo.runtime.cuda.status import (
    backend_key,
    device_name,
    gpu_status,
    require_cuda_provider,
    require_gpu,
)

__all__ = ["CUDA_MAJOR", "CudaConfig", "CudaError", "CudaExecutor", "CudaRunner", "PieceTime", "backend_key", "check",
           "cuda_provider_options", "device_name", "gpu_status", "load_cuda_runner", "native_handle",
           "require_cuda_provider", "require_gpu", "stream_overlap"]
