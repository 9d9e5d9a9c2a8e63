"""Where gspo keeps what it measured and fitted for this user: one folder in the user's cache."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["calibration_db_path", "user_cache_dir", "user_profiles_dir"]


def user_cache_dir() -> Path:
    """gspo's folder in the user's cache: ``$XDG_CACHE_HOME/gspo``, by default ``~/.cache/gspo``."""
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gspo"


def user_profiles_dir() -> Path:
    """Where ``gspo calibrate`` writes profiles by default and ``--profile NAME`` looks after the
    profiles shipped with gspo."""
    return user_cache_dir() / "profiles"


def calibration_db_path() -> Path:
    """The calibration database measurements are cached in by default (``calibration.sqlite``)."""
    return user_cache_dir() / "calibration.sqlite"
