"""The command line within bounded memory: files checked before they are read, input sets made
one at a time, one line for what cannot be read."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from gspo import ir
from gspo.cli import cli
from tests.helpers import branchy, one_line_error


def gspo(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def model(tmp_path):
    return ir.save(branchy(), tmp_path / "m.onnx")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_info_on_a_fifo_or_a_device_is_one_line_at_once(tmp_path):
    fifo = tmp_path / "m.onnx"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/zero"):
        proc = subprocess.run([sys.executable, "-m", "gspo", "info", str(path)], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 2
        assert proc.stderr.strip() == f"gspo: error: {path}: not a regular file (a device, FIFO or socket), not an ONNX file"


def test_inputs_that_are_not_an_npz_are_one_line(tmp_path, model):
    text = tmp_path / "feeds.npz"
    text.write_text("x = 1\n")
    line = one_line_error(gspo("verify", model, model, "--inputs", text))
    assert "not an .npz file" in line and "pickle" not in line
    npy = tmp_path / "one.npz"
    with open(npy, "wb") as f:
        np.save(f, np.zeros((1, 4, 8, 8), np.float32))
    assert "a single .npy array, not an .npz" in one_line_error(gspo("verify", model, model, "--inputs", npy))


def test_optimize_refuses_inputs_the_model_does_not_take_before_reading_them(tmp_path, model, monkeypatch):
    feeds = tmp_path / "feeds.npz"
    np.savez_compressed(feeds, x=np.zeros((1, 4, 64, 64), np.float32))
    monkeypatch.setattr(np.lib.format, "read_array", lambda *a, **k: pytest.fail("an array was read"))
    out = tmp_path / "o.onnx"
    line = one_line_error(gspo("optimize", model, "-o", out, "--inputs", feeds, "--backends", "ort"))
    assert "input 'x' is float32[1, 4, 64, 64], the model wants float32[1, 4, 8, 8]" in line
    assert not out.exists()


def test_verify_with_a_huge_runs_holds_one_input_set_at_a_time(model, monkeypatch):
    """--runs 10**9 starts comparing at once (it built every set first: 16 GB after 10 minutes);
    here the third draw stops it as Ctrl-C would."""
    import importlib

    verify_mod = importlib.import_module("gspo.runtime.verify")
    events = []
    draw, compare = verify_mod.random_inputs, verify_mod.compare_outputs

    def counted_draw(graph, seed):
        events.append("draw")
        if events.count("draw") == 3:
            raise KeyboardInterrupt
        return draw(graph, seed)

    monkeypatch.setattr(verify_mod, "random_inputs", counted_draw)
    monkeypatch.setattr(verify_mod, "compare_outputs", lambda *a: events.append("compare") or compare(*a))
    result = gspo("verify", model, model, "--runs", 10**9)
    assert result.exit_code == 130 and "stopped (SIGINT)" in result.output
    assert events == ["draw", "compare", "draw", "compare", "draw"]
