"""The command line with a calibration database it cannot use: optimize warns once and goes on
(the database is only its cache); calibrate, whose store it is, stops with one line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from gspo import ir
from gspo.cli import cli
from gspo.runtime.backends import backend_status
from tests.helpers import branchy, one_line_error


def gspo(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_calibrate_on_a_corrupt_database_is_one_line(tmp_path):
    db = tmp_path / "c.sqlite"
    db.write_bytes(b"garbage" * 100)
    line = one_line_error(gspo("calibrate", "--device", "cpu", "--db", db, "-o", tmp_path / "p.json", "--budget", 0.01))
    assert line == f"gspo: error: {db}: file is not a database (delete it to start a new one)"


@pytest.mark.skipif(not backend_status("openvino")[0], reason="the cache is used only with a second backend")
def test_optimize_with_a_corrupt_user_cache_succeeds_with_one_warning(tmp_path):
    cache = tmp_path / "xdg" / "gspo" / "calibration.sqlite"
    cache.parent.mkdir(parents=True)
    cache.write_bytes(b"garbage" * 100)
    model = ir.save(branchy(), tmp_path / "m.onnx")
    out = tmp_path / "o.onnx"
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    proc = subprocess.run([sys.executable, "-m", "gspo", "optimize", str(model), "-o", str(out), "--budget", "2",
                           "--time-budget", "20"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert out.exists() and "wrote" in proc.stdout
    warnings = [line for line in proc.stderr.splitlines() if "calibration cache" in line]
    assert warnings == [f"gspo: WARNING: calibration cache not used: {cache}: file is not a database "
                        "(delete it to start a new one); going on without it"]
