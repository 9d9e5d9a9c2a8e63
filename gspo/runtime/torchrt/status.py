"""Can the torch runtime run on a CUDA device here, and if not, what is missing (one line).

Checked in order: torch importable; built with CUDA; a CUDA device visible; cuda-python (which
makes the streams) importable and for the same CUDA major as torch (``torch.version.cuda``).
"""

from __future__ import annotations

from importlib import metadata

__all__ = ["TORCH_INSTALL", "cuda_python_version", "torch_status", "torch_versions"]

#: How to get a torch that runs on the GPU (the CPU build of the tests is ``torch==2.13.0``).
TORCH_INSTALL = "pip install 'gspo[torch]' with a CUDA build of torch, and cuda-python of the same CUDA major"


def cuda_python_version() -> str:
    """The installed cuda-python (cuda-bindings) version, or ''."""
    for name in ("cuda-bindings", "cuda-python"):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return ""


def _major(version: str | None) -> int | None:
    head = str(version or "").strip().split(".")[0]
    return int(head) if head.isdigit() else None


def torch_status(device_id: int = 0) -> tuple[bool, str]:
    """Whether the torch runtime can run on CUDA device ``device_id``, and if not, why."""
    try:
        import torch
    except ImportError:
        return False, f"PyTorch is not installed ({TORCH_INSTALL})"
    if not torch.version.cuda:
        return False, f"torch {torch.__version__} is built without CUDA ({TORCH_INSTALL})"
    if not torch.cuda.is_available():
        return False, f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device"
    count = torch.cuda.device_count()
    if not 0 <= device_id < count:
        return False, f"CUDA device {device_id} does not exist ({count} visible)"
    py = cuda_python_version()
    try:
        from cuda.bindings import runtime  # noqa: F401
    except ImportError:
        return False, (f"cuda-python is not installed (the torch runtime makes its streams with it): "
                       f"pip install 'cuda-python>={_major(torch.version.cuda)},<{(_major(torch.version.cuda) or 0) + 1}'")
    if _major(py) != _major(torch.version.cuda):
        return False, (f"cuda-python {py} is for CUDA {_major(py)} but torch {torch.__version__} is built for CUDA "
                       f"{torch.version.cuda}: install cuda-python {_major(torch.version.cuda)}.x")
    return True, f"CUDA device {device_id} ({torch.cuda.get_device_name(device_id)}) with torch {torch.__version__}"


def _driver_version() -> str | None:
    """The NVIDIA driver's version, as the kernel module reports it (Linux)."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as f:
            words = f.readline().split()
    except OSError:
        return None
    return next((w for w in words if w[:1].isdigit() and "." in w), None)


def torch_versions(device_id: int = 0) -> dict:
    """The report's device block for the torch runtime: the device, the driver's CUDA, torch's
    CUDA and cuDNN, and the torch and cuda-python versions."""
    import torch

    info: dict = {"device": "cuda", "runtime": "torch", "device_id": device_id, "torch": torch.__version__,
                  "torch_cuda": torch.version.cuda, "cudnn": None, "cuda_python": cuda_python_version() or None}
    try:
        info["cudnn"] = str(torch.backends.cudnn.version())
        props = torch.cuda.get_device_properties(device_id)
        info["name"] = props.name
        info["compute_capability"] = f"{props.major}.{props.minor}"
        from cuda.bindings import runtime as cudart

        err, driver = cudart.cudaDriverGetVersion()
        info["driver_cuda"] = f"{driver // 1000}.{driver % 1000 // 10}" if int(err) == 0 else None
        info["driver"] = _driver_version()
    except Exception as e:  # the measurements stand; say what could not be read
        info["error"] = str(e).splitlines()[0] if str(e) else type(e).__name__
    return info
