"""Timing discipline: warm-up, interleaved rounds (A B, B A, ...), medians, minima, ratios.

Sessions are built before timing, never inside the loop. Idle onnxruntime threads do not spin
(``SessionConfig.allow_spinning`` is off), and the order of the runners rotates every round so
that neither is always first after the other.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["Timing", "interleaved"]


@dataclass(frozen=True)
class Timing:
    label: str
    seconds: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def min(self) -> float:
        return min(self.seconds)

    def ratio_to(self, reference: Timing) -> float:
        """How many times faster than ``reference`` (its median over ours)."""
        return reference.median / self.median


def interleaved(
    runners: Sequence[tuple[str, Callable[[], object]]],
    runs: int = 20,
    warmup: int = 3,
    pause: float = 0.0,
    progress: Callable[[int], None] | None = None,
) -> list[Timing]:
    """Time each runner ``runs`` times, interleaved in one process; returns one Timing each."""
    if runs < 1 or warmup < 0:
        raise ValueError("runs must be >= 1 and warmup >= 0")
    for _ in range(warmup):
        for _, fn in runners:
            fn()
    times: list[list[float]] = [[] for _ in runners]
    k = len(runners)
    for r in range(runs):
        for j in range(k):
            i = (r + j) % k
            if pause:
                time.sleep(pause)
            start = time.perf_counter()
            runners[i][1]()
            times[i].append(time.perf_counter() - start)
        if progress is not None:
            progress(r + 1)
    return [Timing(label, tuple(t)) for (label, _), t in zip(runners, times)]
