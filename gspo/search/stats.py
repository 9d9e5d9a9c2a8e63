"""The statistics the choice uses: a timing's spread, the paired rounds and their sign test, the
verdict on a speedup, and the pick among measured candidates."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from gspo.runtime import Timing
from gspo.search.candidate import Candidate, Measured
from gspo.timing.stats import sign_test

__all__ = ["PAIRED_ALPHA", "consistently_faster", "pick", "rounds_faster", "sign_test", "speed_verdict", "spread"]

#: The chance that an option no faster than the reference (a fair coin per round) still wins so
#: many of the interleaved rounds that :func:`sign_test` calls it consistently faster; the margin
#: a win must also clear is checked on the medians.
PAIRED_ALPHA = 0.01


def spread(timing: Timing) -> float:
    """The relative spread of a timing: its interquartile range over its median."""
    if len(timing.seconds) < 4:
        return 0.0
    q = statistics.quantiles(timing.seconds, n=4)
    return (q[2] - q[0]) / timing.median


def rounds_faster(reference: Timing, timing: Timing, margin: float = 0.0) -> tuple[int, int]:
    """In how many interleaved rounds ``timing`` ran faster than ``reference`` by more than
    ``margin``, and out of how many rounds (the two timed in the same rounds, one after the other,
    so that the machine's drift over the rounds falls on both)."""
    pairs = list(zip(reference.seconds, timing.seconds))
    return sum(t < r * (1 - margin) for r, t in pairs), len(pairs)


def pick(outcomes: Sequence[Measured], baseline: str, margin: float, select: str = "measured",
         estimate: Callable[[Candidate], float] | None = None) -> Measured:
    """The best equivalent option: by measured median, which must beat ``baseline``'s by
    ``margin``; or, with ``select == "estimated"``, by ``estimate`` (ties to the baseline)."""
    ok = [o for o in outcomes if o.timing is not None]
    base = next(o for o in ok if o.label == baseline)
    if select == "estimated":
        return min(ok, key=lambda o: (estimate(o.candidate), o.label != baseline))
    best = min(ok, key=lambda o: o.median_s)
    return best if best.median_s < base.median_s * (1 - margin) else base


def speed_verdict(outcomes: list[Measured], best: Measured, margin: float = 0.0,
                  alpha: float = PAIRED_ALPHA) -> tuple[float, float, str]:
    """Speedup of the pick over the original, the timings' relative spread, and the verdict.

    "faster" when the pick's median beats the original's by ``margin`` and either the speedup
    exceeds the spread (the interquartile range over the median, the larger of the two
    timings), or the pick runs on one stream and was faster in so many of the interleaved rounds
    that chance is ruled out at ``alpha`` (:func:`consistently_faster`).
    """
    base = next(o for o in outcomes if o.label == "original")
    speedup = base.median_s / best.median_s
    noise = max(spread(base.timing), spread(best.timing))
    if best.label == "original":
        return speedup, noise, "unchanged"
    by_margin = best.median_s < base.median_s * (1 - margin)
    faster = by_margin and (speedup - 1 > noise or consistently_faster(base, best, alpha))
    return speedup, noise, ("faster" if faster else "no measurable change")


def consistently_faster(base: Measured, best: Measured, alpha: float = PAIRED_ALPHA) -> bool:
    """Whether ``best`` ran faster than ``base`` in significantly more of the interleaved rounds
    than chance gives (a one-sided sign test at ``alpha``).

    Each round times both one after the other, so a drift of the machine's speed falls on both
    and a small steady gain shows through a spread larger than itself. Not for an option on
    several streams: its speed depends on the other core being free, which the rounds of one
    timing do not vary, so it must beat the spread itself.
    """
    if best.candidate.on_streams:
        return False
    wins, rounds = rounds_faster(base.timing, best.timing)
    return sign_test(wins, rounds) < alpha
