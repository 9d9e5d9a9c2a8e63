"""Calibration profiles: JSON (never pickle), versioned, keyed by device and runtime."""

from __future__ import annotations

import json
import logging
import os
import platform
import warnings
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

from gspo import __version__
from gspo.cache import user_profiles_dir
from gspo.costmodel.poly import Poly
from gspo.errors import GspoError, first_line
from gspo.outputs import atomic_write

__all__ = ["Profile", "ProfileError", "device_description", "load_profile", "save_profile", "find_profile",
           "SCHEMA", "SCHEMA_VERSION", "PROFILE_DIRS", "SHIPPED_DIR"]

log = logging.getLogger(__name__)
SCHEMA = "gspo-profile"
#: 2: convolution fits take a fifth feature (``slow_depthwise``); version-1 profiles must be recalibrated.
SCHEMA_VERSION = 2
#: The two folders profiles are found in: the profiles shipped in the package, and the user cache
#: (``--profile NAME`` looks in the user cache first: see :func:`find_profile`).
SHIPPED_DIR = Path(str(resources.files("gspo") / "profiles"))
PROFILE_DIRS = (SHIPPED_DIR, user_profiles_dir())
#: Bounds on a profile's numbers that no calibration comes near: any number's magnitude (a fit's
#: coefficients and points included), a cost in seconds, a family's factor. A profile past them
#: is refused in one line (1e300s made numpy warn of overflows at every estimate).
MAX_MAGNITUDE = 1e30
MAX_COST_S = 3600.0
MAX_FAMILY_SCALE = 1e6


class ProfileError(GspoError):
    """A missing, corrupt, foreign or mismatched profile."""


def device_description(device: str = "cpu") -> str:
    """``cpu:<model name>:<N>c`` for the CPU (or the name given for a GPU profile)."""
    if device != "cpu":
        return device
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"cpu:{name}:{os.cpu_count() or 1}c"


@dataclass(frozen=True)
class Profile:
    """A device's fitted cost model: per-family op fits, fixed costs and the corrections."""

    device: str
    runtime: str
    call_cost: float  # seconds: one session run of a trivial graph
    segment_cost: float  # seconds added per segment of a multi-stream plan
    sync_cost: float  # seconds per cross-stream event
    families: dict[str, Poly]  # log10(seconds) ~ poly(features)
    representatives: dict[str, list[tuple[float, float]]]  # family -> [(flops, seconds)]
    parallel: Poly | None  # beta_a ~ poly(parallel features)
    #: Sequential aggregate: log10(graph seconds - call) = a * log10(sum of op costs) + b.
    seq_scale: tuple[float, float] = (1.0, 0.0)
    #: Seconds per segment byte (inputs + outputs crossing a segment boundary), on top of segment_cost.
    segment_byte_cost: float = 0.0
    #: Seconds every executed op costs at least (kernel dispatch), whatever its size.
    op_overhead: float = 0.0
    #: Median seconds of the speed reference (gspo.costmodel.reference) during calibration: the
    #: profile's estimates are in these reference units. 0: measurements were not normalized.
    reference_s: float = 0.0
    #: Per op family, the factor from a single-op cost (measured alone) to the same op's share of a
    #: zoo piece's run time, fitted on calibration pieces; families not listed keep 1.
    family_scale: dict[str, float] = field(default_factory=dict)
    #: Seconds a multi-stream run costs beyond its segment DAG (handing the run to the stream
    #: threads and collecting it), added to the critical path of every schedule with 2+ streams.
    launch_cost: float = 0.0
    #: Seconds per reorder into or out of onnxruntime's blocked layout (:mod:`gspo.costmodel.layout`),
    #: fitted on the calibration pieces with the family factors; 0: not modelled.
    reorder_cost: float = 0.0
    #: Channel block of that layout on the calibrated device (8, 16; 0: none).
    layout_block: int = 0
    gspo_version: str = __version__
    meta: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        """The profile as JSON (what :func:`save_profile` writes)."""
        return {
            "schema": SCHEMA,
            "version": SCHEMA_VERSION,
            "device": self.device,
            "runtime": self.runtime,
            "gspo_version": self.gspo_version,
            "call_cost": self.call_cost,
            "segment_cost": self.segment_cost,
            "sync_cost": self.sync_cost,
            "families": {k: v.to_json() for k, v in sorted(self.families.items())},
            "representatives": {k: [list(r) for r in v] for k, v in sorted(self.representatives.items())},
            "parallel": self.parallel.to_json() if self.parallel else None,
            "seq_scale": list(self.seq_scale),
            "segment_byte_cost": self.segment_byte_cost,
            "op_overhead": self.op_overhead,
            "reference_s": self.reference_s,
            "family_scale": dict(sorted(self.family_scale.items())),
            "launch_cost": self.launch_cost,
            "reorder_cost": self.reorder_cost,
            "layout_block": self.layout_block,
            "meta": self.meta,
        }

    @classmethod
    def from_json(cls, d: dict, label: str = "profile") -> Profile:
        """The profile stored by :meth:`to_json`, its schema checked (types, required fields,
        finite numbers, costs not negative) and its estimates tried on probe features.

        Raises:
            ProfileError: one line naming ``label`` and the field that is wrong.
        """
        if not isinstance(d, dict) or d.get("schema") != SCHEMA:
            raise ProfileError(f"{label}: not a gspo profile")
        if d.get("version") != SCHEMA_VERSION:
            raise ProfileError(f"{label}: profile schema version {d.get('version')!r}, gspo reads {SCHEMA_VERSION}")
        from gspo.costmodel.schema import Fields, check_estimates, read_fields

        profile = cls(**read_fields(Fields(label), d))
        with warnings.catch_warnings(), np.errstate(over="raise", invalid="raise", divide="raise", under="ignore"):
            warnings.simplefilter("error", RuntimeWarning)
            try:
                check_estimates(profile, label)
            except (FloatingPointError, RuntimeWarning, ZeroDivisionError) as e:
                raise ProfileError(f"{label}: not a usable profile: its estimates fail ({type(e).__name__}: "
                                   f"{first_line(e, 120)})") from None
        _check_bounds(d, label)
        return profile


