"""The user cache folder: one function, and every default path under it."""

from __future__ import annotations

from pathlib import Path

from gspo.cache import calibration_db_path, user_cache_dir, user_profiles_dir


def test_the_cache_folder_follows_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert user_cache_dir() == tmp_path / "gspo"
    assert user_profiles_dir() == tmp_path / "gspo" / "profiles"
    assert calibration_db_path() == tmp_path / "gspo" / "calibration.sqlite"


def test_without_xdg_cache_home_it_is_under_the_home_folder(monkeypatch, tmp_path):
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert user_cache_dir() == Path(tmp_path) / ".cache" / "gspo"


def test_profiles_and_the_calibration_database_default_to_it():
    from gspo.costmodel.profile import PROFILE_DIRS
    from gspo.search.placement import default_db_path

    assert PROFILE_DIRS[1] == user_profiles_dir()
    assert default_db_path() == calibration_db_path()
