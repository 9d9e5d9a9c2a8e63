"""Calibration profiles as files: JSON (never pickle), versioned, keyed by device and runtime,
found by name (:func:`find_profile`), read and checked (:func:`load_profile`, :func:`read_profile`)
and written (:func:`save_profile`).

The record and its schema are :mod:`gspo.costmodel.schema`'s; reading a profile also tries its
estimates (:mod:`gspo.costmodel.usable`), so a profile this module returns is one the estimator
can use.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import warnings
from importlib import resources
from pathlib import Path

import numpy as np

from gspo.cache import user_profiles_dir
from gspo.costmodel.schema import Profile, ProfileError, check_bounds
from gspo.costmodel.usable import check_estimates
from gspo.errors import first_line
from gspo.outputs import atomic_write

__all__ = ["Profile", "ProfileError", "device_description", "load_profile", "read_profile", "save_profile",
           "find_profile", "PROFILE_DIRS", "SHIPPED_DIR"]

log = logging.getLogger(__name__)
#: The two folders profiles are found in: the profiles shipped in the package, and the user cache
#: (``--profile NAME`` looks in the user cache first: see :func:`find_profile`).
SHIPPED_DIR = Path(str(resources.files("gspo") / "profiles"))
PROFILE_DIRS = (SHIPPED_DIR, user_profiles_dir())


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


def read_profile(d: dict, label: str = "profile") -> Profile:
    """The profile stored by :meth:`Profile.to_json`, its schema checked (types, required fields,
    finite numbers, costs not negative), its estimates tried on probe features
    (:func:`~gspo.costmodel.usable.check_estimates`) and its numbers within bounds
    (:func:`~gspo.costmodel.schema.check_bounds`).

    Raises:
        ProfileError: one line naming ``label`` and the field that is wrong.
    """
    profile = Profile.from_json(d, label)
    with warnings.catch_warnings(), np.errstate(over="raise", invalid="raise", divide="raise", under="ignore"):
        warnings.simplefilter("error", RuntimeWarning)
        try:
            check_estimates(profile, label)
        except (FloatingPointError, RuntimeWarning, ZeroDivisionError) as e:
            raise ProfileError(f"{label}: not a usable profile: its estimates fail ({type(e).__name__}: "
                               f"{first_line(e, 120)})") from None
    check_bounds(d, label)
    return profile


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
    profile = read_profile(_read_json(path), str(path))
    log.info("using the profile %s (made on %s)", path, profile.device)
    for what, mine, theirs in (("device", device, profile.device), ("onnxruntime version", runtime, profile.runtime)):
        if mine is not None and mine != theirs:
            message = f"{path}: the profile was made for {what} {theirs!r}, this is {mine!r}"
            if not force:
                raise ProfileError(message + " (use --foreign-profile to use it anyway)")
            log.warning("%s; using it anyway", message)
    return profile
