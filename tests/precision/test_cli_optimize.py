"""``gspo optimize --precision``: what it prints and writes."""

from __future__ import annotations

import json

from click.testing import CliRunner

from gspo import ir
from gspo.cli import cli
from tests.helpers import branchy


def test_optimize_prints_the_precision_outcome_and_reports_it(tmp_path, monkeypatch):
    import gspo.search.driver as driver_mod
    from gspo.search.strategies import Strategies
    from tests.precision.test_stage import SCREENED
    from tests.search.fakes import ScriptedTimings

    # scripted timings: int8 with every piece reduced faster than fp32, so that the screen lets it be fitted
    monkeypatch.setattr(driver_mod, "Strategies", lambda: Strategies(measure=ScriptedTimings(SCREENED)))
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


def test_a_kind_fastest_at_a_thread_count_says_so_and_its_setting_is_reported(capsys):
    from gspo.cli.precision import echo_precision
    from gspo.precision.accuracy import Accuracy
    from gspo.precision.report import KindReport, PrecisionReport
    from gspo.precision.search import Fitted
    from gspo.precision.stage import settings_of
    from gspo.precision.variants import Kind

    acc = Accuracy({"y": {"nmse": 1e-4}}, (), True, 0.1, 4)
    kind = KindReport("int8 on openvino", "int8", "openvino", [0, 1], None, 0.5, 2.0, acc, acc, {}, threads=2)
    echo_precision(PrecisionReport(["int8"], "nmse=1e-3", {"validation": "user: 4 samples"}, [], [], 2, [3, 3], 1.0,
                                   acc, [kind], "int8 on openvino", 2.0, acc))
    assert "precision: int8 on openvino: 2 of 2 pieces reduced, 0.500 ms at 2 threads, x2.00" in capsys.readouterr().out
    assert KindReport.from_json({k: v for k, v in kind.to_json().items() if k != "threads"}).threads == 0  # older reports

    def fitted(backend, threads):
        return Fitted(Kind("k", "int8", backend, lambda ops: True, lambda reduced: None), (0,), threads=threads)

    on_openvino = settings_of(fitted("openvino", 2))
    assert (on_openvino.threads, on_openvino.saved) == (2, True)
    assert on_openvino.advice == "run it with OpenVINO: PERFORMANCE_HINT=LATENCY, INFERENCE_NUM_THREADS=2"
    assert settings_of(fitted("ort", 1)).advice == "run it with onnxruntime: intra_op_num_threads=1"
    at_bf16 = settings_of(fitted("openvino:bf16", 2))  # no plain backend runs it as chosen: gspo's runtime does
    assert (at_bf16.threads, at_bf16.saved, at_bf16.advice) == (2, True, None)
    default = settings_of(fitted("openvino", 0))
    assert (default.threads, default.saved, default.advice) == (0, False, None)
