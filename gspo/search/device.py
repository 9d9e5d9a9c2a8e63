"""What the device changes in ``gspo optimize``: the cost profile the search ranks with, the
executor options are verified and timed on, the stream cap, which whole-model options the final
comparison measures (and the time it keeps for them), and the report's ``machine`` and ``device``
block.

On ``cpu`` nothing changes (the CPU profile, :class:`~gspo.runtime.CpuExecutor`, the cores; the
whole model and its pieces also placed on the CPU's other backends and tried at the thread counts
worth trying). On ``cuda``: the profile named by ``--profile`` (which must be a GPU profile), else
the newest ``cuda:*`` profile in the user's cache, else an error saying to calibrate one; the
options run on :func:`~gspo.runtime.cuda.trial.verifying_executor` (CUDA streams and events, TF32
off, a fallback to the CPU refused) against the original run on the CPU, on the device's CUDA
runtime (``--cuda-runtime``, else ``$GSPO_CUDA_RUNTIME``, else ``auto``; chosen once per device,
:func:`~gspo.runtime.cuda.choice.cuda_runtime`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, partial
from pathlib import Path
from typing import Protocol

from gspo.cache import user_profiles_dir
from gspo.costmodel import device_description, load_profile
from gspo.costmodel.profile import Profile, ProfileError
from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.runtime import runtime_version
from gspo.search.candidate import Candidate, distinct
from gspo.search.report_parts import DeviceReport, Fallback, PlacementReport
from gspo.search.threads import thread_options
from gspo.timing import Deadline

__all__ = ["CUDA_STREAMS", "CpuDevice", "CudaDevice", "Device", "Placer", "device_of", "newest_gpu_profile"]

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


#: What the driver places the whole model and its pieces on the CPU's other backends with: the
#: pool given joined with the placed options, in order of promise, and what the placement measured.
Placer = Callable[[list[Candidate]], tuple[list[Candidate], PlacementReport]]


class Device(Protocol):
    """What the device changes in ``gspo optimize`` (see the module docstring)."""

    #: ``"cpu"`` or ``"cuda"``, as ``--device`` names it.
    name: str

    @property
    def machine(self) -> str:
        """The report's ``machine``: what measured (``cpu:<model>:<N>c``, ``cuda:<GPU name>``)."""

    def profile(self, name: str | None, force: bool, directory: Path | None = None) -> Profile:
        """The profile the search ranks candidates with (``name``: ``--profile``)."""

    def executor(self) -> Callable | None:
        """What a :class:`~gspo.search.trial.Trial` builds its options with (``None``: its
        default, the CPU executor)."""

    def streams(self, cores: int) -> int:
        """The stream cap when ``--max-streams`` is not given."""

    def final_reserve(self, estimate: Callable[[], float]) -> float:
        """Seconds to keep for the final comparison (:meth:`~gspo.search.budget.Timebox.reserve_final`;
        0: its share of the budget); ``estimate()``: what measuring the options most likely to
        win on the CPU takes."""

    def whole_model_options(self, options: list[Candidate], placed: Placer,
                            deadline: Deadline) -> tuple[list[Candidate], PlacementReport]:
        """The final comparison's pool from the whole-model ``options`` (``placed``: the driver's
        placement on the CPU's backends, called only where the device places), and the report's
        ``placement`` block; variants made once ``deadline`` has passed are none."""

    def report(self, graph: Graph | None = None) -> DeviceReport:
        """The report's ``device`` block for the chosen ``graph``."""


@dataclass(frozen=True)
class CpuDevice:
    """The CPU: the CPU profile, :class:`~gspo.runtime.CpuExecutor`, a stream per core; the whole
    model and its pieces also placed on the other backends and each option timed at the thread
    counts worth trying, with the final comparison's time kept for the options most likely to win."""

    name: str = "cpu"

    @property
    def machine(self) -> str:
        """``cpu:<model name>:<N>c`` (:func:`~gspo.costmodel.device_description`)."""
        return device_description("cpu")

    def profile(self, name: str | None, force: bool, directory: Path | None = None) -> Profile:
        return load_profile(name or "cpu", device_description("cpu"), runtime_version(), force=force or name is None)

    def executor(self) -> Callable | None:
        return None

    def streams(self, cores: int) -> int:
        return cores

    def final_reserve(self, estimate: Callable[[], float]) -> float:
        return estimate()

    def whole_model_options(self, options: list[Candidate], placed: Placer,
                            deadline: Deadline) -> tuple[list[Candidate], PlacementReport]:
        """``options`` and the placed ones (by promise), and each at the CPU backends' thread counts."""
        pool, placement = placed(options)
        return distinct(pool + thread_options(pool, deadline)), placement

    def report(self, graph: Graph | None = None) -> DeviceReport:
        return DeviceReport({"device": "cpu", "name": self.machine, "onnxruntime": runtime_version()})


