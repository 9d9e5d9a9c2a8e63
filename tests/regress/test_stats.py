"""The gate's decision on scripted timings: per-round samples in, verdict out."""

from __future__ import annotations

import numpy as np
import pytest

from gspo.regress import decide, judge_rounds
from gspo.regress.stats import UNDECIDED, median_interval


def scripted(candidate_factor, noise=0.03, seed=0, base_ms=10.0, hiccups=(), source_factor=None, load=None):
    """A timer that plays rounds: the machine's drift (shared by all three in a round) times each
    version's own factor and noise; ``hiccups``: round numbers where the candidate stalls 3x.
    ``candidate_factor(k, rng)`` is the candidate's factor in round ``k``; ``load``: each
    measurement also stalls by a random factor up to ``1 + load`` (a machine shared with other
    work: it falls on each run alone, not on the round). Records its calls."""
    rng = np.random.default_rng(seed)
    state = {"round": 0, "calls": []}

    def busy():
        return 1.0 if load is None else 1 + load * rng.random() ** 2

    def timer(count):
        state["calls"].append(count)
        out = {"source": [], "baseline": [], "candidate": []}
        for _ in range(count):
            k = state["round"]
            drift = base_ms * (1 + 0.2 * np.sin(k / 7))  # the machine slows and recovers
            out["baseline"].append(drift * busy() * (1 + noise * rng.standard_normal()))
            src = source_factor if source_factor is not None else 1.0
            out["source"].append(drift * src * busy() * (1 + noise * rng.standard_normal()))
            stall = 3.0 if k in hiccups else 1.0
            out["candidate"].append(drift * candidate_factor(k, rng) * stall * busy()
                                    * (1 + noise * rng.standard_normal()))
            state["round"] += 1
        return out

    timer.calls = state["calls"]
    return timer


def constant(f):
    return lambda k, rng: f


@pytest.mark.parametrize("seed", range(20))
def test_no_regression_under_3_percent_noise_is_ok(seed):
    verdict, vs_base, vs_src, samples, _ = judge_rounds(scripted(constant(1.0), seed=seed), 30, 0.05)
    assert verdict in ("ok", "suspicious") and verdict != "REGRESSED"
    assert verdict == "ok", (seed, vs_base)
    assert len(samples["candidate"]) in (30, 60)


@pytest.mark.parametrize("seed", range(20))
def test_a_10_percent_regression_under_noise_is_regressed(seed):
    verdict, vs_base, _, _, _ = judge_rounds(scripted(constant(1.10), seed=seed, source_factor=1.10), 30, 0.05)
    assert verdict == "REGRESSED", (seed, vs_base)
    assert 1.06 < vs_base.ratio < 1.14 and vs_base.p_slower < 0.01


@pytest.mark.parametrize("seed", range(20))
def test_a_3_percent_change_is_never_regressed_at_the_default_threshold(seed):
    verdict, vs_base, _, _, _ = judge_rounds(scripted(constant(1.03), seed=seed, source_factor=1.03), 30, 0.05)
    assert verdict in ("ok", "suspicious"), (seed, vs_base)


def test_a_hiccup_in_a_few_rounds_does_not_fail_the_model():
    timer = scripted(constant(1.0), hiccups={3, 11, 17, 25}, seed=1)
    verdict, vs_base, _, samples, _ = judge_rounds(timer, 30, 0.05)
    assert max(c / b for b, c in zip(samples["baseline"], samples["candidate"])) > 2.5  # the stalls are there
    assert verdict == "ok" and vs_base.ratio < 1.03


def test_a_candidate_slow_in_a_minority_of_rounds_is_not_regressed():
    """Bimodal: 25% of rounds 30% slower (e.g. a thread landing on a busy core now and then):
    the median of the paired ratios is not past the threshold."""
    timer = scripted(lambda k, rng: 1.3 if rng.random() < 0.25 else 1.0, seed=2)
    verdict, vs_base, _, _, _ = judge_rounds(timer, 30, 0.05)
    assert verdict in ("ok", "suspicious") and vs_base.ratio < 1.05


def test_a_candidate_slow_in_most_rounds_is_regressed():
    """Bimodal the other way: 75% of rounds 30% slower is a regression users feel."""
    timer = scripted(lambda k, rng: 1.3 if rng.random() < 0.75 else 1.0, seed=3, source_factor=1.3)
    verdict, vs_base, vs_src, _, _ = judge_rounds(timer, 30, 0.05)
    assert verdict == "REGRESSED" and vs_base.ratio > 1.2 and vs_src.verdict == "ok"


