"""Which profile a name finds, and profiles whose numbers no calibration gives (issue 42, cases 13,
12 and 14): the user's own calibration is found before the shipped profile, for this device, and
the lookup says which it used; a profile of 1e300s is one line, never numpy's warnings; a name
too long for the file system is one line."""

from __future__ import annotations

import json
import logging
import warnings

import pytest

from gspo.costmodel.profile import PROFILE_DIRS, find_profile, load_profile, read_profile
from gspo.costmodel.schema import Profile, ProfileError
from gspo.runtime import runtime_version

SHIPPED = PROFILE_DIRS[0] / "cpu.json"


@pytest.fixture
def cache(monkeypatch, tmp_path):
    """An empty user cache of its own (``$XDG_CACHE_HOME``); its profiles folder."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    folder = tmp_path / "cache" / "gspo" / "profiles"
    folder.mkdir(parents=True)
    return folder


def _calibrated(folder, device, name="cpu"):
    """The shipped profile relabelled as calibrated on ``device``, saved as the user's ``name``."""
    data = json.loads(SHIPPED.read_text())
    data.update(device=device, runtime=runtime_version())
    path = folder / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def test_the_users_calibration_is_found_before_the_shipped_profile(cache, caplog):
    """The issue's case: `gspo calibrate --device cpu` wrote the user's cpu.json, and the default
    lookup found the shipped Xeon profile first (and warned that it was foreign)."""
    from gspo.costmodel import device_description
    from gspo.search.device import CpuDevice

    here = device_description("cpu")
    mine = _calibrated(cache, here)
    assert find_profile("cpu", here) == mine
    with caplog.at_level(logging.INFO):
        profile = CpuDevice().profile(None, False)
    assert profile.device == here
    messages = [r.getMessage() for r in caplog.records]
    assert any(str(mine) in m and "using the profile" in m for m in messages), messages
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_user_profile_of_another_device_does_not_hide_one_of_this_device(cache):
    here = json.loads(SHIPPED.read_text())["device"]  # the shipped profile's device, as if it were this one
    _calibrated(cache, "cpu:Another CPU:64c")
    assert find_profile("cpu", here) == SHIPPED
    assert find_profile("cpu", "cpu:a third CPU:8c") == cache / "cpu.json"  # none fits: the user's first
    assert find_profile("cpu") == cache / "cpu.json"


def test_without_a_user_calibration_the_shipped_profile_is_used(cache):
    assert find_profile("cpu").resolve() == SHIPPED.resolve()


def test_a_name_too_long_for_the_file_system_is_one_line(cache):
    for name in ("a" * 256, "/".join(["d" * 100] * 50) + ".json"):
        with pytest.raises(ProfileError) as e:
            load_profile(name)
        assert "\n" not in str(e.value) and len(str(e.value)) < 400


def _with(path, **changes):
    data = json.loads(SHIPPED.read_text())
    fam = next(k for k, v in data["families"].items() if v.get("local"))
    for key, value in changes.items():
        if key == "points":
            data["families"][fam]["local"]["points"][0][0] = value
        elif key == "family_scale":
            data["family_scale"] = {k: value for k in data["family_scale"]}
        else:
            data[key] = value
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("changes", [dict(points=1e300), dict(call_cost=1e300), dict(segment_byte_cost=1e300),
                                     dict(family_scale=1e300), dict(points=-1e300)])
def test_a_profile_of_absurd_numbers_is_one_line_without_numpys_warnings(tmp_path, changes):
    path = _with(tmp_path / "p.json", **changes)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy RuntimeWarning fails the test
        with pytest.raises(ProfileError) as e:
            load_profile(str(path), force=True)
    assert "not a usable profile" in str(e.value) and "\n" not in str(e.value)


def test_the_shipped_profile_passes_the_bounds():
    data = json.loads(SHIPPED.read_text())
    assert read_profile(data).families


def test_reading_the_record_runs_no_estimate(monkeypatch):
    """The schema reads a profile's data alone; the estimates are tried when it is read as a file."""
    import gspo.costmodel.estimate as estimate

    def refused(*args, **kwargs):
        raise AssertionError("the estimator ran")

    monkeypatch.setattr(estimate.CostModel, "cost", refused)
    data = json.loads(SHIPPED.read_text())
    assert json.dumps(Profile.from_json(data).to_json(), sort_keys=True) == json.dumps(data, sort_keys=True)
    with pytest.raises(AssertionError, match="the estimator ran"):
        read_profile(data)
