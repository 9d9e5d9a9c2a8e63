"""benchmarks/gpu_check.py, on a machine without a GPU: the dry run's plan and its bound, the
refusal where no CUDA runtime works, the report's tables from a canned report, and a rehearsal
of its first steps on torch's CPU device (which is never reported as a GPU result)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


@pytest.fixture
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_dry_run_lists_every_step_and_a_total_within_eight_minutes(gpu_check, capsys):
    assert gpu_check.main(["--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out[:-1]] == list(gpu_check.STEPS)
    total = re.fullmatch(r"total: (\d+) s", out[-1])
    assert total and int(total.group(1)) == sum(gpu_check.ESTIMATES.values()) <= 480


def test_an_unknown_step_is_one_line_and_exit_2(gpu_check, capsys):
    assert gpu_check.main(["--steps", "environment,nope", "--dry-run"]) == 2
    assert "unknown step 'nope'" in capsys.readouterr().err


def test_without_a_cuda_runtime_it_exits_2_saying_why(gpu_check, capsys, tmp_path):
    pytest.importorskip("torch")
    from gspo.runtime.torchrt import torch_status

    if torch_status()[0]:
        pytest.skip("a GPU is visible here")
    assert gpu_check.main(["-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpu_check: the torch runtime cannot run on a GPU here:") and "\n" not in err
    assert not list(tmp_path.iterdir())


def test_the_markdown_tables_come_from_the_report(gpu_check):
    report = {"date": "2026-11-26", "command": "python benchmarks/gpu_check.py", "steps": {
        "environment": {"ok": True, "seconds": 1.0, "runtime": "torch", "torch": "2.11.0", "cpu_cores": 16,
                        "device": {"name": "NVIDIA H100", "torch_cuda": "13.0", "driver": "580.1"}},
        "figure5": {"ok": True, "seconds": 9.0, "models": [{
            "model": "nasrnn", "median_ms": {"eager_one_stream": 2.0, "cuda_graph": 1.0, "joint": 0.5},
            "speedup_over_cuda_graph": {"eager_one_stream": 0.5, "cuda_graph": 1.0, "joint": 2.0},
            "joint": {"chosen": "optimized+streams", "streams": 3, "rules": {"MergeParallelMatMuls": 4}, "seconds": 15}}]},
        "cpu16": {"ok": True, "models": [{"model": "nasrnn", "cores": 16, "streams": 4,
                                          "median_ms": {"onnxruntime_16_threads": 3.0, "gspo_4_streams_x_4_threads": 2.0},
                                          "speedup_over_onnxruntime": 1.5}]}}}
    md = gpu_check.markdown(report)
    assert md.startswith("# gspo on a GPU: NVIDIA H100\n") and "REHEARSAL" not in md
    assert "| nasrnn | 2.000 (0.50x) | 1.000 (1.00x) | - | - | 0.500 (2.00x) |" in md
    assert "| nasrnn | joint | optimized+streams | 3 | 4 | 15 |" in md
    assert "| nasrnn | 16 | 4 | onnxruntime_16_threads 3.00, gspo_4_streams_x_4_threads 2.00 | 1.500 |" in md
    assert "REHEARSAL" in gpu_check.markdown({**report, "rehearsal": True})


def test_a_rehearsal_on_the_cpu_writes_its_own_report_never_a_gpu_one(gpu_check, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from gspo.runtime.cuda import choice

    monkeypatch.setattr(gpu_check, "BRANCHED", ("nasrnn",))
    monkeypatch.setattr(gpu_check, "REPEATS", 3)
    code = gpu_check.main(["--rehearse", "--steps", "environment,streams", "-o", str(tmp_path)])
    choice.set_cuda_runtime(None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rehearsal.json", "rehearsal.md"]
    report = json.loads((tmp_path / "rehearsal.json").read_text())
    assert report["rehearsal"] is True and set(report["steps"]) == {"environment", "streams"}
    assert report["steps"]["environment"]["runtime"] == "torch"
    row = report["steps"]["streams"]["models"][0]
    assert row["model"] == "nasrnn" and row["streams"] > 1 and row["vs_cpu"]["ok"], row
    assert code == (0 if all(s["ok"] for s in report["steps"].values()) else 1)