def test_the_rounds_are_extended_once_when_undecided():
    # 5.5% slower with 4% noise: the interval straddles the threshold after 30 rounds
    timer = scripted(constant(1.055), noise=0.04, seed=4, source_factor=1.055)
    verdict, vs_base, _, samples, _ = judge_rounds(timer, 30, 0.05)
    assert timer.calls == [30, 30] and vs_base.rounds == 60 and len(samples["source"]) == 60
    assert verdict in ("REGRESSED", "suspicious", "ok")
    # a clear case is decided at once
    clear = scripted(constant(1.0), seed=5)
    judge_rounds(clear, 30, 0.05)
    assert clear.calls == [30]


def test_a_median_past_the_threshold_without_significance_is_suspicious():
    # 16 rounds 20% slower, 14 rounds 1% faster: median past 5%, but 16/30 is no significant majority
    base = [10.0] * 30
    cand = [12.0] * 16 + [9.9] * 14
    assert decide(base, cand, 0.05, final=False).verdict == UNDECIDED
    d = decide(base, cand, 0.05, final=True)
    assert d.verdict == "suspicious" and d.ratio > 1.05 and d.p_slower > 0.01


def test_slower_than_source_and_faster_are_told_apart():
    verdict, _, vs_src, _, _ = judge_rounds(scripted(constant(1.2), seed=6), 30, 0.05)
    assert verdict == "SLOWER THAN SOURCE" and vs_src.verdict == "slower"
    verdict, vs_base, _, _, _ = judge_rounds(scripted(constant(0.8), seed=7, source_factor=1.0), 30, 0.05)
    assert verdict == "faster" and vs_base.p_faster < 0.01


def test_the_threshold_is_per_call():
    timer = scripted(constant(1.10), seed=8, source_factor=1.10)
    assert judge_rounds(timer, 30, 0.15)[0] == "ok"


def test_the_median_interval_covers_the_median_and_widens_with_fewer_values():
    xs = list(np.random.default_rng(0).standard_normal(60))
    lo, hi = median_interval(xs)
    assert lo <= float(np.median(xs)) <= hi
    lo5, hi5 = median_interval(xs[:5])
    assert (lo5, hi5) == (min(xs[:5]), max(xs[:5]))  # 5 values: no order statistic gives 95%


def test_decide_refuses_unpaired_or_non_positive_samples():
    with pytest.raises(ValueError):
        decide([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        decide([1.0], [0.0])


@pytest.mark.parametrize("seed", range(10))
def test_a_machine_too_busy_to_resolve_the_threshold_is_error_never_ok_or_regressed(seed):
    """Every run stalls by up to 2x at random (other work on the cores): a 10% regression and no
    change look alike, so both are "could not measure" (exit 2), not a pass nor a false alarm."""
    for factor in (1.0, 1.10):
        j = judge_rounds(scripted(constant(factor), seed=seed, load=1.0, source_factor=factor), 30, 0.05)
        assert j.verdict == "ERROR" and j.noise > 0.15, (seed, factor, j.noise)


def test_a_slowdown_far_beyond_the_noise_is_still_regressed_on_a_busy_machine():
    j = judge_rounds(scripted(constant(3.0), seed=0, load=1.0, source_factor=3.0), 30, 0.05)
    assert j.verdict == "REGRESSED" and j.noise > 0.15


def test_the_noise_of_a_quiet_machine_is_a_few_percent():
    j = judge_rounds(scripted(constant(1.0), seed=0), 30, 0.05)
    assert j.noise < 0.08


def test_a_source_that_jitters_by_itself_does_not_hide_a_steady_comparison():
    """The source at its users' thread setting jitters alone (a tiny model on two threads: up to
    2x in any round) while the baseline and the candidate, at their saved setting, hold steady:
    the rounds resolve the threshold, so an unchanged candidate is ok and a 10% slower one
    REGRESSED, never ERROR."""
    def timer_for(factor, seed=0):
        rng = np.random.default_rng(seed)

        def timer(count):
            out = {"source": [], "baseline": [], "candidate": []}
            for _ in range(count):
                out["source"].append(30.0 * (1 + rng.random() ** 2))
                out["baseline"].append(10.0 * (1 + 0.01 * rng.standard_normal()))
                out["candidate"].append(10.0 * factor * (1 + 0.01 * rng.standard_normal()))
            return out
        return timer

    for seed in range(5):
        steady = judge_rounds(timer_for(1.0, seed), 30, 0.05)
        assert steady.verdict == "ok" and steady.noise < 0.05, (seed, steady.verdict, steady.noise)
        slower = judge_rounds(timer_for(1.10, seed), 30, 0.05)
        assert slower.verdict == "REGRESSED", (seed, slower.verdict)
