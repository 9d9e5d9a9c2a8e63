"""Which onnxruntime is installed: the CPU one (``gspo[cpu]``) or the CUDA one (``gspo[gpu]``).

Both distributions install the same ``onnxruntime`` module, so with both installed the files of
the one installed last overwrite the other's and the CUDA provider comes and goes with the order
of installation. gspo's extras each name one of them; this module says so in one line when none
or several are installed.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Sequence
from importlib import metadata

from gspo.errors import GspoError

__all__ = ["RUNTIME_DISTRIBUTIONS", "CPU_INSTALL", "GPU_INSTALL", "RuntimeNotInstalled", "installed_runtimes",
           "runtime_conflict", "import_onnxruntime"]

log = logging.getLogger(__name__)

#: The distributions that install the ``onnxruntime`` module (gspo's extras use the first two).
RUNTIME_DISTRIBUTIONS = ("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino", "onnxruntime-directml",
                         "onnxruntime-rocm", "onnxruntime-migraphx", "onnxruntime-qnn", "onnxruntime-training")
CPU_INSTALL = "pip install 'gspo[cpu]'"
GPU_INSTALL = "pip install 'gspo[gpu]'"


class RuntimeNotInstalled(GspoError, ImportError):
    """No onnxruntime distribution is installed (one line saying which extra to install)."""


def _is_installed(name: str) -> bool:
    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def installed_runtimes(is_installed: Callable[[str], bool] = _is_installed) -> tuple[str, ...]:
    """The distributions of :data:`RUNTIME_DISTRIBUTIONS` that are installed, in that order."""
    return tuple(name for name in RUNTIME_DISTRIBUTIONS if is_installed(name))


def runtime_conflict(installed: Sequence[str]) -> str | None:
    """Why ``installed`` (distribution names) cannot work together, or ``None``."""
    if len(installed) < 2:
        return None
    names = " and ".join(installed)
    return (f"{names} are all installed and overwrite each other's onnxruntime module: "
            f"pip uninstall -y {' '.join(installed)}, then {CPU_INSTALL} or {GPU_INSTALL}")


def import_onnxruntime(installed: Sequence[str] | None = None):
    """The ``onnxruntime`` module.

    Args:
        installed: the installed runtime distributions (default: :func:`installed_runtimes`).

    Raises:
        RuntimeNotInstalled: none is installed, in one line naming the extras.

    Several installed at once is logged as a warning here (the CPU provider usually survives it)
    and refused where the CUDA provider is asked for (:func:`gspo.runtime.cuda.gpu_status`).
    """
    installed = installed_runtimes() if installed is None else tuple(installed)
    conflict = runtime_conflict(installed)
    if conflict:
        log.warning(conflict)
    try:
        return importlib.import_module("onnxruntime")
    except ImportError as e:
        if installed:
            raise RuntimeNotInstalled(f"onnxruntime ({', '.join(installed)}) is installed but does not import: "
                                      f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        raise RuntimeNotInstalled(f"no onnxruntime is installed: {CPU_INSTALL} (or {GPU_INSTALL} for NVIDIA "
                                  "GPUs)") from None
