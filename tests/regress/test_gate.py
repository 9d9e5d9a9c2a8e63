"""The measured gate end to end on small models built here: record, against, verdicts, outputs."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import onnx
import pytest

from gspo.regress import run_gate
from gspo.regress.store import INDEX, read_artifact, sha256
from tests.helpers import one_line_error
from tests.regress.util import gspo, relu_chain, write_set


@pytest.fixture
def recorded(tmp_path):
    """A set of two models and its recorded artifacts."""
    ms = write_set(tmp_path, {"a": relu_chain(), "b": relu_chain(2)})
    r = gspo("regress", ms, "--record", tmp_path / "base")
    assert r.exit_code == 0, r.output
    return ms, tmp_path / "base"


def test_record_stores_model_report_sha_versions_machine_and_options(tmp_path, recorded):
    ms, base = recorded
    index = json.loads((base / INDEX).read_text())
    assert index["models"] == ["a", "b"] and index["versions"]["onnxruntime"]
    art = read_artifact(base, "a")
    assert art.meta["source_sha256"] == sha256((tmp_path / "a.onnx").read_bytes())
    assert art.meta["versions"]["gspo"] and art.meta["machine"]["device"].startswith("cpu:")
    assert art.meta["options"]["use_rules"] is False and art.report["chosen"].startswith("original")  # at a thread setting, perhaps
    again = gspo("regress", ms, "--record", base)  # no --force: nothing replaced
    assert "exists; use --force" in one_line_error(again)
    assert gspo("regress", ms, "--record", base, "--force").exit_code == 0


def test_an_unchanged_set_is_ok_and_reuses_the_stored_result(tmp_path, recorded):
    ms, base = recorded
    out = tmp_path / "out"
    r = gspo("regress", ms, "--against", base, "--json", out.with_suffix(".json"), "--junit", out.with_suffix(".xml"),
             "--markdown", out.with_suffix(".md"))
    assert r.exit_code == 0, r.output
    report = json.loads(out.with_suffix(".json").read_text())
    for m in report["models"]:
        assert m["verdict"] == "ok" and m["reused"]  # the same model, the same time on the virtual clock
        assert len(m["samples"]["baseline"]) == len(m["samples"]["candidate"]) >= 20
        assert m["vs_baseline"]["rounds"] == len(m["samples"]["source"])
    assert report["versions"]["onnxruntime"] and report["exit_code"] == 0
    suite = ET.parse(out.with_suffix(".xml")).getroot()
    assert suite.get("tests") == "2" and suite.get("failures") == "0"
    assert "| a |" in out.with_suffix(".md").read_text()


def test_a_slower_model_is_regressed_with_its_figures(tmp_path, recorded):
    ms, base = recorded
    onnx.save(relu_chain(40), tmp_path / "a.onnx")  # a new export of "a": equivalent, much slower
    junit = tmp_path / "j.xml"
    r = gspo("regress", ms, "--against", base, "--junit", junit)
    assert r.exit_code == 1, r.output
    assert "REGRESSED" in r.output and "FAILED: a" in r.output
    failure = ET.parse(junit).getroot().find("testcase[@name='a']/failure")
    assert failure is not None and "threshold 20%" in failure.text and "rounds" in failure.text


def _tamper(base, name, proto):
    """Replace a stored model (keeping its artifact consistent), as a broken optimizer would."""
    data = proto.SerializeToString()
    (base / name / "model.onnx").write_bytes(data)
    meta_path = base / name / "artifact.json"
    meta = json.loads(meta_path.read_text())
    meta["model_sha256"] = sha256(data)
    meta_path.write_text(json.dumps(meta))


def test_a_candidate_that_computes_something_else_is_not_equivalent(tmp_path, recorded):
    ms, base = recorded
    _tamper(base, "a", relu_chain(shift=0.5))  # reused as the candidate: its key is unchanged
    run = run_gate(ms, against=base)
    verdicts = {r.name: r for r in run.results}
    assert verdicts["a"].verdict == "NOT EQUIVALENT" and "differs" in verdicts["a"].reason
    assert run.exit_code == 1


def test_a_candidate_slower_than_its_source_fails(tmp_path, recorded):
    ms, base = recorded
    _tamper(base, "a", relu_chain(40))
    run = run_gate(ms, against=base)
    assert {r.name: r.verdict for r in run.results}["a"] == "SLOWER THAN SOURCE" and run.exit_code == 1


def test_reoptimize_ignores_the_stored_result(tmp_path, recorded):
    ms, base = recorded
    _tamper(base, "a", relu_chain(shift=0.5))
    run = run_gate(ms, against=base, reuse=False)
    a = run.results[0]
    assert not a.reused and a.verdict == "faster"  # than the tampered baseline, a node longer


def test_a_model_that_cannot_be_read_is_error_exit_2(tmp_path, recorded):
    ms, base = recorded
    (tmp_path / "b.onnx").write_bytes(b"not onnx")
    r = gspo("regress", ms, "--against", base)
    assert r.exit_code == 2 and "ERROR" in r.output and "not an ONNX model" in r.output


def test_a_new_model_without_baseline_is_timed_against_its_source(tmp_path, recorded):
    ms, base = recorded
    data = json.loads(ms.read_text())
    onnx.save(relu_chain(1), tmp_path / "c.onnx")
    data["models"].append({"name": "c", "path": "c.onnx"})
    ms.write_text(json.dumps(data))
    run = run_gate(ms, against=base)
    c = run.results[-1]
    assert c.verdict == "no baseline" and c.vs_source is not None and run.exit_code == 0


def test_outputs_never_overwrite_inputs_or_the_baseline(tmp_path, recorded):
    ms, base = recorded
    before = ms.read_bytes()
    assert "is an input file" in one_line_error(gspo("regress", ms, "--against", base, "--json", ms))
    assert "is an input file" in one_line_error(gspo("regress", ms, "--against", base, "--junit", base / "a" / "model.onnx"))
    assert "same folder" in one_line_error(gspo("regress", ms, "--against", base, "--record", base, "--force"))
    assert ms.read_bytes() == before
    assert "not a gspo artifact folder" in one_line_error(gspo("regress", ms, "--against", tmp_path))
    assert "no such artifact folder" in one_line_error(gspo("regress", ms, "--against", tmp_path / "nope"))


def test_the_cache_key_is_deterministic_and_follows_the_options(tmp_path, recorded):
    ms, base = recorded
    first = {r.name: r.key for r in run_gate(ms, against=base).results}
    assert first == {r.name: r.key for r in run_gate(ms, against=base).results}
    assert first["a"] == read_artifact(base, "a").meta["key"]
    data = json.loads(ms.read_text())
    data["options"]["budget"] = 1
    ms.write_text(json.dumps(data))
    changed = run_gate(ms, against=base).results[0]
    assert changed.key != first["a"] and not changed.reused


def test_plot_needs_a_baseline_and_writes_a_png(tmp_path, recorded):
    ms, base = recorded
    assert "needs --against" in one_line_error(gspo("regress", ms, "--record", tmp_path / "r2", "--plot", tmp_path / "p.png"))
    r = gspo("regress", ms, "--against", base, "--plot", tmp_path / "p.png")
    assert r.exit_code == 0 and (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_each_version_follows_each_other_equally_often(monkeypatch):
    from gspo.regress.timing import Bench

    monkeypatch.setattr(Bench, "_calls", lambda self, runners: 1)  # one call a sample

    calls = []

    class Fake:
        def __init__(self, label):
            self.label = label

        def run(self, feeds):
            calls.append(self.label)

        def close(self):
            pass

    bench = Bench({})
    bench.executors = {k: Fake(k) for k in ("source", "candidate", "baseline")}
    samples = bench.rounds({}, 12, warmup=0)
    assert all(len(v) == 12 for v in samples.values())
    pairs = [(a, b) for r in range(12) for a, b in zip(calls[3 * r:3 * r + 2], calls[3 * r + 1:3 * r + 3])]
    counts = {p: pairs.count(p) for p in set(pairs)}
    assert len(counts) == 6 and set(counts.values()) == {4}  # every ordered pair, 4 times each


def test_a_sample_of_a_model_of_microseconds_is_many_calls_in_a_row(monkeypatch):
    """Every version is called the same number of times per sample, enough for the fastest to
    last MIN_SAMPLE_S; a sample is the seconds of one call (on a clock that moves only when a
    version runs: 0.2 ms a call of one, 0.4 ms of the other)."""
    import types

    import gspo.runtime.bench as harness
    from gspo.regress import timing

    clock = types.SimpleNamespace(now=0.0)
    monkeypatch.setattr(harness, "time", types.SimpleNamespace(perf_counter=lambda: clock.now))
    calls = {"fast": 0, "slow": 0}

    class Fake:
        def __init__(self, label, seconds):
            self.label, self.seconds = label, seconds

        def run(self, feeds):
            calls[self.label] += 1
            clock.now += self.seconds

        def close(self):
            pass

    bench = timing.Bench({})
    bench.executors = {"fast": Fake("fast", 0.0002), "slow": Fake("slow", 0.0004)}
    samples = bench.rounds({}, 4, warmup=0)
    per_sample = round(timing.MIN_SAMPLE_S / 0.0002)
    assert calls["fast"] == calls["slow"] == 1 + 4 * per_sample  # one calibration call first
    assert samples["fast"] == pytest.approx([0.0002] * 4) and samples["slow"] == pytest.approx([0.0004] * 4)


def test_a_baseline_artifact_changed_after_recording_is_error(tmp_path, recorded):
    ms, base = recorded
    (base / "a" / "model.onnx").write_bytes(relu_chain(3).SerializeToString())
    r = gspo("regress", ms, "--against", base)
    assert r.exit_code == 2 and "does not match its artifact.json" in r.output


def test_the_ray_engine_without_ray_is_a_one_line_error(tmp_path, recorded, monkeypatch):
    import sys

    ms, base = recorded
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails, as when it is not installed
    error = one_line_error(gspo("regress", ms, "--against", base, "--engine", "ray", "--address", "auto"))
    assert "pip install 'gspo[ray]'" in error
    assert "needs --address" in one_line_error(gspo("regress", ms, "--against", base, "--engine", "ray"))
