"""A model that fails at the sizes gspo chose for its dynamic dimensions: every command that runs
it says which dimensions gspo pinned to what, onnxruntime's reason, and the flag that fixes it."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from gspo.cli import cli
from tests.runtime.test_default_sizes import HIDDEN, vad_like

FAST = ("--budget", "2", "--jobs", "1", "--time-budget", "20", "--select", "estimated")


def gspo(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _error(result) -> str:
    """The error line (after the line that states the defaults), checked to be the only error."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("gspo: error: ")]
    assert len(errors) == 1, result.output
    return errors[0]


@pytest.mark.parametrize("command", [
    ("optimize", "{m}", "-o", "{out}", *FAST),
    ("verify", "{m}", "{m}"),
    ("run", "{m}"),
    ("bench", "{m}", "--runs", "1", "--warmup", "0"),
])
def test_each_command_names_the_pinned_dimensions_and_the_flag(tmp_path, command):
    model, out = vad_like(tmp_path), tmp_path / "out.onnx"
    error = _error(gspo(*(a.format(m=model, out=out) for a in command)))
    assert "at the sizes gspo chose for its dynamic dimensions (inp dim 0 (b) -> 1; state dim 1 -> 128)" in error
    assert "Input initial_h must have shape {1,1,8}. Actual:{1,128,8}" in error
    assert "it runs with --input-shape state=2,1,8 " in error and "--inputs FEEDS.npz" in error
    assert not out.exists()


def test_the_suggested_flag_runs(tmp_path):
    model = vad_like(tmp_path)
    assert gspo("verify", model, model, "--input-shape", f"state=2,1,{HIDDEN}").exit_code == 0


def test_with_the_users_inputs_gspo_does_not_claim_it_chose_the_sizes(tmp_path):
    model, feeds = vad_like(tmp_path), tmp_path / "feeds.npz"
    np.savez(feeds, inp=np.zeros((1, 8), np.float32), state=np.zeros((2, 128, HIDDEN), np.float32))
    error = _error(gspo("run", model, "--inputs", feeds))
    assert "initial_h" in error and "gspo chose" not in error
