"""What a candidate must hold is the trial's judge: exact (the tolerance, the default) or within
an error budget on validation data; a measured candidate carries its verdict."""

from __future__ import annotations

import numpy as np
import pytest

from gspo import ir
from gspo.precision.accuracy import ErrorBudget
from gspo.runtime import random_inputs
from gspo.runtime.verify import Tolerance
from gspo.search.candidate import Candidate
from gspo.search.judge import Exact, WithinBudget, judge_of
from gspo.search.trial import Trial
from tests.search.fakes import ScriptedTimings


def scaled(s: float):
    """y = x * s on x[1, 16]."""
    b = ir.builder.GraphBuilder()
    x = b.input("x", (1, 16))
    return b.output(b.op("Mul", [x, b.const("s", np.float32(s))], out="y")).build()


def samples(n: int = 4):
    g = scaled(1.0)
    return [random_inputs(g, seed) for seed in range(10, 10 + n)]


def within(budget: str, keeps: str | None = None) -> WithinBudget:
    val = samples()
    return WithinBudget(ErrorBudget.parse(budget), val, [{"y": s["x"] * np.float32(1.0)} for s in val], keeps)


def test_a_tolerance_is_the_exact_judge_and_the_default():
    assert judge_of(Tolerance()) == Exact(Tolerance())
    g = scaled(1.0)
    with Trial(g, [Candidate(g, label="original")], [random_inputs(g, 0)]) as trial:
        assert trial.judge == Exact()
    loose = Tolerance(rtol=0.5, atol=0.5)
    with Trial(g, [], [random_inputs(g, 0)], loose) as trial:
        assert trial.judge == Exact(loose)


def test_the_exact_judge_rejects_what_differs_with_its_diffs():
    g, off = scaled(1.0), scaled(1.01)
    options = [Candidate(g, label="original"), Candidate(off, label="off")]
    with Trial(g, options, [random_inputs(g, 0)], measure=ScriptedTimings()) as trial:
        out = {o.label: o for o in trial.time(runs=5)}
    assert out["off"].rejected.startswith("output y differs") and out["off"].diffs[0].name == "y"
    assert out["off"].accuracy is None and out["original"].timing is not None


def test_within_a_budget_a_candidate_is_judged_on_the_validation_data_and_carries_its_accuracy():
    g = scaled(1.0)
    options = [Candidate(g, label="original"), Candidate(scaled(1.01), label="close"),
               Candidate(scaled(1.5), label="far")]
    with Trial(g, options, [random_inputs(g, 0)], within("nmse=1e-3"), measure=ScriptedTimings()) as trial:
        out = {o.label: o for o in trial.time(runs=5)}
    # off by 1% everywhere: nmse 1e-4 holds, where the exact judge refuses it (above)
    assert out["close"].rejected is None and out["close"].accuracy.holds
    assert out["close"].accuracy.samples == 4 and out["close"].diffs == ()
    assert out["far"].rejected.startswith("the validation data broke the budget (y: nmse")
    assert not out["far"].accuracy.holds and out["far"].timing is None
    # the reference's own graph is judged too (its accuracy is against the source, not itself)
    assert out["original"].accuracy.holds and out["original"].accuracy.outputs["y"]["nmse"] == 0.0


def test_the_candidate_a_budget_keeps_is_judged_but_never_rejected():
    far = scaled(1.5)
    options = [Candidate(far, label="original"), Candidate(scaled(1.01), label="close")]
    with Trial(far, options, [random_inputs(far, 0)], within("nmse=1e-3", keeps="original"),
               measure=ScriptedTimings()) as trial:
        out = {o.label: o for o in trial.time(runs=5)}
    assert out["original"].rejected is None and not out["original"].accuracy.holds
    assert out["close"].rejected is None  # judged against the source, not the far reference


@pytest.mark.parametrize("budget", ["nmse=1e-14", "nmse=1e-2"])
def test_the_verdict_within_a_budget_is_the_budgets_measure(budget):
    from gspo.precision.accuracy import measure

    judge = within(budget)
    got = judge.verdict(lambda s: {"y": s["x"] * np.float32(1.01)})
    want = measure(judge.reference, [{"y": s["x"] * np.float32(1.01)} for s in judge.samples], judge.budget)
    assert got.accuracy == want and (got.rejected is None) == want.holds


def test_an_accuracy_already_measured_is_the_verdict_without_a_run():
    judge = within("nmse=1e-3")
    held = judge.verdict(lambda s: {"y": s["x"] * np.float32(1.5)}, label="far")
    known = WithinBudget(judge.budget, judge.samples, judge.reference, known={"far": held.accuracy})
    ran = []
    assert known.verdict(lambda s: ran.append(s), label="far") == held and ran == []
