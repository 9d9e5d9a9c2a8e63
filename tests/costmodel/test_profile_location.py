"""The shipped profiles are package data: an installed (not editable) gspo finds them."""

from __future__ import annotations

from pathlib import Path

import pytest

import gspo
from gspo.costmodel.profile import PROFILE_DIRS, find_profile, load_profile

PACKAGE = Path(gspo.__file__).resolve().parent


def test_the_default_profile_is_found_inside_the_package(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # no user calibration (it would be found first)
    assert PROFILE_DIRS[0].resolve() == PACKAGE / "profiles"
    assert find_profile("cpu").resolve() == PACKAGE / "profiles" / "cpu.json"
    assert load_profile("cpu", force=True).families


def test_the_package_data_includes_the_profiles_and_the_metadata_is_complete():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    assert "profiles/*.json" in project["tool"]["setuptools"]["package-data"]["gspo"]
    meta = project["project"]
    assert meta["license"] == "Apache-2.0" and meta["license-files"] == ["LICENSE"]
    assert (PACKAGE.parent / "LICENSE").read_text().strip().startswith("Apache License")
    assert meta["urls"] and any(c.startswith("Programming Language :: Python :: 3.1") for c in meta["classifiers"])
    assert "10.1145/3649329.3655683" in (PACKAGE.parent / "CITATION.cff").read_text()
