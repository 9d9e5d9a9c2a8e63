"""What the device changes in ``gspo optimize``: the cost profile the search ranks with, the
executor options are verified and timed on, the stream cap, and the report's ``device`` block.

On ``cpu`` nothing changes (the CPU profile, :class:`~gspo.runtime.CpuExecutor`, the cores). On
``cuda``: the profile named by ``--profile`` (which must be a GPU profile), else the newest
``cuda:*`` profile in the user's cache, else an error saying to calibrate one; the options run on
:func:`~gspo.runtime.cuda.trial.verifying_executor` (CUDA streams and events, TF32 off, a
fallback to the CPU refused) against the original run on the CPU.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gspo.cache import user_profiles_dir
from gspo.costmodel import device_description, load_profile
from gspo.costmodel.profile import Profile, ProfileError
from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.runtime import runtime_version
from gspo.search.report_parts import DeviceReport, Fallback

__all__ = ["CUDA_STREAMS", "CpuDevice", "CudaDevice", "Device", "device_of", "newest_gpu_profile"]

log = logging.getLogger(__name__)

#: The stream cap on a GPU unless ``--max-streams`` says otherwise (the executor's and
#: ``benchmarks/gpu_check.py``'s Nimble cap).
CUDA_STREAMS = 4


def _profile_device(path: Path) -> str | None:
    """The ``device`` a profile file declares (``None``: not a readable profile)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    device = data.get("device") if isinstance(data, dict) else None
    return device if isinstance(device, str) else None


def newest_gpu_profile(directory: Path | None = None) -> Path:
    """The most recently written ``cuda:*`` profile in ``directory`` (the user's profile cache).

    Raises:
        ProfileError: there is none (one line saying how to make one).
    """
    directory = user_profiles_dir() if directory is None else directory
    found = [p for p in sorted(directory.glob("*.json")) if (_profile_device(p) or "").startswith("cuda:")] \
        if directory.is_dir() else []
    if not found:
        raise ProfileError(f"no GPU profile in {directory}: run `gspo calibrate --gpu NAME` first "
                           "(or name one with --profile)")
    return max(found, key=lambda p: (p.stat().st_mtime_ns, p.name))


class Device(Protocol):
    """What the device changes in ``gspo optimize`` (see the module docstring)."""

    #: ``"cpu"`` or ``"cuda"``, as ``--device`` names it.
    name: str
    #: Whether the whole model and its pieces are also placed on the CPU's other backends, each
    #: option timed at the thread counts worth trying, and the final comparison's time kept for
    #: the options most likely to win there (the CPU); else the pieces' own streams are tried on
    #: the whole model (a GPU).
    places_on_backends: bool

    def profile(self, name: str | None, force: bool, directory: Path | None = None) -> Profile:
        """The profile the search ranks candidates with (``name``: ``--profile``)."""

    def executor(self) -> Callable | None:
        """What a :class:`~gspo.search.trial.Trial` builds its options with (``None``: its
        default, the CPU executor)."""

    def streams(self, cores: int) -> int:
        """The stream cap when ``--max-streams`` is not given."""

    def report(self, graph: Graph | None = None) -> DeviceReport:
        """The report's ``device`` block for the chosen ``graph``."""


@dataclass(frozen=True)
class CpuDevice:
    """The CPU: the CPU profile, :class:`~gspo.runtime.CpuExecutor`, a stream per core."""

    name: str = "cpu"
    places_on_backends: bool = True

    def profile(self, name: str | None, force: bool, directory: Path | None = None) -> Profile:
        return load_profile(name or "cpu", device_description("cpu"), runtime_version(), force=force or name is None)

    def executor(self) -> Callable | None:
        return None

    def streams(self, cores: int) -> int:
        return cores

    def report(self, graph: Graph | None = None) -> DeviceReport:
        return DeviceReport({"device": "cpu", "name": device_description("cpu"), "onnxruntime": runtime_version()})


@dataclass(frozen=True)
class CudaDevice:
    """An NVIDIA GPU through ``runtime`` (:mod:`gspo.runtime.cuda.choice`; ``None``: as chosen
    there): a GPU profile, the verifying CUDA executor, :data:`CUDA_STREAMS` streams."""

    runtime: str | None = None
    name: str = "cuda"
    places_on_backends: bool = False

    def profile(self, name: str | None, force: bool, directory: Path | None = None) -> Profile:
        """``name`` (which must be a GPU profile), else the newest ``cuda:*`` profile in the
        user's cache, else an error saying to calibrate one.

        Raises:
            ProfileError: missing, corrupt, for another runtime (without ``force``), or not a GPU profile.
        """
        from gspo.runtime.cuda.choice import runtime_key

        where = name if name is not None else str(newest_gpu_profile(directory))
        profile = load_profile(where, None, runtime_key(), force=force)
        if not profile.device.startswith("cuda:"):
            raise ProfileError(f"--profile {where}: made for {profile.device!r}, not a GPU; "
                               "--device cuda takes a profile from `gspo calibrate --gpu NAME`")
        log.info("ranking with the GPU profile %s (%s)", where, profile.device)
        return profile

    def executor(self) -> Callable | None:
        from gspo.runtime.cuda.trial import verifying_executor

        return verifying_executor

    def streams(self, cores: int) -> int:
        return CUDA_STREAMS

    def report(self, graph: Graph | None = None) -> DeviceReport:
        """Which runtime measured and the versions that matter; on the torch runtime, the ops of
        ``graph`` run by onnxruntime's CPU provider instead, and why (``cpu_fallback``)."""
        from gspo.runtime.cuda.choice import device_block

        try:
            block = device_block()
            fallback = None
            if block.get("runtime") == "torch" and graph is not None:
                from gspo.runtime.torchrt.convert import unsupported

                fallback = [Fallback(f.node, f.op_type, f.reason) for f in unsupported(graph)]
            return DeviceReport({k: v for k, v in block.items() if k != "cpu_fallback"}, fallback)
        except GspoError as e:  # the measurements stand; say what could not be read
            return DeviceReport({"device": "cuda", "error": str(e)})


def device_of(name: str, runtime: str | None = None) -> Device:
    """The device ``--device`` names (``runtime``: ``--cuda-runtime``, on ``cuda``)."""
    return CudaDevice(runtime) if name == "cuda" else CpuDevice()
