"""A profile's contents are checked when it is loaded: one line naming the file and the field
for anything that would crash gspo or make its estimates meaningless."""

from __future__ import annotations

import copy
import json
import math

import pytest
from click.testing import CliRunner

from gspo import ir
from gspo.cli import cli
from gspo.costmodel import CostModel, ProfileError, load_profile
from gspo.costmodel.profile import PROFILE_DIRS
from tests.helpers import branchy, one_line_error

SHIPPED = json.loads((PROFILE_DIRS[0] / "cpu.json").read_text())


def _write(tmp_path, data, name="p.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return str(path)


def _with(change) -> dict:
    d = copy.deepcopy(SHIPPED)
    change(d)
    return d


def _set(*path_and_value):
    *path, value = path_and_value

    def change(d):
        for key in path[:-1]:
            d = d[key]
        d[path[-1]] = value
    return change


def test_the_shipped_profile_loads_with_its_negative_coefficients_and_gives_positive_estimates():
    assert any(c < 0 for fit in SHIPPED["families"].values() for c in fit["coef"])
    profile = load_profile("cpu", force=True)
    assert json.dumps(profile.to_json(), sort_keys=True) == json.dumps(SHIPPED, sort_keys=True)
    assert 0 < CostModel(profile).cost(branchy()) < 1


@pytest.mark.parametrize("change, field, says", [
    (_set("families", "conv"), "families", "must be an object (got a string)"),
    (_set("families", "conv", "x"), "families.conv", "must be an object (got a string)"),
    (_set("call_cost", "0.1"), "call_cost", "must be a number (got a string)"),
    (_set("call_cost", -1.0), "call_cost", "must be at least 0"),
    (_set("family_scale", "matmul", -0.9), "family_scale.matmul", "must be at least 0"),
    (_set("representatives", "conv", 0, [24624.0, -1e-3]), "representatives.conv[0][1]", "must be at least 0"),
    (_set("families", "conv", "coef", 0, math.nan), "families.conv.coef[0]", "must be a finite number (got nan)"),
    (_set("parallel", "intercept", math.inf), "parallel.intercept", "must be a finite number (got inf)"),
    (_set("families", "matmul", "powers", 0, [1000000, 0, 0, 0]), "families.matmul.powers[0][0]", "must be in [0, 4]"),
    (_set("families", "matmul", "powers", 0, [1, 0]), "families.matmul.powers[0]", "must have 4 items"),
    (_set("families", "matmul", "coef", [1.0]), "families.matmul.coef", "must have"),
    (_set("families", "pool", "scale", 0, 0.0), "families.pool.scale[0]", "must be above 0"),
    (_set("families", "norm", "local", "bandwidth", -1.0), "families.norm.local.bandwidth", "must be above 0"),
    (_set("parallel", "bounds", 0, [3.0, 1.0]), "parallel.bounds", "low end first"),
    (_set("layout_block", 1e9), "layout_block", "must be an integer"),
    (_set("device", 3), "device", "must be a string"),
    (_set("families", "copy", "intercept", 400.0), "families.copy", "gives log10 seconds 4"),
    (_set("families", "elementwise", "coef", 0, 1e300), "families.elementwise", "gives log10 seconds"),
    (_set("meta", "x", [[[[[[1]]]]]]), "meta.x[0][0][0][0]", "nested deeper than 4"),
])
def test_a_wrong_field_is_named_in_one_line(tmp_path, change, field, says):
    path = _write(tmp_path, _with(change))
    with pytest.raises(ProfileError) as e:
        load_profile(path, force=True)
    assert str(e.value).startswith(f"{path}: not a usable profile: field {field!r}")
    assert says in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("key", ["call_cost", "families", "device"])
def test_a_missing_required_field_is_named(tmp_path, key):
    path = _write(tmp_path, _with(lambda d: d.pop(key)))
    with pytest.raises(ProfileError, match=f"field '{key}' is missing"):
        load_profile(path, force=True)


def _literal(key: str, literal: str) -> str:
    """The shipped profile's JSON with ``key`` set to a literal json.dumps cannot write."""
    return json.dumps({**SHIPPED, key: "@"}).replace('"@"', literal)


@pytest.mark.parametrize("text, says", [
    (_literal("call_cost", "1e999"), "field 'call_cost' must be a finite number"),
    (_literal("call_cost", "NaN"), "field 'call_cost' must be a finite number"),
    (_literal("sync_cost", "1" + "0" * 400), "field 'sync_cost' must be a finite number"),
    (_literal("meta", "[" * 100_000 + "]" * 100_000), "nested too deeply"),
])
def test_huge_numbers_and_deep_nesting_are_one_line(tmp_path, text, says):
    path = _write(tmp_path, text)
    with pytest.raises(ProfileError, match=says.replace("[", r"\[")):
        load_profile(path, force=True)


def test_a_file_that_is_not_utf8_is_one_line(tmp_path):
    path = tmp_path / "p.json"
    path.write_bytes(b"\xff\xfe" + json.dumps(SHIPPED).encode("utf-16-le"))
    with pytest.raises(ProfileError, match="not UTF-8 text"):
        load_profile(str(path), force=True)


@pytest.mark.parametrize("seq_scale, says", [
    ([1e300, 0.0], "turns 1e-07 s of ops into 10\\*\\*-7e\\+300 s"),  # every graph's ops free, or an overflow
    ([-1.0, 0.0], "must have a positive slope"),
    ([1.0, 400.0], "turns 1e-07 s of ops into 10\\*\\*393 s"),
])
def test_a_meaningless_aggregate_correction_is_refused(tmp_path, seq_scale, says):
    path = _write(tmp_path, _with(_set("seq_scale", seq_scale)))
    with pytest.raises(ProfileError, match=f"field 'seq_scale' {says}"):
        load_profile(path, force=True)


@pytest.mark.parametrize("change, says", [
    (_set("families", "conv", "coef", 0, math.nan), "field 'families.conv.coef[0]' must be a finite number"),
    (_set("call_cost", -1.0), "field 'call_cost' must be at least 0"),
])
def test_optimize_refuses_the_profile_before_any_work(tmp_path, change, says):
    """Before: "estimate nan ms" / "-998.948 ms" printed and exit 0."""
    model, out = ir.save(branchy(), tmp_path / "m.onnx"), tmp_path / "o.onnx"
    path = _write(tmp_path, _with(change))
    result = CliRunner().invoke(cli, ["optimize", str(model), "-o", str(out), "--profile", path, "--foreign-profile",
                                      "--time-budget", "10", "--jobs", "1"], catch_exceptions=False)
    error = one_line_error(result)
    assert path in error and says in error
    assert not out.exists()
