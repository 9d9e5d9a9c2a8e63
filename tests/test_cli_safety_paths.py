"""Every command that writes checks, before any work, that no path it writes is an input's
weights file or a device, FIFO or socket (issue 42); names and archive entries that are legal
are written, the others refused in one line."""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from gspo import ir
from gspo.cli import cli
from tests.helpers import branchy, one_line_error, onnx_model
from tests.test_outputs_paths import external_model

FAST = ("--budget", "2", "--jobs", "1", "--time-budget", "20", "--select", "estimated")


def gspo(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if a command gets past its checks into the work."""
    import gspo.search as search

    def work(*args, **kwargs):
        raise AssertionError("the work started before the outputs were refused")

    monkeypatch.setattr(search, "optimize", work)
    monkeypatch.setattr("gspo.cli.models.load_model", work)
    monkeypatch.setattr("gspo.cli.execute.load_model", work)


# ------------------------------------------------------- case 1: the input's weights file
@pytest.mark.parametrize("command", [
    ("optimize", "{m}", "-o", "{t}/o.onnx", "--report", "{t}/w.bin", "--force", *FAST),
    ("optimize", "{m}", "-o", "{t}/w.bin", "--force", *FAST),
    ("optimize", "{m}", "-o", "{t}/link.onnx", "--force", *FAST),
    ("convert", "{m}", "-o", "{t}/w.bin", "--force"),
    ("run", "{m}", "-o", "{t}/w.bin", "--force"),
])
def test_no_command_writes_over_the_inputs_weights(tmp_path, command, no_work):
    model = external_model(tmp_path)
    (tmp_path / "link.onnx").symlink_to(tmp_path / "w.bin")
    weights = (tmp_path / "w.bin").read_bytes()
    error = one_line_error(gspo(*[a.format(m=model, t=tmp_path) for a in command]))
    assert "is the external data of" in error and str(model) in error
    assert (tmp_path / "w.bin").read_bytes() == weights
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.onnx", "m.onnx", "w.bin"]


@pytest.mark.parametrize("estimate", [("--record", "rec"), ("--estimate",)])
def test_regress_json_is_never_written_over_a_models_weights(tmp_path, estimate):
    model = external_model(tmp_path)
    (tmp_path / "set.json").write_text(json.dumps({"version": 1, "models": [{"name": "m", "path": model.name}]}))
    weights = (tmp_path / "w.bin").read_bytes()
    error = one_line_error(gspo("regress", tmp_path / "set.json", *[tmp_path / a if a == "rec" else a for a in estimate], "--json", tmp_path / "w.bin", "--force"))
    assert "--json is the external data of" in error
    assert (tmp_path / "w.bin").read_bytes() == weights


def test_the_weights_an_output_would_write_are_never_an_inputs(tmp_path, no_work):
    given = external_model(tmp_path, "in2.onnx", location="w.onnx.data")
    weights = (tmp_path / "w.onnx.data").read_bytes()
    for command in (("optimize", given, "-o", tmp_path / "w.onnx", "--force", *FAST),
                    ("convert", given, "-o", tmp_path / "w.onnx", "--force")):
        error = one_line_error(gspo(*command))
        assert "w.onnx.data: -o's weights file is the external data of" in error
    assert (tmp_path / "w.onnx.data").read_bytes() == weights and not (tmp_path / "w.onnx").exists()


def test_an_existing_weights_file_beside_the_output_is_refused_before_any_work(tmp_path, no_work):
    model = ir.save(branchy(), tmp_path / "m.onnx")
    (tmp_path / "o.onnx.data").write_bytes(b"the weights of another model")
    for command in (("optimize", model, "-o", tmp_path / "o.onnx", *FAST), ("convert", model, "-o", tmp_path / "o.onnx")):
        error = one_line_error(gspo(*command))
        assert "o.onnx.data: exists" in error and "--force" in error
    assert (tmp_path / "o.onnx.data").read_bytes() == b"the weights of another model"


# ---------------------------------------- case 2: devices, FIFOs, sockets (a FIFO stands in)
@pytest.mark.parametrize("command", [
    ("optimize", "{m}", "-o", "{out}", "--force", *FAST),
    ("optimize", "{m}", "-o", "{t}/o.onnx", "--report", "{out}", "--force", *FAST),
    ("convert", "{m}", "-o", "{out}", "--force"),
    ("run", "{m}", "-o", "{out}", "--force"),
    ("zoo", "squeezenet", "-o", "{out}", "--force"),
    ("calibrate", "--device", "cpu", "-o", "{out}", "--force"),
    ("regress", "{t}/set.json", "--record", "{t}/rec", "--junit", "{out}", "--force"),
    ("regress", "{t}/set.json", "--estimate", "--json", "{out}", "--force"),
])
@pytest.mark.parametrize("through_a_link", [False, True])
def test_a_fifo_is_never_replaced_even_with_force(tmp_path, command, through_a_link):
    model = ir.save(branchy(), tmp_path / "m.onnx")
    (tmp_path / "set.json").write_text(json.dumps({"version": 1, "models": [{"name": "m", "path": "m.onnx"}]}))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    out = fifo
    if through_a_link:
        out = tmp_path / "link"
        out.symlink_to(fifo)
    error = one_line_error(gspo(*[a.format(m=model, t=tmp_path, out=out) for a in command]))
    assert "not a regular file" in error
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and (not through_a_link or out.is_symlink())
    assert not (tmp_path / "o.onnx").exists()


# ------------------------------------------------------ case 14: names, slashes, entries
def test_a_legal_240_character_output_name_is_written(tmp_path):
    model = ir.save(branchy(), tmp_path / "m.onnx")
    out = tmp_path / ("n" * 235 + ".onnx")
    result = gspo("convert", model, "-o", out)
    assert result.exit_code == 0, result.output
    assert ir.load(out).name == "branchy"
    result = gspo("run", model, "-o", tmp_path / ("r" * 236 + ".npz"))
    assert result.exit_code == 0, result.output


def test_a_longer_name_than_the_file_system_takes_is_refused_before_any_work(tmp_path, no_work):
    model = ir.save(branchy(), tmp_path / "m.onnx")
    error = one_line_error(gspo("optimize", model, "-o", tmp_path / ("n" * 251 + ".onnx"), *FAST))
    assert "file name too long (256 bytes; this file system takes at most 255)" in error


def test_an_output_ending_in_a_slash_is_refused_in_one_line(tmp_path, no_work):
    model = ir.save(branchy(), tmp_path / "m.onnx")
    for command in (("convert", model, "-o", f"{tmp_path}/out/new/"), ("optimize", model, "-o", f"{tmp_path}/new/", *FAST),
                    ("run", model, "-o", f"{tmp_path}/out/new/")):
        error = one_line_error(gspo(*command))
        assert "ends in '/'" in error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_output_names_become_safe_archive_entries_and_the_run_says_so(tmp_path):
    names = ["../../evil", "/abs", "a\\b", "..", "plain", "50%", "file"]
    shape = [2, 3]
    model = onnx_model([helper.make_node("Relu", ["x"], [n]) for n in names],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                       [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in names])
    onnx.save(model, tmp_path / "m.onnx")
    out = tmp_path / "sub" / "out.npz"
    result = gspo("run", tmp_path / "m.onnx", "-o", out)
    assert result.exit_code == 0, result.output
    entries = np.load(out, allow_pickle=False).files
    assert "plain" in entries and len(entries) == len(names)
    for entry in entries:
        assert "/" not in entry and "\\" not in entry and ".." not in entry
    from urllib.parse import unquote

    assert sorted(unquote(e) for e in entries) == sorted(names)
    assert "'../../evil' is saved as" in result.output and "'plain' is saved" not in result.output
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["m.onnx", "out.npz", "sub"]


# --------------------------------- issue 51, item 1: outputs inside --calibration/--validation DIR
def _samples(folder, count=2):
    """A folder of ``count`` samples of branchy()'s input, one per .npz (as --calibration takes)."""
    folder.mkdir()
    for i in range(count):
        np.savez(folder / f"s{i:05d}.npz", x=np.random.default_rng(i).standard_normal((1, 4, 8, 8)).astype(np.float32))
    return folder


@pytest.mark.parametrize("output", [("-o", "calX/s00000.npz"), ("--report", "valX/s00001.npz"),
                                    ("-o", "calX/new/o.onnx"), ("-o", "to_val/o.onnx")])
def test_optimize_never_writes_inside_its_calibration_or_validation_folder(tmp_path, output, no_work, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = ir.save(branchy(), tmp_path / "m.onnx")
    cal, val = _samples(tmp_path / "calX"), _samples(tmp_path / "valX")
    (tmp_path / "to_val").symlink_to("valX")
    before = {p: p.read_bytes() for p in (*cal.iterdir(), *val.iterdir())}
    option, path = output
    outs = {"-o": "o.onnx", option: path}
    error = one_line_error(gspo("optimize", model, *[a for o, p in outs.items() for a in (o, p)], "--force",
                                "--precision", "int8", "--max-error", "nmse=1e-2", "--calibration", "calX",
                                "--validation", "valX", *FAST))
    which = "--calibration's folder calX" if path.startswith("calX") else "--validation's folder valX"
    assert error == f"gspo: error: {path}: {option} is inside {which}, which gspo reads; choose a path outside it"
    assert {p: p.read_bytes() for p in (*cal.iterdir(), *val.iterdir())} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calX", "m.onnx", "to_val", "valX"]
