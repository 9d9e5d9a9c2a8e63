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


def test_the_closing_line_says_how_the_chosen_kind_runs(capsys):
    from gspo.cli.precision import echo_precision
    from gspo.precision.accuracy import Accuracy
    from gspo.precision.report import PrecisionReport

    acc = Accuracy({"y": {"nmse": 1e-4}}, (), True, 0.1, 4)

    def block(chosen):
        return PrecisionReport(["bf16", "int8"], "nmse=1e-3", {"validation": "user: 4 samples"}, [], [], 2, [3, 3],
                               1.0, acc, [], chosen, 2.0, acc)

    said = {}
    for chosen in ("int8 on openvino, the rest at bf16", "bf16 on openvino", "int8 on openvino", "int8 on onnxruntime"):
        echo_precision(block(chosen))
        said[chosen] = capsys.readouterr().out.splitlines()[-1]
    assert "QDQ int8 model whose placement on OpenVINO at bf16" in said["int8 on openvino, the rest at bf16"]
    assert "the bf16 placement is saved in the model's metadata" in said["bf16 on openvino"]
    assert "standard QDQ int8 model, fast on OpenVINO" in said["int8 on openvino"]
    assert "plain onnxruntime runs it as fast" in said["int8 on onnxruntime"]