def _numbers(x, where: str):
    """Every number in the JSON ``x``, with the path of its field."""
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _numbers(v, f"{where}.{k}" if where else str(k))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _numbers(v, f"{where}[{i}]")
    elif isinstance(x, (int, float)) and not isinstance(x, bool):
        yield where, x


def _check_bounds(d: dict, label: str) -> None:
    """Refuse numbers no calibration gives (see :data:`MAX_MAGNITUDE`), naming the field."""
    def refuse(where: str, what: str):
        raise ProfileError(f"{label}: not a usable profile: field {where!r} is {what}")

    for where, v in _numbers({k: v for k, v in d.items() if k not in ("meta", "version")}, ""):
        if abs(v) > MAX_MAGNITUDE:
            refuse(where, f"{v:g}, beyond any calibration's numbers (at most {MAX_MAGNITUDE:g})")
    for key in ("call_cost", "segment_cost", "sync_cost", "segment_byte_cost", "op_overhead", "reference_s",
                "launch_cost", "reorder_cost"):
        if d.get(key, 0) > MAX_COST_S:
            refuse(key, f"{d[key]:g} s, more than an hour")
    for family, factor in (d.get("family_scale") or {}).items():
        if factor > MAX_FAMILY_SCALE:
            refuse(f"family_scale.{family}", f"{factor:g}, more than {MAX_FAMILY_SCALE:g}")


#: A profile file larger than this is not one (the shipped profile is under 50 KB).
MAX_PROFILE_BYTES = 64 * 2**20


def _shown(path: Path) -> str:
    """``path`` for a message (a path of thousands of characters shown by its ends)."""
    text = str(path)
    return text if len(text) <= 200 else f"{text[:100]}...{text[-80:]}"


def _read_json(path: Path):
    """The JSON in ``path``: a regular file, of a profile's size, UTF-8, parsed."""
    try:
        if not path.is_file():
            raise ProfileError(f"{path}: not a regular file" if path.exists() else f"{path}: no such file")
        if path.stat().st_size > MAX_PROFILE_BYTES:
            raise ProfileError(f"{path}: not a gspo profile (over {MAX_PROFILE_BYTES // 2**20} MB)")
        text = path.read_bytes().decode("utf-8")
    except OSError as e:
        raise ProfileError(f"{_shown(path)}: cannot read the profile ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise ProfileError(f"{path}: not a gspo profile (not UTF-8 text)") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise ProfileError(f"{path}: not a gspo profile (JSON nested too deeply)") from None
    except ValueError:
        raise ProfileError(f"{path}: not a gspo profile (not JSON)") from None


def save_profile(profile: Profile, path: str | os.PathLike, overwrite: bool = True) -> Path:
    """Write ``profile`` to ``path`` as JSON (see :func:`gspo.outputs.atomic_write`); returns the path."""
    return atomic_write(path, json.dumps(profile.to_json(), indent=1, sort_keys=True) + "\n", overwrite=overwrite)


def _exists(p: Path) -> bool:
    try:
        return p.exists()
    except OSError:  # a name too long for the file system, ...
        return False


def _declared_device(path: Path) -> str | None:
    """The device a profile file says it was made on (``None``: unreadable)."""
    try:
        data = json.loads(path.read_bytes()[:MAX_PROFILE_BYTES].decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return data.get("device") if isinstance(data, dict) and isinstance(data.get("device"), str) else None


def find_profile(name_or_path: str, device: str | None = None) -> Path:
    """A path as given, or ``NAME`` looked up as ``NAME.json`` in the user cache (what
    ``gspo calibrate`` writes), then among the profiles shipped with gspo: the first made on
    ``device`` when given, else the first found (the user's own calibration before the shipped
    profile made on another machine).

    Raises:
        ProfileError: no such profile.
    """
    p = Path(name_or_path)
    if p.suffix == ".json" or os.sep in name_or_path or _exists(p):
        return p
    found = [c for c in (user_profiles_dir() / f"{name_or_path}.json", SHIPPED_DIR / f"{name_or_path}.json")
             if _exists(c)]
    if not found:
        shown = name_or_path if len(name_or_path) <= 60 else name_or_path[:57] + "..."
        raise ProfileError(f"no profile named {shown!r} (looked in {user_profiles_dir()}, {SHIPPED_DIR})")
    return next((c for c in found if device is not None and _declared_device(c) == device), found[0])


def load_profile(name_or_path: str, device: str | None = None, runtime: str | None = None, force: bool = False) -> Profile:
    """Load a profile; one made on another device or runtime version is refused unless ``force``
    (then it is used with a warning).

    Raises:
        ProfileError: missing, unreadable, corrupt, foreign, or mismatched without ``force``.
    """
    path = find_profile(name_or_path, device)
    profile = Profile.from_json(_read_json(path), str(path))
    log.info("using the profile %s (made on %s)", path, profile.device)
    for what, mine, theirs in (("device", device, profile.device), ("onnxruntime version", runtime, profile.runtime)):
        if mine is not None and mine != theirs:
            message = f"{path}: the profile was made for {what} {theirs!r}, this is {mine!r}"
            if not force:
                raise ProfileError(message + " (use --foreign-profile to use it anyway)")
            log.warning("%s; using it anyway", message)
    return profile
