"""The command line loses no data, checks every option before working, and stops cleanly."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

import gspo.outputs as outputs
from gspo import ir
from gspo.cli import cli
from gspo.ir.onnx_io import SCHEDULE_KEY
from tests.helpers import branchy, one_line_error, relu_model

FAST = ("--budget", "2", "--jobs", "1", "--time-budget", "20", "--select", "estimated")


def gspo(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)




@pytest.fixture
def model(tmp_path):
    return ir.save(branchy(), tmp_path / "m.onnx")


def test_optimize_refuses_a_report_over_its_output_and_leaves_the_file(tmp_path, model):
    out = tmp_path / "out.onnx"
    out.write_bytes(b"earlier")
    error = one_line_error(gspo("optimize", model, "-o", out, "--report", out, "--force", *FAST))
    assert "-o and --report name the same file" in error
    assert out.read_bytes() == b"earlier"


def test_a_full_disk_with_force_keeps_the_existing_output(tmp_path, model, monkeypatch):
    out = tmp_path / "out.onnx"
    out.write_bytes(b"the user's earlier model")

    def write_half(fd, data):
        os.write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(outputs, "_write_all", write_half)
    assert "No space left on device" in one_line_error(gspo("convert", model, "-o", out, "--force"))
    assert out.read_bytes() == b"the user's earlier model"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "out.onnx"]


def test_a_hard_linked_output_does_not_change_the_other_link(tmp_path):
    kept, out = tmp_path / "kept.onnx", tmp_path / "out.onnx"
    kept.write_bytes(b"another model")
    os.link(kept, out)
    assert gspo("zoo", "squeezenet", "-o", out, "--force").exit_code == 0
    assert kept.read_bytes() == b"another model"
    assert ir.load(out).name.startswith("squeezenet")


def test_run_writes_exactly_the_output_named_and_keeps_other_files(tmp_path, model):
    out = tmp_path / "result"
    neighbour = tmp_path / "result.npz"
    neighbour.write_bytes(b"not to be touched")
    assert gspo("run", model, "-o", out).exit_code == 0
    assert neighbour.read_bytes() == b"not to be touched"
    assert set(np.load(out, allow_pickle=False).files) == {v.name for v in branchy().outputs}


def test_report_into_a_missing_folder_is_created_and_under_a_file_refused_first(tmp_path, model):
    report = tmp_path / "new" / "folder" / "r.json"
    result = gspo("optimize", model, "-o", tmp_path / "o.onnx", "--report", report, *FAST)
    assert result.exit_code == 0, result.output
    assert json.loads(report.read_text())["model"] == "branchy"
    out = tmp_path / "o2.onnx"
    error = one_line_error(gspo("optimize", model, "-o", out, "--report", model / "r.json", *FAST))
    assert "is not a folder" in error and not out.exists()


def test_force_only_overwrites_it_does_not_accept_a_foreign_profile(tmp_path, model):
    from gspo.costmodel.profile import find_profile

    data = json.loads(find_profile("cpu").read_text())
    data["device"] = "cpu:another machine:64c"
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps(data))
    error = one_line_error(gspo("optimize", model, "-o", tmp_path / "o.onnx", "--profile", foreign, "--force", *FAST))
    assert "--foreign-profile" in error and "--force" not in error
    result = gspo("optimize", model, "-o", tmp_path / "o.onnx", "--profile", foreign, "--foreign-profile", *FAST)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("option, value, says", [
    ("--time-budget", "nan", "not a finite number"),
    ("--time-budget", "inf", "not a finite number"),
    ("--time-budget", "0", "is not in (0, 604800]"),
    ("--alpha", "nan", "not a finite number"),
    ("--threshold", "0", "not in the range x>=2"),
    ("--jobs", "100000", "not in the range 0<=x<="),
    ("--max-streams", "0", "not in the range x>=1"),
])
def test_optimize_options_are_checked_before_any_work(tmp_path, model, option, value, says):
    out = tmp_path / "o.onnx"
    error = one_line_error(gspo("optimize", model, "-o", out, option, value))
    assert option in error and says in error
    assert not out.exists()


def test_other_commands_check_their_numbers(tmp_path, model):
    assert "not a finite number" in one_line_error(gspo("verify", model, model, "--rtol", "nan"))
    assert "(0, 0.5]" in one_line_error(gspo("partition", model, "--balance", "0.9"))
    assert "not a finite number" in one_line_error(gspo("calibrate", "--device", "cpu", "--budget", "inf"))
    assert "not a finite number" in one_line_error(gspo("regress", "x.json", "--tolerance", "nan"))


def test_clicks_usage_errors_take_gspos_form(model):
    assert "No such option" in one_line_error(gspo("optimize", model, "-o", "x.onnx", "--bogus"))
    assert "'huge' is not one of" in one_line_error(gspo("zoo", "resnet50", "--size", "huge"))
    assert "No such command 'optimise'" in one_line_error(gspo("optimise", model))
    assert "Missing option '-o'" in one_line_error(gspo("optimize", model))
    assert "see gspo optimize --help" in one_line_error(gspo("optimize", model))


def test_a_deeply_nested_schedule_is_a_one_line_error(tmp_path, model):
    m = onnx.load(str(model))
    m.metadata_props.add(key=SCHEDULE_KEY, value="[" * 100_000 + "]" * 100_000)
    nested = tmp_path / "nested.onnx"
    onnx.save(m, str(nested))
    assert "nested too deeply" in one_line_error(gspo("run", nested))


def test_sigterm_during_a_parallel_search_stops_cleanly(tmp_path):
    src, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    assert gspo("zoo", "nasnet_mobile", "-o", src).exit_code == 0
    cmd = [sys.executable, "-m", "gspo", "optimize", str(src), "-o", str(out), "--jobs", "2",
           "--threshold", "8", "--time-budget", "120"]
    log = tmp_path.parent / f"{tmp_path.name}.stderr"
    with open(log, "w") as err_file:
        proc = subprocess.Popen(cmd, stderr=err_file, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while "optimizing:" not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)  # not a terminal: a progress line per tenth of the search
    time.sleep(0.1)  # the search of a tiny model takes about a second: stop it while it runs
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    err = log.read_text()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err and "BrokenPipe" not in err
    assert "gspo: stopped (SIGTERM)" in err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


# ---------------------------------------------- only verified bytes, never over a file
def test_the_unchanged_output_holds_the_bytes_read_not_the_input_replaced_meanwhile(tmp_path, monkeypatch):
    import gspo.search as search

    src, out = tmp_path / "t.onnx", tmp_path / "o.onnx"
    src.write_bytes(relu_model().SerializeToString())  # nothing applies: the output is the input
    given = src.read_bytes()
    real = search.optimize

    def then_replace_the_input(*args, **kwargs):
        result = real(*args, **kwargs)
        src.write_text("NOT A MODEL ANYMORE\n")
        return result

    monkeypatch.setattr(search, "optimize", then_replace_the_input)
    result = gspo("optimize", src, "-o", out, *FAST)
    assert result.exit_code == 0, result.output
    assert "the output is the input" in result.output
    assert out.read_bytes() == given


def test_of_two_runs_writing_one_output_the_later_fails_with_one_line(tmp_path, model, monkeypatch):
    import gspo.search as search

    out = tmp_path / "o.onnx"
    real = search.optimize
    written = {}

    def another_run_finishes_meanwhile(*args, **kwargs):
        result = real(*args, **kwargs)
        monkeypatch.setattr(search, "optimize", real)
        other = gspo("optimize", model, "-o", out, *FAST)  # after this run's check that out is free
        assert other.exit_code == 0 and f"wrote {out}" in other.output
        written["bytes"] = out.read_bytes()
        return result

    monkeypatch.setattr(search, "optimize", another_run_finishes_meanwhile)
    result = gspo("optimize", model, "-o", out, "--report", tmp_path / "r.json", *FAST)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if not line.startswith("optimizing:")]
    assert lines == [f"gspo: error: {out}: exists; not overwritten (use --force to overwrite it)"]
    assert not (tmp_path / "r.json").exists()
    assert out.read_bytes() == written["bytes"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "o.onnx"]


def test_a_report_that_appears_meanwhile_is_kept_and_the_error_says_the_model_was_written(tmp_path, model,
                                                                                           monkeypatch):
    import gspo.search as search

    out, report = tmp_path / "o.onnx", tmp_path / "r.json"
    real = search.optimize

    def a_report_appears(*args, **kwargs):
        result = real(*args, **kwargs)
        report.write_text("another run's report")
        return result

    monkeypatch.setattr(search, "optimize", a_report_appears)
    result = gspo("optimize", model, "-o", out, "--report", report, *FAST)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if not line.startswith("optimizing:")]
    assert lines == [f"gspo: error: {report}: exists; not overwritten (use --force to overwrite it); "
                     f"the model was written to {out}"]
    assert report.read_text() == "another run's report" and ir.load(out).name == "branchy"


def test_external_data_is_never_overwritten_without_force_and_gets_an_ordinary_mode(tmp_path, monkeypatch):
    monkeypatch.setattr(ir.onnx_io, "_EXTERNAL_THRESHOLD", 1000)  # the 9 kB of weights go beside the model
    src, out, data = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "o.onnx.data"
    src.write_bytes(ir.to_model(branchy(channels=16)).SerializeToString())
    data.write_bytes(b"the weights of another model")
    assert "o.onnx.data: exists (gspo writes -o's weights file there" in one_line_error(gspo("convert", src, "-o", out))
    assert data.read_bytes() == b"the weights of another model" and not out.exists()
    data.unlink()
    old = os.umask(0o027)
    try:
        assert gspo("convert", src, "-o", out).exit_code == 0
    finally:
        os.umask(old)
    assert [p.stat().st_mode & 0o777 for p in (out, data)] == [0o640, 0o640]
    assert os.path.getsize(data) > os.path.getsize(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "o.onnx", "o.onnx.data"]
    feeds = {"x": np.ones((1, 16, 8, 8), np.float32)}
    assert _outputs(ir.load(out), feeds) == _outputs(branchy(channels=16), feeds)
    data.write_bytes(b"stale")
    assert gspo("convert", src, "-o", out, "--force").exit_code == 0
    assert _outputs(ir.load(out), feeds) == _outputs(branchy(channels=16), feeds)


def _outputs(graph, feeds) -> list[bytes]:
    from gspo.runtime import make_session, run

    return [a.tobytes() for a in run(make_session(graph), feeds).values()]
