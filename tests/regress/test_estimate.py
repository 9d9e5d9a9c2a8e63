"""gspo regress --estimate: the deterministic check, and the baselines it refuses."""

from __future__ import annotations

import json

import onnx
import pytest

from tests.helpers import one_line_error
from tests.regress.util import gspo


def modelset(tmp_path, exclude=(), options=None):
    data = {"version": 1, "options": {"budget": 4, "seed": 0, "jobs": 1, "use_streams": False, **(options or {})},
            "models": [{"name": "rnn", "zoo": "nasrnn", "size": "tiny", "exclude_rules": list(exclude)}]}
    p = tmp_path / "set.json"
    p.write_text(json.dumps(data))
    return p


def test_update_then_pass_then_a_weakened_rule_set_fails_naming_the_model(tmp_path):
    ms = modelset(tmp_path)
    assert gspo("regress", ms, "--estimate", "--update").exit_code == 0
    baseline = json.loads((tmp_path / "set.baseline.json").read_text())
    assert baseline["models"]["rnn"]["estimated_speedup"] > 1
    ok = gspo("regress", ms, "--estimate")
    assert ok.exit_code == 0 and "rnn" in ok.output and " ok " in ok.output
    weak = modelset(tmp_path, exclude=["MergeParallelMatMuls", "MergeMatMulsIntoAdd"])
    bad = gspo("regress", weak, "--estimate")
    assert bad.exit_code == 1
    assert "REGRESSED" in bad.output and "FAILED: rnn" in bad.output
    assert gspo("regress", weak, "--estimate", "--update").exit_code == 0  # the new, weaker baseline
    assert gspo("regress", weak, "--estimate").exit_code == 0


@pytest.mark.parametrize("value, says", [
    ("NaN", "not a finite positive number"),
    (-1, "not a finite positive number"),
    (0, "not a finite positive number"),
    ("\"1.2\"", "not a finite positive number"),
    (None, "no estimated_speedup"),
])
def test_a_baseline_with_a_bad_speedup_is_an_error_never_a_pass(tmp_path, value, says):
    ms = modelset(tmp_path)
    entry = "{}" if value is None else '{"estimated_speedup": ' + str(value) + "}"
    (tmp_path / "set.baseline.json").write_text('{"version": 1, "models": {"rnn": ' + entry + "}}")
    error = one_line_error(gspo("regress", ms, "--estimate"))
    assert says in error and "rnn" in error


def test_a_foreign_baseline_format_is_an_error(tmp_path):
    ms = modelset(tmp_path)
    (tmp_path / "set.baseline.json").write_text(json.dumps({"version": 2, "models": {}}))
    assert "not a gspo baseline of format 1" in one_line_error(gspo("regress", ms, "--estimate"))
    (tmp_path / "set.baseline.json").write_text("{corrupt")
    assert "not valid JSON" in one_line_error(gspo("regress", ms, "--estimate"))


def test_a_baseline_entry_without_substitutions_is_read(tmp_path):
    ms = modelset(tmp_path)
    (tmp_path / "set.baseline.json").write_text(json.dumps({"version": 1, "models": {"rnn": {"estimated_speedup": 1.0}}}))
    r = gspo("regress", ms, "--estimate")
    assert r.exit_code == 0 and " ok " in r.output


def test_update_never_overwrites_the_model_set_or_a_model(tmp_path):
    ms = modelset(tmp_path)
    before = ms.read_bytes()
    error = one_line_error(gspo("regress", ms, "--estimate", "--baseline", ms, "--update"))
    assert "is an input file" in error and ms.read_bytes() == before
    assert "is an input file" in one_line_error(gspo("regress", ms, "--estimate", "--baseline", ms, "--update", "--force"))
    model = tmp_path / "m.onnx"
    onnx.save(onnx.helper.make_model(onnx.helper.make_graph([], "g", [], [])), model)
    data = json.loads(ms.read_text())
    data["models"] = [{"name": "m", "path": "m.onnx"}]
    ms.write_text(json.dumps(data))
    model_bytes = model.read_bytes()
    assert "is an input file" in one_line_error(gspo("regress", ms, "--estimate", "--baseline", model, "--update"))
    assert model.read_bytes() == model_bytes


def test_update_replaces_only_a_baseline_unless_forced(tmp_path):
    ms = modelset(tmp_path)
    other = tmp_path / "notes.json"
    other.write_text('{"mine": true}')
    error = one_line_error(gspo("regress", ms, "--estimate", "--baseline", other, "--update"))
    assert "not a gspo baseline; use --force" in error and other.read_text() == '{"mine": true}'


def test_bad_model_sets_are_one_line_errors(tmp_path):
    bad_set = tmp_path / "bad.json"
    bad_set.write_text(json.dumps({"version": 1, "models": [{"name": "x"}]}))
    assert "exactly one of" in one_line_error(gspo("regress", bad_set, "--estimate"))
    bad_set.write_text(json.dumps({"hello": 1}))
    assert "not a gspo model set" in one_line_error(gspo("regress", bad_set, "--estimate"))
    assert "unknown rule" in one_line_error(gspo("regress", modelset(tmp_path, exclude=["NoSuchRule"]), "--estimate"))


def test_estimate_and_the_measured_gate_take_their_own_options(tmp_path):
    ms = modelset(tmp_path)
    assert "--estimate takes only" in one_line_error(gspo("regress", ms, "--estimate", "--against", tmp_path))
    assert "belong to --estimate" in one_line_error(gspo("regress", ms, "--update"))
    assert "give --against DIR" in one_line_error(gspo("regress", ms))
