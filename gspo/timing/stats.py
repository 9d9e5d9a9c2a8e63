"""The sign test of paired rounds: how likely so many wins are by chance (the search's
:mod:`gspo.search.stats` and the regression gate build their verdicts on it)."""

from __future__ import annotations

import math

__all__ = ["sign_test"]


def sign_test(wins: int, rounds: int) -> float:
    """The one-sided sign test's p value: the chance of at least ``wins`` heads in ``rounds``
    tosses of a fair coin, i.e. of so many wins in paired rounds when the median of the paired
    ratios is 1 (or more).

    Example:
        >>> sign_test(7, 7)   # winning every one of 7 rounds: chance 1 in 128
        0.0078125
    """
    if rounds <= 0:
        return 1.0
    return sum(math.comb(rounds, k) for k in range(max(0, wins), rounds + 1)) / 2 ** rounds
