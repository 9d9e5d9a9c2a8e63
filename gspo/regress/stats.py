"""The gate's decision: paired rounds in, a verdict out (pure; no timing, no I/O).

Every round times the reference (the baseline artifact, or the source model) and the candidate
one after the other in one process, so a drift of the machine's speed falls on both; the round's
ratio ``candidate / reference`` is the unit of evidence. Two things must hold for a slowdown to
count, as asv ``continuous`` and Bencher's relative mode also require:

- *effect size*: the median of the paired ratios is past ``1 + threshold`` (default 5%);
- *significance*: a one-sided **sign test** over the rounds (H0: the candidate is slower in at
  most half of them) at ``alpha`` (default 1%).

Why the sign test and not Wilcoxon's signed-rank test: a machine hiccup makes a round's ratio
arbitrarily large, and the sign test counts it as one round whatever its size (the rank test
gives it the top rank); it needs no symmetry of the log-ratios, which a bimodal candidate breaks;
and its p value is exact (binomial) at any number of rounds. It is the test gspo optimize's
confirmation already uses (:func:`gspo.search.trial.sign_test`).

Rounds on a machine too busy to resolve the threshold (:func:`noise`) cannot be judged: a slowdown
is then kept only when it is clearly beyond the noise, and anything else is "could not measure"
(the gate's ``ERROR``), neither a false alarm nor a false pass.

When the evidence is short of a decision (the median past the threshold but the test not
significant, or the ratio's confidence interval straddling the threshold), the rounds are
extended once (:data:`UNDECIDED`); after that the verdict is final, and a median past the
threshold without significance is ``suspicious`` (reported, never a failure).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from gspo.timing.stats import sign_test

__all__ = ["ALPHA", "THRESHOLD", "Decision", "UNDECIDED", "decide", "median_interval", "noise", "noise_limit"]

#: Default slowdown a model may show before it can fail (5% of its baseline's latency).
THRESHOLD = 0.05
#: The one-sided significance level of the sign test.
ALPHA = 0.01
#: The interim verdict that asks for the rounds to be extended once.
UNDECIDED = "undecided"
#: The confidence of the interval reported (and plotted) for the median ratio.
CONFIDENCE = 0.95
#: The most round-to-round noise a threshold can be resolved in, as a multiple of the threshold
#: (and at least :data:`NOISE_FLOOR`): see :func:`noise`.
NOISE_FACTOR = 3.0
NOISE_FLOOR = 0.15


@dataclass(frozen=True)
class Decision:
    """One comparison's figures and verdict.

    Attributes:
        ratio: the median over the rounds of candidate / reference (> 1: the candidate is slower).
        low, high: the distribution-free :data:`CONFIDENCE` interval of that median.
        slower, rounds: in how many of the paired rounds the candidate was slower.
        p_slower, p_faster: the one-sided sign tests' p values.
        verdict: ``ok``, ``faster``, ``slower`` (past the threshold and significant),
            ``suspicious`` or :data:`UNDECIDED`.
    """

    ratio: float
    low: float
    high: float
    slower: int
    rounds: int
    p_slower: float
    p_faster: float
    threshold: float
    verdict: str

    def to_json(self) -> dict:
        """The decision as JSON."""
        return dict(self.__dict__)


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The distribution-free confidence interval of the median: the order statistics
    ``x_(k)`` and ``x_(n-k+1)`` with the largest ``k`` whose binomial tail stays within
    ``(1 - confidence) / 2`` (the whole range when there are too few values)."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        return math.nan, math.nan
    tail = (1 - confidence) / 2
    k, cumulative = 0, 0.0
    while k < n // 2:  # the largest k with P(Binom(n, 1/2) <= k - 1) <= tail
        cumulative += math.comb(n, k) / 2**n
        if cumulative > tail:
            break
        k += 1
    if k == 0:
        return xs[0], xs[-1]
    return xs[k - 1], xs[n - k]


def noise(reference: Sequence[float], other: Sequence[float]) -> float:
    """How much the machine moved the paired ratio of two versions between rounds: the
    interquartile range of ``log(other / reference)``. The gate takes it between the source and
    the baseline artifact, which the candidate cannot change, or between the baseline and the
    candidate when that ratio is steadier (the source, at its users' thread setting, can jitter
    by itself on a model of microseconds). On a quiet 2-core machine it is a
    few percent; when other work competes for the cores it reaches 15-85% (measured with 8
    runnable processes on 2 cores), and no 5% threshold can be resolved in it."""
    logs = [math.log(o / r) for r, o in zip(reference, other)]
    if len(logs) < 4:
        return 0.0
    q = statistics.quantiles(logs, n=4)
    return q[2] - q[0]


def noise_limit(threshold: float) -> float:
    """The most :func:`noise` in which ``threshold`` can be judged."""
    return max(NOISE_FLOOR, NOISE_FACTOR * threshold)


def _verdict(ratio: float, low: float, high: float, p_slower: float, p_faster: float,
             threshold: float, alpha: float, final: bool) -> str:
    limit = 1 + threshold
    straddles = low <= limit <= high
    if ratio > limit:
        if p_slower < alpha and (final or not straddles):
            return "slower"
        return "suspicious" if final else UNDECIDED
    if not final and straddles and p_slower < alpha:
        return UNDECIDED  # just under the threshold and consistently slower: look closer
    if ratio < 1 / limit and p_faster < alpha:
        return "faster"
    return "ok"


def decide(reference: Sequence[float], candidate: Sequence[float], threshold: float = THRESHOLD,
           alpha: float = ALPHA, final: bool = True) -> Decision:
    """The verdict on ``candidate`` against ``reference``, paired round by round.

    Args:
        reference, candidate: seconds per round (the same rounds, the same length, positive).
        threshold: the slowdown allowed before a model can fail (0.05: 5%).
        alpha: the sign test's one-sided level.
        final: whether the rounds can no longer be extended (else an unclear case is
            :data:`UNDECIDED`).

    >>> decide([1.0] * 20, [1.2] * 20).verdict
    'slower'
    >>> decide([1.0, 1.01] * 10, [1.01, 1.0] * 10).verdict
    'ok'
    """
    if len(reference) != len(candidate) or not reference:
        raise ValueError("decide needs the same, non-zero number of rounds for both")
    if min(min(reference), min(candidate)) <= 0:
        raise ValueError("round times must be positive")
    ratios = [c / r for r, c in zip(reference, candidate)]
    logs = [math.log(x) for x in ratios]
    ratio = math.exp(statistics.median(logs))
    lo, hi = median_interval(logs)
    n = len(ratios)
    slower = sum(x > 1 for x in ratios)
    faster = sum(x < 1 for x in ratios)
    p_slower, p_faster = sign_test(slower, n), sign_test(faster, n)
    verdict = _verdict(ratio, math.exp(lo), math.exp(hi), p_slower, p_faster, threshold, alpha, final)
    return Decision(ratio, math.exp(lo), math.exp(hi), slower, n, p_slower, p_faster, threshold, verdict)
