"""benchmarks/gpu_check.py's ``gspo optimize --device cuda`` step (step 8), with its commands
answered by canned results: what it reads from the reports and how it turns one interleaved
bench into the Figure 5 table. (On a machine without a GPU the script exits 2 before any step:
tests/runtime/test_cuda.py checks that.)"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


@pytest.fixture
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_optimize_step_records_choices_and_the_ablation_speedups(gpu_check, tmp_path, monkeypatch):
    calls = []
    # bench rows: model, rules_only... in the order optimized: joint, rules_only, streams_only;
    # each [1 stream], [saved schedule]
    medians = [10.0, 10.0, 8.0, 5.0, 9.0, 9.0, 10.0, 6.0]

    def fake_cli(*args, timeout=900):
        calls.append(args)
        if args[0] == "optimize":
            report = Path(args[args.index("--report") + 1])
            streams = 1 if "--no-streams" in args else 3
            report.write_text(json.dumps({"chosen": "optimized+streams", "streams": streams, "syncs": 2,
                                          "substitutions": {} if "--no-rules" in args else {"MergeParallelConvs": 2},
                                          "speedup": 1.5, "device": {"name": "Fake"}}))
        stdout = json.dumps({"rows": [{"median_ms": m} for m in medians]}) if args[0] == "bench" else ""
        return {"args": list(args), "exit": 0, "stdout": stdout}

    monkeypatch.setattr(gpu_check, "gspo_cli", fake_cli)
    (tmp_path / "gpu-check.json").write_text("{}")
    result = gpu_check.check_optimize(tmp_path)
    assert result["ok"] and [r["model"] for r in result["models"]] == list(gpu_check.MODELS)
    optimizes = [c for c in calls if c[0] == "optimize"]
    assert len(optimizes) == 3 * len(gpu_check.MODELS)
    assert all("--device" in c and c[c.index("--device") + 1] == "cuda" for c in optimizes)
    assert all(c[c.index("--profile") + 1] == str(tmp_path / "gpu-check.json") for c in optimizes)
    row = result["models"][0]
    assert row["joint"]["chosen"]["streams"] == 3 and row["rules_only"]["chosen"]["streams"] == 1
    assert row["joint"]["speedup_over_ort_cuda"] == 2.0 and row["joint"]["speedup_over_one_stream"] == 1.6
    assert row["rules_only"]["speedup_over_ort_cuda"] == pytest.approx(10 / 9)
    assert row["streams_only"]["speedup_over_one_stream"] == pytest.approx(10 / 6)
    assert result["figure5_speedup_over_ort_cuda"]["nasrnn"]["joint"] == 2.0


def test_without_the_calibrated_profile_the_step_fails_saying_why(gpu_check, tmp_path):
    result = gpu_check.check_optimize(tmp_path)
    assert not result["ok"] and "calibration step failed" in result["skipped"]
