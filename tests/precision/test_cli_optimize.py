"""``gspo optimize --precision``: what it prints and writes."""

from __future__ import annotations

import json

from click.testing import CliRunner

from gspo import ir
from gspo.cli import cli
from tests.helpers import branchy


def test_optimize_prints_the_precision_outcome_and_reports_it(tmp_path):
    model = ir.save(branchy(channels=8, size=8), tmp_path / "m.onnx")
    out, report = tmp_path / "o.onnx", tmp_path / "r.json"
    result = CliRunner().invoke(cli, ["optimize", str(model), "-o", str(out), "--precision", "int8", "--max-error",
                                      "nmse=1e-14", "--backends", "ort", "--time-budget", "30", "--jobs", "1",
                                      "--report", str(report)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "warning: the calibration and validation data are random" in result.output
    assert "precision: int8 on onnxruntime: every piece went back to fp32 to hold the budget" in result.output
    assert "precision: kept fp32 (exact): no reduced precision was both within nmse=1e-14" in result.output
    block = json.loads(report.read_text())["precision"]
    assert block["chosen"] == "fp32" and block["max_error"] == "nmse=1e-14"
    assert ir.load(out).key is not None
