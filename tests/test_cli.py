"""The command line: every command's happy path, and one-line errors for bad input."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from gspo import ir
from gspo.cli import cli
from gspo.ir import Literal
from tests.helpers import branchy, documented_report_keys, one_line_error, relu_model, sample_report


def gspo(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def model(tmp_path):
    return ir.save(branchy(), tmp_path / "m.onnx")




def test_every_command_has_help_with_an_example():
    for command in ["zoo", "info", "verify", "convert", "rules", "partition", "run", "bench", "optimize", "calibrate", "regress"]:
        result = gspo(command, "--help")
        assert result.exit_code == 0 and "Example:" in result.output, command
    assert "Example:" in gspo("--help").output


def test_zoo_list_and_write(tmp_path):
    listed = gspo("zoo", "--list")
    assert listed.exit_code == 0 and "nasnet_large" in listed.output and "bert" in listed.output
    out = tmp_path / "r.onnx"
    assert gspo("zoo", "resnet50", "-o", out).exit_code == 0
    assert ir.load(out).name == "resnet50"
    assert "exists" in one_line_error(gspo("zoo", "resnet50", "-o", out))
    assert gspo("zoo", "resnet50", "-o", out, "--force").exit_code == 0
    assert "unknown zoo model" in one_line_error(gspo("zoo", "alexnet", "-o", tmp_path / "a.onnx"))
    assert "-o FILE" in one_line_error(gspo("zoo", "resnet50"))


def test_info_text_and_json(model):
    text = gspo("info", model)
    assert text.exit_code == 0
    assert "max independent ops    2" in text.output and "Conv" in text.output
    data = json.loads(gspo("info", model, "--json").output)
    assert data["nodes"] == 4 and data["ops"] == {"Add": 1, "Conv": 2, "Relu": 1}
    assert data["max_parallel_ops"] == 2 and data["depth"] == 3
    assert data["macs"] == 4 * 64 * 4 * (1 + 9) and data["opaque_ops"] == []


def test_verify_exit_codes(tmp_path, model):
    ok = gspo("verify", model, model)
    assert ok.exit_code == 0 and "equivalent" in ok.output
    g = branchy()
    name = next(n for n in g.weights if "w3" in n)
    changed = g.replace_nodes(weights={name: Literal.from_array(g.weights[name].evaluate(g.store) * 1.1)})
    other = ir.save(changed, tmp_path / "other.onnx")
    bad = gspo("verify", model, other)
    assert bad.exit_code == 1 and "NOT equivalent" in bad.output and g.outputs[0].name in bad.output


def test_verify_with_inputs_file(tmp_path, model):
    feeds = tmp_path / "in.npz"
    np.savez(feeds, x=np.ones((1, 4, 8, 8), np.float32))
    assert gspo("verify", model, model, "--inputs", feeds).exit_code == 0
    np.savez(feeds, x=np.ones((1, 4, 8, 8), np.float64))
    assert "the model wants" in one_line_error(gspo("verify", model, model, "--inputs", feeds))


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda p: None, "no such file"),
        (lambda p: p.mkdir(), "is a directory"),
        (lambda p: p.write_text("not a model"), "not an ONNX model"),
        (lambda p: p.write_bytes(ir.serialize(branchy())[:300]), "not an ONNX model"),
        (lambda p: p.write_bytes(relu_model(opset=6, ir_version=3).SerializeToString()), "opset 6 is not supported"),
    ],
)
def test_bad_models_give_one_line_errors(tmp_path, make, expected):
    p = tmp_path / "bad.onnx"
    make(p)
    for args in (["info", p], ["verify", p, p], ["convert", p, "-o", tmp_path / "o.onnx"]):
        assert expected in one_line_error(gspo(*args))


def test_input_shape_option(tmp_path):
    p = tmp_path / "dyn.onnx"
    p.write_bytes(relu_model(shape=("n", 3)).SerializeToString())
    assert gspo("info", p, "--input-shape", "x=5,3").exit_code == 0
    assert "not a graph input" in one_line_error(gspo("info", p, "--input-shape", "y=5,3"))
    assert "bad --input-shape" in one_line_error(gspo("info", p, "--input-shape", "x=five"))


def test_dynamic_dimensions_get_defaults_stated_in_one_line(tmp_path):
    p = tmp_path / "dyn.onnx"
    p.write_bytes(relu_model(shape=("n", 3)).SerializeToString())
    result = CliRunner().invoke(cli, ["info", str(p), "--json"], catch_exceptions=False)
    assert result.exit_code == 0
    assert json.loads(result.stdout)["inputs"] == {"x": [1, 3]}
    said = [line for line in result.stderr.splitlines() if "dynamic dimensions" in line]
    assert said == [f"gspo: {p}: dynamic dimensions set to their defaults (n=1); to choose, pass --input-shape x=1,3"]
    quiet = CliRunner().invoke(cli, ["info", str(p), "--input-shape", "x=5,3"], catch_exceptions=False)
    assert "dynamic dimensions" not in quiet.stderr


def test_convert_refuses_to_write_over_its_input(tmp_path, model):
    assert "-o is an input file" in one_line_error(gspo("convert", model, "-o", model))
    assert "-o is an input file" in one_line_error(gspo("convert", model, "-o", model, "--force"))
    out = tmp_path / "c.onnx"
    assert gspo("convert", model, "-o", out).exit_code == 0
    assert ir.load(out).key == ir.load(model).key


def test_python_dash_m_and_real_exit_codes(tmp_path):
    missing = tmp_path / "missing.onnx"
    proc = subprocess.run([sys.executable, "-m", "gspo", "info", str(missing)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"gspo: error: {missing}: no such file"
    assert proc.stdout == ""


def test_rules_list_and_counts(tmp_path):
    listed = gspo("rules", "--list")
    assert listed.exit_code == 0 and "MergeParallelConvs" in listed.output and "SplitConv" in listed.output
    out = tmp_path / "bert.onnx"
    assert gspo("zoo", "bert", "-o", out).exit_code == 0
    data = json.loads(gspo("rules", out, "--json").output)
    by_rule = {row["rule"]: row for row in data}
    assert by_rule["MergeParallelMatMuls"]["sites"] == 2  # Q/K/V in each of the 2 tiny layers
    why = gspo("rules", out, "--why")
    assert why.exit_code == 0 and "merge sites: 2" in why.output and "not fed by Concat" in why.output


def test_partition_command(tmp_path):
    out = tmp_path / "n.onnx"
    gspo("zoo", "nasnet_mobile", "-o", out)
    text = gspo("partition", out, "--threshold", "40")
    assert text.exit_code == 0 and "pieces of at most 40 ops" in text.output and "weight lost" in text.output
    data = json.loads(gspo("partition", out, "-t", "40", "--json").output)
    assert sum(p["ops"] for p in data["pieces"]) == data["ops"]
    assert all(p["ops"] <= 40 for p in data["pieces"])
    assert abs(sum(c["weight"] for c in data["cuts"]) - data["cut_weight"]) < 1e-9
    assert "1 is not in the range x>=2" in one_line_error(gspo("partition", out, "-t", "1"))
    assert "balance" in one_line_error(gspo("partition", out, "--balance", "0.9"))


def _scheduled_model(tmp_path, mutate=None):
    from gspo.streams import assign_streams
    from gspo.zoo import build

    g = build("inception_v3", "tiny")
    data = assign_streams(g, max_streams=2).to_json()
    if mutate:
        mutate(data)
    return ir.save(g, tmp_path / "sched.onnx", schedule=data)


def test_run_with_a_saved_schedule_and_outputs(tmp_path):
    model = _scheduled_model(tmp_path)
    out = tmp_path / "out.npz"
    result = gspo("run", model, "-o", out)
    assert result.exit_code == 0 and "on 2 stream(s)" in result.output
    plain = tmp_path / "plain.npz"
    assert gspo("run", model, "--streams", "1", "-o", plain).exit_code == 0
    a, b = np.load(out), np.load(plain)
    np.testing.assert_allclose(a["logits"], b["logits"], rtol=1e-5, atol=1e-6)
    assert "exists" in one_line_error(gspo("run", model, "-o", out))


def test_run_refuses_broken_schedules(tmp_path):
    missing = _scheduled_model(tmp_path, lambda d: d["streams"][0].append("ghost"))
    assert "not an op of the model" in one_line_error(gspo("run", missing))
    cyclic = tmp_path / "c"
    cyclic.mkdir()

    def cycle(d):
        a, b = d["events"][0]
        other = next(s for s in d["streams"] if b in s)
        d["events"].append([other[-1], a])

    assert "deadlocks" in one_line_error(gspo("run", _scheduled_model(cyclic, cycle)))


def test_run_bad_streams_and_inputs(tmp_path, model):
    assert "at least 1" in one_line_error(gspo("run", model, "--streams", "0"))
    assert "positive integer" in one_line_error(gspo("run", model, "--streams", "many"))
    feeds = tmp_path / "bad.npz"
    np.savez(feeds, nope=np.zeros(3))
    assert "missing" in one_line_error(gspo("run", model, "--inputs", feeds))


def test_bench_table_and_json(tmp_path, model):
    text = gspo("bench", model, model, "--streams", "1,2", "--runs", "3", "--warmup", "1")
    assert text.exit_code == 0 and "vs first" in text.output and text.output.count("[streams=") == 4
    data = json.loads(gspo("bench", model, "--runs", "2", "--json").stdout)
    assert data["rows"][0]["ratio"] == 1.0 and data["runs"] == 2
    other = tmp_path / "other.onnx"
    gspo("zoo", "resnet50", "-o", other)
    assert "inputs differ" in one_line_error(gspo("bench", model, other))


def test_run_timeline(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot extra is not installed")
    model = _scheduled_model(tmp_path)
    png = tmp_path / "t.png"
    assert gspo("run", model, "--timeline", png).exit_code == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "more than one stream" in one_line_error(gspo("run", model, "--streams", "1", "--timeline", tmp_path / "u.png"))


def test_optimize_command(tmp_path):
    src = tmp_path / "nasrnn.onnx"
    gspo("zoo", "nasrnn", "-o", src)
    out, report = tmp_path / "fast.onnx", tmp_path / "r.json"
    result = gspo("optimize", src, "-o", out, "--report", report, "--budget", "6", "--jobs", "1", "--select", "estimated")
    assert result.exit_code == 0, result.output
    assert "latency" in result.output and "substitutions:" in result.output and f"wrote {out}" in result.output
    data = json.loads(report.read_text())
    assert data["pieces"] >= 1 and "pieces_detail" in data and data["select"] == "estimated"
    assert list(data) == documented_report_keys()  # every key, in the documented order
    assert gspo("verify", src, out).exit_code == 0
    assert "-o is an input file" in one_line_error(gspo("optimize", src, "-o", src))
    assert "'--alpha': '0.5' is not in [1, inf)" in one_line_error(gspo("optimize", src, "-o", tmp_path / "x.onnx", "--alpha", "0.5"))
    assert "-1 is not in the range x>=0" in one_line_error(gspo("optimize", src, "-o", tmp_path / "x.onnx", "--budget", "-1"))
    bad_profile = tmp_path / "p.json"
    bad_profile.write_text("{broken")
    assert "not a gspo profile" in one_line_error(gspo("optimize", src, "-o", tmp_path / "x.onnx", "--profile", bad_profile))


def test_calibrate_evaluate_needs_two_passes(tmp_path):
    from click.testing import CliRunner

    from gspo.cli import cli

    result = CliRunner().invoke(cli, ["calibrate", "--evaluate", "cpu", "--passes", "1"])
    assert result.exit_code != 0 and "at least 2" in result.output and "Traceback" not in result.output


def test_calibrate_evaluate_report_records_its_unit_and_is_not_overwritten_without_force(tmp_path, monkeypatch):
    import json

    from click.testing import CliRunner

    import gspo.costmodel.evaluate as ev
    from gspo.cli import cli
    from gspo.costmodel.profile import load_profile
    from tests.helpers import branchy

    graphs = [(f"p{size}", branchy(channels=size, size=2 * size)) for size in (4, 16)]
    monkeypatch.setattr(ev, "held_out_subgraphs", lambda count, parallel: graphs)
    report = tmp_path / "r.json"
    args = ["calibrate", "--evaluate", "cpu", "--passes", "2", "--report", str(report), "--foreign-profile", "--force"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    data = json.loads(report.read_text())
    assert data["reference_s"] == load_profile("cpu", force=True).reference_s
    assert [r["kind"] for r in data["results"]] == ["sequential", "parallel"]
    report.write_text("mine")

    def measuring(*a, **k):
        raise AssertionError("measured before refusing the report")

    monkeypatch.setattr(ev, "evaluate", measuring)
    result = CliRunner().invoke(cli, args[:-1])  # no --force: refused before anything is measured
    assert result.exit_code != 0 and "exists; use --force" in result.output and "Traceback" not in result.output
    assert report.read_text() == "mine"


def test_progress_in_a_pipe_prints_a_line_per_tenth_and_starts_over_per_phase(capsys):
    from gspo.cli import progress_printer

    show = progress_printer("calibrating")
    for i in range(1, 101):
        show(i, 100, "Conv")
    for i in range(1, 21):  # a new phase: the count starts over
        show(i, 20, "verify")
    lines = capsys.readouterr().err.splitlines()
    assert lines[:3] == ["calibrating: 1/100 (0%) Conv", "calibrating: 10/100 (10%) Conv", "calibrating: 20/100 (20%) Conv"]
    assert len(lines) == 22 and lines[10] == "calibrating: 100/100 (100%) Conv"
    assert lines[11:13] == ["calibrating: 1/20 (0%) verify", "calibrating: 2/20 (10%) verify"]
    assert lines[-1] == "calibrating: 20/20 (100%) verify"


def test_optimize_says_in_how_many_rounds_a_kept_change_was_faster(capsys):
    """A change kept by the sign test over the rounds, not by the spread, says so."""
    from gspo.cli.optimize import _echo_outcome

    r = sample_report(placement={"chosen": {"openvino": 66}})
    _echo_outcome(r, pinned=False)
    out = capsys.readouterr().out
    assert "(x1.097, measured; spread 12.0%; faster in 57 of 60 rounds)" in out
    assert "no measurable change" not in out and "placement: 66 ops on openvino" in out
    _echo_outcome(dataclasses.replace(r, rounds_faster=None, unchanged=True, verdict="unchanged"), pinned=False)
    assert "rounds" not in capsys.readouterr().out.splitlines()[0]
