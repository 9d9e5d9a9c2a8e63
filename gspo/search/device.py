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
from pathlib import Path

from gspo.cache import user_profiles_dir
from gspo.costmodel import device_description, load_profile
from gspo.costmodel.profile import Profile, ProfileError
from gspo.errors import GspoError
from gspo.runtime import runtime_version

__all__ = ["CUDA_STREAMS", "device_report", "device_streams", "newest_gpu_profile", "option_executor",
           "search_profile"]

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


def search_profile(device: str, name: str | None, force: bool, directory: Path | None = None) -> Profile:
    """The profile the search ranks candidates with on ``device`` (see the module docstring).

    Raises:
        ProfileError: missing, corrupt, for another onnxruntime (without ``force``), or, on
            ``cuda``, not a GPU profile.
    """
    if device != "cuda":
        return load_profile(name or "cpu", device_description("cpu"), runtime_version(), force=force or name is None)
    from gspo.runtime.cuda.choice import runtime_key

    where = name if name is not None else str(newest_gpu_profile(directory))
    profile = load_profile(where, None, runtime_key(), force=force)
    if not profile.device.startswith("cuda:"):
        raise ProfileError(f"--profile {where}: made for {profile.device!r}, not a GPU; "
                           "--device cuda takes a profile from `gspo calibrate --gpu NAME`")
    log.info("ranking with the GPU profile %s (%s)", where, profile.device)
    return profile


def device_streams(device: str, cores: int) -> int:
    """The stream cap when ``--max-streams`` is not given: the cores on the CPU, :data:`CUDA_STREAMS` on a GPU."""
    return CUDA_STREAMS if device == "cuda" else cores


def option_executor(device: str) -> Callable | None:
    """What a :class:`~gspo.search.trial.Trial` builds its options with on ``device`` (``None``:
    its default, the CPU executor)."""
    if device != "cuda":
        return None
    from gspo.runtime.cuda.trial import verifying_executor

    return verifying_executor


def device_report(device: str, graph=None) -> dict:
    """The report's ``device`` block: which device measured, and the versions that matter; on the
    torch runtime, the ops of ``graph`` (the chosen one) run by onnxruntime's CPU provider instead,
    and why (``cpu_fallback``)."""
    if device != "cuda":
        return {"device": "cpu", "name": device_description("cpu"), "onnxruntime": runtime_version()}
    from gspo.runtime.cuda.choice import device_block

    try:
        block = device_block()
        if block.get("runtime") == "torch" and graph is not None:
            from gspo.runtime.torchrt.convert import unsupported

            block["cpu_fallback"] = [{"node": f.node, "op": f.op_type, "reason": f.reason} for f in unsupported(graph)]
        return block
    except GspoError as e:  # the measurements stand; say what could not be read
        return {"device": "cuda", "error": str(e)}


def baseline_refusal(outcomes, label: str) -> str | None:
    """Why the option ``label`` (the unmodified piece, the original model) was rejected, if it
    was: on a device, the graph as given may itself be refused (CUDA fell back to the CPU)."""
    return next((o.rejected for o in outcomes if o.label == label and o.timing is None), None)
