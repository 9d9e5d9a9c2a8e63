"""benchmarks/precision (report.py, nncf_peer.py), their pure parts: the CPU a row ran on, merging
a run's rows into results.json by (model, budget, precision, CPU), RESULTS.md's CPUs and NNCF
columns, the transformer test that picks NNCF's preset, and NNCF's validation_fn of a budget."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from gspo.ir.builder import GraphBuilder
from gspo.precision.accuracy import ErrorBudget

FOLDER = Path(__file__).resolve().parents[2] / "benchmarks" / "precision"
VNNI = ["sse4_2", "avx2", "avx512f", "avx512_vnni", "avx512_bf16", "fma"]
AVX2 = ["sse4_2", "avx2", "fma"]
RUN = {"date": "2026-12-03", "machine": "cpu:AMD EPYC:2c", "onnxruntime": "1.31.1", "command": "python run.py"}


@pytest.fixture
def bench(monkeypatch):
    """The benchmark's modules (report, nncf_peer), imported from their folder and forgotten after."""
    monkeypatch.syspath_prepend(str(FOLDER))
    for name in ("report", "nncf_peer"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    yield SimpleNamespace(report=importlib.import_module("report"), nncf=importlib.import_module("nncf_peer"))
    for name in ("report", "nncf_peer"):
        sys.modules.pop(name, None)


def _row(model, cpu, budget="nmse=0.001", precision="bf16,int8", **more):
    timings = {"fp32 onnxruntime": 10.0, "gspo": 5.0, "ort quantize_static": 20.0}
    row = {"model": model, "budget": budget, "precision": precision, "cpu": cpu, "samples": 8, "time_budget": 300.0,
           "optimize_s": 312.4, "chosen": "int8 on openvino", "fp32_best_ms": 10.0, "timings_ms": timings,
           "speedup_over_fp32": {k: round(10.0 / v, 3) for k, v in timings.items()},
           "errors": {k: {"holds": k != "ort quantize_static"} for k in timings}, "failed": {}, "nncf": {},
           "kinds": [], "weight_only_kinds": []}
    row.update(more)
    return row


def test_the_cpu_record_keeps_the_flags_that_matter_and_tells_cpus_of_one_name_apart(bench):
    vnni = bench.report.cpu_record(VNNI + ["amx_int8", "amx_tile"], "AMD EPYC", 2)
    avx2 = bench.report.cpu_record(AVX2, "AMD EPYC", 2)
    assert vnni["flags"] == ["avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_int8", "amx_tile"]
    assert avx2["flags"] == ["avx2"]
    assert vnni["id"] != avx2["id"] and "AMD EPYC" in avx2["id"] and "2 cores" in avx2["id"]
    assert bench.report.cpu_record([], "Old", 4)["id"] == "Old, 4 cores, no AVX2"


def test_a_run_replaces_only_its_own_cpus_rows_and_keeps_the_others(bench):
    r = bench.report
    a, b = r.cpu_record(VNNI, "AMD EPYC", 2), r.cpu_record(AVX2, "AMD EPYC", 2)
    first = r.merged(None, [_row("bert", a["id"], optimize_s=1.0), _row("crnn", a["id"])], a, RUN)
    second = r.merged(first, [_row("bert", b["id"], optimize_s=2.0)], b, dict(RUN, command="python run.py b"))
    assert [(x["model"], x["cpu"], x["optimize_s"]) for x in second["rows"]] == [
        ("bert", a["id"], 1.0), ("crnn", a["id"], 312.4), ("bert", b["id"], 2.0)]
    third = r.merged(second, [_row("bert", a["id"], optimize_s=3.0)], a, dict(RUN, command="python run.py c"),
                     order=("crnn", "bert"))
    assert [(x["model"], x["cpu"], x["optimize_s"]) for x in third["rows"]] == [
        ("crnn", a["id"], 312.4), ("bert", a["id"], 3.0), ("bert", b["id"], 2.0)]
    assert third["meta"]["cpus"][a["id"]]["commands"] == ["python run.py", "python run.py c"]
    assert third["meta"]["cpus"][b["id"]]["flags"] == ["avx2"]
    assert third["meta"]["cpu"] == a["id"] and len(third["meta"]["commands"]) == 3


def test_another_precision_or_budget_is_another_row(bench):
    r = bench.report
    a = r.cpu_record(VNNI, "AMD EPYC", 2)
    first = r.merged(None, [_row("bert", a["id"])], a, RUN)
    both = r.merged(first, [_row("bert", a["id"], precision="int8"), _row("bert", a["id"], budget="top1=0.99")], a, RUN)
    assert sorted((x["budget"], x["precision"]) for x in both["rows"]) == [
        ("nmse=0.001", "bf16,int8"), ("nmse=0.001", "int8"), ("top1=0.99", "bf16,int8")]


def test_rows_written_before_cpus_were_recorded_stay_under_their_machine(bench):
    r = bench.report
    old_row = {k: v for k, v in _row("bert", None).items() if k not in ("cpu", "precision", "samples", "time_budget")}
    old = {"meta": {"date": "2026-12-02", "machine": "cpu:AMD EPYC:2c", "onnxruntime": "1.31.1",
                    "commands": ["python run.py --models bert"]}, "rows": [old_row]}
    a = r.cpu_record(VNNI, "AMD EPYC", 2)
    got = r.merged(old, [_row("bert", a["id"])], a, RUN)
    legacy = "cpu:AMD EPYC:2c (flags not recorded)"
    assert [x["cpu"] for x in got["rows"]] == [legacy, a["id"]]
    assert got["rows"][0]["precision"] == "bf16,int8"
    assert got["meta"]["cpus"][legacy]["commands"] == ["python run.py --models bert"]
    assert got["meta"]["cpus"][legacy]["flags"] is None and got["meta"]["cpus"][legacy]["cores"] == 2
    md = r.markdown(got)
    assert "- AMD EPYC, 2 cores: flags not recorded" in md
    assert "| bert | nmse=0.001 | bf16,int8 | 16 |" in md  # the samples of a row before --samples: 16


def test_results_md_names_each_cpu_at_the_top_and_gives_each_its_table(bench):
    r = bench.report
    a, b = r.cpu_record(VNNI, "AMD EPYC", 2), r.cpu_record(AVX2, "AMD EPYC", 2)
    results = r.merged(r.merged(None, [_row("bert", a["id"])], a, RUN), [_row("bert", b["id"])], b, RUN)
    md = r.markdown(results)
    lines = md.splitlines()
    top = lines[:lines.index("## AMD EPYC, 2 cores: avx2 avx512f avx512_vnni avx512_bf16")]
    assert "- AMD EPYC, 2 cores: avx2 avx512f avx512_vnni avx512_bf16" in top
    assert "- AMD EPYC, 2 cores: avx2" in top
    assert "## AMD EPYC, 2 cores: avx2" in lines
    assert sum(line.startswith("| model |") for line in lines) == 2
    row = next(line for line in lines if line.startswith("| bert"))
    assert "| 8 | 10.00 | int8 on openvino | 2.00x ok | 312 / 300 | 0.50x BREAKS | n/a |" in row


def test_the_nncf_cells_give_speed_budget_f32_wall_time_or_why_not(bench):
    r = bench.report
    timings = {"fp32 onnxruntime": 10.0, "nncf quantize": 4.0, "nncf quantize, f32": 8.0}
    ok = _row("bert", "c", timings_ms=timings, speedup_over_fp32={k: 10.0 / v for k, v in timings.items()},
              errors={k: {"holds": "f32" in k or "fp32" in k} for k in timings},
              nncf={"nncf quantize": {"seconds": 4.2, "model_type": "transformer"},
                    "nncf accuracy control": {"stopped_after_s": 301.5, "model_type": "transformer"}},
              failed={"nncf accuracy control": "stopped after 302 s (--nncf-timeout 300)"})
    assert r._nncf_cell(ok, "nncf quantize") == "2.50x BREAKS (f32 1.25x ok), 4 s"
    assert r._nncf_cell(ok, "nncf accuracy control") == "stopped after 302 s"
    assert r._row_notes(ok, ()) == []  # a stopped run is said in its cell
    missing = _row("bert", "c", failed={"nncf quantize": "nncf is not installed", "nncf accuracy control": "nncf is "
                                        "not installed"})
    assert r._nncf_cell(missing, "nncf quantize") == "failed"
    assert r._row_notes(missing, ()) == ["- bert: nncf quantize: nncf is not installed",
                                         "- bert: nncf accuracy control: nncf is not installed"]
    assert r._nncf_cell(_row("bert", "c"), "nncf quantize") == "n/a"  # a row measured before the column


def test_a_weight_bound_row_notes_its_weight_only_kinds_or_that_there_are_none(bench):
    r = bench.report
    none = _row("gpt2_kv_small", "c", precision="int8")
    assert r._row_notes(none, ("gpt2_kv_small",)) == [
        "- gpt2_kv_small (nmse=0.001, int8): gspo's report names no weight-only kind"]
    assert r._row_notes(none, ()) == []
    some = _row("gpt2_kv_small", "c", precision="int8", weight_only_kinds=[
        {"kind": "int8 weights on openvino", "dropped": None, "median_ms": 12.5},
        {"kind": "int4 weights on openvino", "dropped": "OpenVINO cannot run it", "median_ms": None}])
    assert r._row_notes(some, ("gpt2_kv_small",)) == [
        "- gpt2_kv_small (nmse=0.001, int8): weight-only kinds in gspo's report: int8 weights on openvino "
        "(12.50 ms); int4 weights on openvino (dropped: OpenVINO cannot run it)"]


def _attention(scale_steps: int = 1, softmax_of_matmul: bool = True):
    """q, k -> MatMul -> (Div by a constant) x ``scale_steps`` -> Add(mask) -> Softmax, or a
    Softmax of a Relu of an input where ``softmax_of_matmul`` is false."""
    b = GraphBuilder()
    q, k, mask = b.input("q", (1, 4, 8)), b.input("k", (1, 8, 4)), b.input("mask", (1, 4, 4))
    x = b.op("MatMul", [q, k]) if softmax_of_matmul else b.op("Relu", [mask])
    for _ in range(scale_steps):
        x = b.op("Div", [x, b.const("scale", np.array(2.0, np.float32))])
    return b.output(b.op("Softmax", [b.op("Add", [x, mask])], axis=-1)).build()


def test_attention_is_a_transformer_and_other_softmaxes_are_not(bench):
    assert bench.nncf.is_transformer(_attention())
    assert not bench.nncf.is_transformer(_attention(softmax_of_matmul=False))
    assert not bench.nncf.is_transformer(_attention(scale_steps=8))  # a MatMul too far back is not attention
    b = GraphBuilder()
    x = b.input("x", (1, 8))
    y = b.op("Relu", [b.op("MatMul", [x, b.weight("w", (8, 8))])])
    assert not bench.nncf.is_transformer(b.output(y).build())  # MatMuls without a Softmax


class _Port:
    def __init__(self, name):
        self.name = name

    def get_any_name(self):
        return self.name

    def get_names(self):  # every alias of the output (GPT-2's have two)
        return {self.name, f"{self.name}_alias"}


class _Compiled:
    """An OpenVINO compiled model's interface as validation_fn uses it: outputs by port."""

    def __init__(self, scale):
        self.outputs = [_Port("y")]
        self.scale = scale

    def __call__(self, feeds):
        return {self.outputs[0]: feeds["x"] * self.scale}


def test_validation_fn_is_minus_the_budgets_metric_and_max_drop_its_bound(bench):
    x = np.arange(1, 5, dtype=np.float32)
    items = [({"x": x}, {"y": x})]
    fn, max_drop = bench.nncf.validation_fn(ErrorBudget.parse("nmse=1e-3"))
    assert max_drop == 1e-3
    assert fn(_Compiled(1.0), items) == 0.0
    assert fn(_Compiled(1.1), items) == pytest.approx(-0.01)  # nmse of a 10% error: 1e-2, a drop past 1e-3
    fn, max_drop = bench.nncf.validation_fn(ErrorBudget.parse("nmse=1e-3,cosine=0.999"))
    assert max_drop == 1.0
    assert fn(_Compiled(1.1), items) == pytest.approx(-10.0)  # the excess: 1e-2 / 1e-3
    fn, _ = bench.nncf.validation_fn(ErrorBudget.parse("nmse=1e-3"))
    assert fn(_Compiled(np.inf), items) < -1e3  # broken beyond measure, still a number NNCF can compare