@dataclass(frozen=True)
class CudaDevice:
    """An NVIDIA GPU through ``runtime`` as asked for (``auto``, ``ort`` or ``torch``; ``None``:
    ``$GSPO_CUDA_RUNTIME``, else ``auto``, read once, when the device is made): a GPU profile,
    the verifying CUDA executor on the runtime chosen for it (:attr:`chosen`), :data:`CUDA_STREAMS`
    streams; the whole model runs on the GPU (no placement on the CPU's backends, no thread
    counts, no time kept beyond the final comparison's share).

    Raises:
        GspoError: ``runtime`` is not one of ``auto``, ``ort``, ``torch``.
    """

    runtime: str | None = None
    name: str = "cuda"

    def __post_init__(self):
        from gspo.runtime.cuda.choice import requested_runtime

        object.__setattr__(self, "runtime", requested_runtime(self.runtime))

    @cached_property
    def chosen(self) -> str:
        """The runtime that runs here for :attr:`runtime` (``ort`` or ``torch``), chosen once.

        Raises:
            CudaError: none that was asked for runs here (one line naming what is missing).
        """
        from gspo.runtime.cuda.choice import cuda_runtime

        return cuda_runtime(self.runtime)

    @cached_property
    def _block(self) -> dict:
        """The chosen runtime's device block (what could not be read: ``error``), read once."""
        from gspo.runtime.cuda.choice import device_block

        try:
            return device_block(self.chosen)
        except GspoError as e:  # the measurements stand; say what could not be read
            return {"device": "cuda", "error": str(e)}

    @property
    def machine(self) -> str:
        """``cuda:<the GPU's name>`` as the chosen runtime reads it (``cuda``: it could not)."""
        name = self._block.get("name")
        return f"cuda:{name}" if name else "cuda"

    def profile(self, name: str | None, force: bool, directory: Path | None = None) -> Profile:
        """``name`` (which must be a GPU profile), else the newest ``cuda:*`` profile in the
        user's cache, else an error saying to calibrate one; keyed by the chosen runtime.

        Raises:
            ProfileError: missing, corrupt, for another runtime (without ``force``), or not a GPU profile.
        """
        from gspo.runtime.cuda.choice import runtime_key

        where = name if name is not None else str(newest_gpu_profile(directory))
        profile = load_profile(where, None, runtime_key(self.chosen), force=force)
        if not profile.device.startswith("cuda:"):
            raise ProfileError(f"--profile {where}: made for {profile.device!r}, not a GPU; "
                               "--device cuda takes a profile from `gspo calibrate --gpu NAME`")
        log.info("ranking with the GPU profile %s (%s)", where, profile.device)
        return profile

    def executor(self) -> Callable | None:
        """:func:`~gspo.runtime.cuda.trial.verifying_executor` on the chosen runtime."""
        from gspo.runtime.cuda.trial import verifying_executor

        return partial(verifying_executor, runtime=self.chosen)

    def streams(self, cores: int) -> int:
        return CUDA_STREAMS

    def final_reserve(self, estimate: Callable[[], float]) -> float:
        return 0.0

    def whole_model_options(self, options: list[Candidate], placed: Placer,
                            deadline: Deadline) -> tuple[list[Candidate], PlacementReport]:
        """``options`` as they are, all on the GPU."""
        return options, PlacementReport([self.name])

    def report(self, graph: Graph | None = None) -> DeviceReport:
        """Which runtime measured and the versions that matter; on the torch runtime, the ops of
        ``graph`` run by onnxruntime's CPU provider instead, and why (``cpu_fallback``)."""
        block = self._block
        fallback = None
        if block.get("runtime") == "torch" and graph is not None:
            from gspo.runtime.torchrt.convert import unsupported

            try:
                fallback = [Fallback(f.node, f.op_type, f.reason) for f in unsupported(graph)]
            except GspoError as e:  # the measurements stand; say what could not be read
                return DeviceReport({"device": "cuda", "error": str(e)})
        return DeviceReport({k: v for k, v in block.items() if k != "cpu_fallback"}, fallback)


def device_of(name: str, runtime: str | None = None) -> Device:
    """The device ``--device`` names (``runtime``: ``--cuda-runtime``, on ``cuda``)."""
    return CudaDevice(runtime) if name == "cuda" else CpuDevice()
