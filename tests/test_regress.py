"""gspo regress: a model set against its baseline."""

from __future__ import annotations

import json

from click.testing import CliRunner

from gspo.cli import cli


def gspo(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def modelset(tmp_path, exclude=()):
    data = {"version": 1, "options": {"budget": 4, "seed": 0, "jobs": 1, "use_streams": False},
            "models": [{"name": "rnn", "zoo": "nasrnn", "size": "tiny", "exclude_rules": list(exclude)}]}
    p = tmp_path / "set.json"
    p.write_text(json.dumps(data))
    return p


def test_update_then_pass_then_a_weakened_rule_set_fails_naming_the_model(tmp_path):
    ms = modelset(tmp_path)
    assert gspo("regress", ms, "--update").exit_code == 0
    baseline = json.loads((tmp_path / "set.baseline.json").read_text())
    assert baseline["models"]["rnn"]["estimated_speedup"] > 1
    ok = gspo("regress", ms)
    assert ok.exit_code == 0 and "rnn" in ok.output and " ok " in ok.output
    weak = modelset(tmp_path, exclude=["MergeParallelMatMuls", "MergeMatMulsIntoAdd"])
    bad = gspo("regress", weak)
    assert bad.exit_code == 1
    assert "REGRESSED" in bad.output and "FAILED: rnn" in bad.output
    assert gspo("regress", weak, "--update").exit_code == 0  # the new, weaker baseline
    assert gspo("regress", weak).exit_code == 0


def test_bad_model_sets_and_baselines_are_one_line_errors(tmp_path):
    ms = modelset(tmp_path)
    (tmp_path / "set.baseline.json").write_text("{corrupt")
    r = gspo("regress", ms)
    assert r.exit_code == 2 and "not valid JSON" in r.output and "Traceback" not in r.output
    (tmp_path / "set.baseline.json").write_text(json.dumps({"version": 1, "models": {"rnn": {}}}))
    assert "corrupt baseline" in gspo("regress", ms).output
    bad_set = tmp_path / "bad.json"
    bad_set.write_text(json.dumps({"version": 1, "models": [{"name": "x"}]}))
    assert "exactly one of" in gspo("regress", bad_set).output
    bad_set.write_text(json.dumps({"hello": 1}))
    assert "not a gspo model set" in gspo("regress", bad_set).output
    assert "unknown rule" in gspo("regress", modelset(tmp_path, exclude=["NoSuchRule"]), "--update").output
