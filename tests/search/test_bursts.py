"""A thread setting is saved only when it also wins in bursts after idle (issue 51): scripted
timings, no real timing."""

from __future__ import annotations

import sys

import pytest

from gspo.ir import save
from gspo.ir.metadata import metadata_value
from gspo.runtime import DeviceTime, Timing, random_inputs
from gspo.runtime.settings import SETTINGS_KEY, RunSettings
from gspo.search import optimize
from gspo.search.candidate import Candidate
from gspo.search.strategies import Strategies
from gspo.zoo import build
from tests.helpers import branchy
from tests.search.fakes import ScriptedTimings

FAST = dict(budget=4, timing_runs=5, backends=("ort",), jobs=1, use_streams=False)
SETTING = "original[threads=1]"


def _optimize(tmp_path, script):
    timings = ScriptedTimings({"original": (1.0,) * 30, SETTING: script})
    src = save(build("squeezenet", "tiny"), tmp_path / "in.onnx")
    return optimize(src, use_rules=False, **FAST, strategies=Strategies(measure=timings)), timings


def test_a_setting_that_wins_back_to_back_but_loses_in_bursts_is_not_saved(tmp_path):
    # whole-model timings: 1 the first, 2 the confirmation back to back, 3 in bursts after idle
    r, timings = _optimize(tmp_path, lambda n: (0.5,) * 30 if n < 3 else (1.2,) * 30)
    assert timings.whole[1:] == [("original", SETTING), ("original", SETTING)]
    assert r.report["chosen"] == "original"
    assert r.report["settings"]["saved"] is False
    assert metadata_value(r.graph, SETTINGS_KEY) is None
    by_label = {c["label"]: c for c in r.report["confirmations"]}
    assert by_label[SETTING]["confirmed"] is True
    assert by_label[f"{SETTING} in bursts"]["confirmed"] is False
    assert by_label[f"{SETTING} in bursts"]["measured_ms"] == pytest.approx(1200.0)


def test_a_setting_that_wins_in_both_is_saved(tmp_path):
    r, timings = _optimize(tmp_path, (0.5,) * 30)
    assert len(timings.whole) == 3
    assert r.report["chosen"] == SETTING
    assert metadata_value(r.graph, SETTINGS_KEY) == RunSettings(1).to_json()
    assert {c["label"]: c["confirmed"] for c in r.report["confirmations"]} == {
        SETTING: True, f"{SETTING} in bursts": True, f"{SETTING} against the input as installed": True}


def test_a_trial_in_bursts_wraps_each_call_in_a_burst_after_idle(monkeypatch):
    """What the timing function is given: each option's call as a burst sample (the trial's burst
    shape and pause), one untimed round."""
    trial_mod = sys.modules["gspo.search.trial"]
    wrapped = []

    def fake_burst_sample(run, calls, pause):
        wrapped.append((calls, pause))

        def sample():
            run()
            return DeviceTime(0.25)
        return sample

    seen = {}

    def measure(calls, runs, warmup):
        seen.update(warmup=warmup, runs=runs)
        return [Timing(label, (float(call()),) * runs) for label, call in calls]

    monkeypatch.setattr(trial_mod, "burst_sample", fake_burst_sample)
    g = branchy()
    options = [Candidate(g, label="original"), Candidate(g, settings=RunSettings(1), label=SETTING)]
    with trial_mod.Trial(g, options, [random_inputs(g, 0)], measure=measure) as trial:
        timed = trial.time(7, bursts=True)
        assert wrapped == [(trial_mod.BURST_CALLS, trial_mod.BURST_PAUSE_S)] * 2
        assert seen == {"warmup": 1, "runs": 7}
        assert [m.timing.seconds for m in timed] == [(0.25,) * 7] * 2
        wrapped.clear()
        trial.time(7)  # back to back: no bursts
        assert wrapped == [] and seen["warmup"] == trial_mod.WARMUP_ROUNDS


def test_the_burst_confirmation_counts_its_pauses():
    from gspo.search.trial import BURST_CALLS, BURST_PAUSE_S, BURST_ROUNDS, burst_seconds

    assert burst_seconds(0.0) == pytest.approx((BURST_ROUNDS + 1) * 2 * BURST_PAUSE_S)
    assert burst_seconds(0.01) == pytest.approx((BURST_ROUNDS + 1) * 2 * (BURST_PAUSE_S + (BURST_CALLS + 1) * 0.01))
