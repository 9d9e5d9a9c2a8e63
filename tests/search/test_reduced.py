"""Reduced precision as a source of the whole-model stage's candidates: the fit's kinds timed with
the run's ``measure`` beside the exact pick and decided by the same confirmation, on the same
fake clock and scripted timings as the search's tests."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import gspo.search.reduced as reduced_mod
from gspo.ir import load_bytes
from gspo.precision.accuracy import ErrorBudget, measure
from gspo.precision.screen import screen_label
from gspo.precision.search import Fitted
from gspo.precision.stage import PrecisionFit
from gspo.precision.variants import Kind
from gspo.runtime.inputs import random_inputs
from gspo.search import optimize
from gspo.search.budget import Timebox
from gspo.search.candidate import Candidate, Measured
from gspo.search.device import CpuDevice
from gspo.search.report import FinalChoice
from gspo.search.strategies import Strategies
from tests.helpers import branchy
from tests.precision.test_search import PIECES, chain
from tests.precision.test_stage import folder
from tests.search.fakes import FakeClock, ScriptedTimings

INT8 = "int8 on onnxruntime"
ROUNDS = 30


@pytest.fixture(scope="module")
def model():
    return branchy(channels=8, size=8)


def _run(model, tmp_path, script):
    cal, val = folder(tmp_path / "cal", model, range(4)), folder(tmp_path / "val", model, range(10, 14))
    timings = ScriptedTimings({screen_label(INT8): (0.5,), **script})  # the screen lets int8's fit run
    result = optimize(model, precision="int8", max_error="nmse=1e-2", calibration=cal, validation=val,
                      time_budget=None, backends=("ort",), jobs=1, strategies=Strategies(measure=timings))
    return result, timings


def test_the_scripted_measure_decides_that_the_reduced_kind_wins(model, tmp_path):
    result, timings = _run(model, tmp_path, {"original": (1.0,) * ROUNDS, INT8: (0.5,) * ROUNDS})
    block = result.report["precision"]
    assert block["chosen"] == INT8 and block["speedup_over_fp32"] == 2.0 and block["fp32_median_ms"] == 1000.0
    assert block["validation"]["holds"] and any(n.op_type == "QuantizeLinear" for n in result.graph.nodes)
    # timed beside the exact pick with the run's measure, then confirmed against it alone (decide's code)
    assert any(INT8 in labels and "original" in labels for labels in timings.whole)
    assert ("original", INT8) in timings.whole
    kind = next(k for k in block["kinds"] if k["kind"] == INT8)
    assert (kind["median_ms"], kind["threads"], kind["speedup_over_fp32"]) == (500.0, 0, 2.0)
    assert result.schedule is None and result.source is None and not result.keep_dynamic
    assert result.report["settings"] == {"threads": 0, "backend": "ort", "saved": False, "advice": None}


def test_a_reduced_kind_scripted_slower_keeps_the_exact_pick(model, tmp_path):
    result, timings = _run(model, tmp_path, {"original": (1.0,) * ROUNDS, INT8: (2.0,) * ROUNDS})
    block = result.report["precision"]
    assert block["chosen"] == "fp32" and block["speedup_over_fp32"] == 1.0
    assert next(k for k in block["kinds"] if k["kind"] == INT8)["speedup_over_fp32"] == 0.5
    assert not any(n.op_type == "QuantizeLinear" for n in result.graph.nodes)
    assert result.graph.key == model.key and result.placement is None  # the exact pick: the model as given
    assert ("original", INT8) not in timings.whole  # never a contender: slower by median


# ----------------------------------------------------------------- the source alone, with a fake fit
def _fake_fit(graph):
    """A fit of one kind (its graph ``graph``) holding the budget, with the reference of the chain."""
    samples = [random_inputs(graph, s) for s in range(3)]
    outputs = [dict(zip(["y"], [np.asarray(s["x"]) @ np.zeros((16, 16), np.float32)])) for s in samples]
    errors = ErrorBudget.parse("nmse=1e30")
    acc = measure(outputs, outputs, errors)
    kind = Kind("fake", "int8", "ort", lambda ops: True, lambda reduced: graph)
    fitted = Fitted(kind, (0, 1), graph, validation=acc, calibration=acc, pieces={0: "reduced", 1: "reduced"})
    ref = SimpleNamespace(session_s=0.01, sample_s=0.001, data=SimpleNamespace(validation=samples),
                          outputs={"validation": outputs})
    return PrecisionFit(["int8"], errors, SimpleNamespace(source={}, warnings=()), ref, PIECES, [fitted], [], [], acc)


def _pick(monkeypatch, script, budget, ref=None):
    graph = load_bytes(chain())
    fit = _fake_fit(graph)
    if ref is not None:
        fit.ref = SimpleNamespace(**{**vars(fit.ref), **ref})
    monkeypatch.setattr(reduced_mod, "fit_precision", lambda *args: fit)
    cfg = SimpleNamespace(precision=SimpleNamespace(precisions=("int8",)),
                          timing=SimpleNamespace(final_timing_budget=8.0, final_margin=0.02, runs=ROUNDS))
    exact = Measured(Candidate(graph, label="original", kind="original"))
    timings = ScriptedTimings(script)
    tools = Strategies(measure=timings, device=CpuDevice())
    pick = reduced_mod.reduced_pick(SimpleNamespace(original=graph), FinalChoice(exact, [exact], [exact], []), cfg,
                                    tools, ("ort",), budget)
    return pick, timings


def test_each_kind_is_timed_at_each_thread_count_and_the_confirmed_one_is_saved(monkeypatch):
    script = {"original": (1.0,) * ROUNDS, "fake": (0.9,) * ROUNDS, "fake[threads=1]": (0.5,) * ROUNDS}
    pick, timings = _pick(monkeypatch, script, Timebox.of(None))
    first = timings.whole[0]
    assert first[:3] == ("original", "fake", "fake[threads=1]")  # every thread count worth trying
    assert pick.best.label == "fake[threads=1]" and pick.best.candidate.precision.pieces == (0, 1)
    assert pick.settings.threads == 1 and pick.settings.saved
    assert pick.block.chosen == "fake" and pick.block.kinds[0].threads == 1 and pick.block.kinds[0].median_ms == 500.0
    assert pick.block.speedup_over_fp32 == 2.0


def test_a_time_budget_too_small_for_the_timing_skips_it_with_the_reason(monkeypatch):
    clock = FakeClock(now=0.0)
    timebox = Timebox.of(10.0, clock=clock, reduced=True)
    # each runner's session estimated at 5 s: at the fewest rounds, more than the 10 s left
    pick, timings = _pick(monkeypatch, {}, timebox, ref={"session_s": 5.0})
    assert pick.best is None and pick.block.chosen == "fp32" and timings.whole == []
    assert "the time budget ended before the reduced-precision models could be timed: kept fp32" in pick.block.notes
    assert timebox.log[-1].stage == "precision" and timebox.log[-1].what == "timing the reduced-precision models"
    assert "in 7 rounds" in timebox.log[-1].why
