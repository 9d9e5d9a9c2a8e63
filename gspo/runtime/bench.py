"""The timing harness: warm-up, interleaved rounds (A B, B A, ...), medians, minima, ratios.

Every measurement in gspo goes through here: :func:`interleaved` compares runners (``gspo
bench``, optimize's verification and confirmation, placement), :func:`median_seconds` times one
callable until a time target is met (calibration and its evaluation). Sessions are built before
timing, never inside the loop. Idle onnxruntime threads do not spin
(``SessionConfig.allow_spinning`` is off), and the order of the runners rotates every round so
that neither is always first after the other. A runner that times itself on the device (the
CUDA executor's :meth:`timed_runner`, with CUDA events) returns a :class:`DeviceTime`, which is
taken instead of the host's clock.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["DeviceTime", "Repeats", "Timing", "calls_per_sample", "interleaved", "measure_once", "median_seconds", "timed_runner",
           "warm_sample"]


class DeviceTime(float):
    """Seconds a runner measured on the device itself (CUDA events on its streams)."""


def measure_once(fn: Callable[[], object]) -> float:
    """Seconds of one call of ``fn``: its :class:`DeviceTime` if it returns one, else the host's clock."""
    start = time.perf_counter()
    result = fn()
    elapsed = time.perf_counter() - start
    return float(result) if isinstance(result, DeviceTime) else elapsed


def timed_runner(executor, feeds) -> Callable[[], object]:
    """What to time for one run of ``executor`` on ``feeds``: its own ``timed_runner(feeds)`` where it
    has one (inputs uploaded once, device time only), else ``executor.run(feeds)``."""
    own = getattr(executor, "timed_runner", None)
    return own(feeds) if own is not None else (lambda: executor.run(feeds))


def warm_sample(run: Callable[[], object], calls: int = 1) -> Callable[[], DeviceTime]:
    """One sample of ``run`` for :func:`interleaved`: an untimed call, then ``calls`` timed calls
    in a row; returns their mean seconds (device time where ``run`` reports it). The untimed call
    takes the cost of switching from another runtime (its idle threads waking, another pool's
    still spinning), which a model called in a row, as it is deployed, does not pay: one call
    right after another runtime's ran bert_ort_fused's 2-thread sessions 35% slower than in a
    row. Several calls a sample steady a model of microseconds."""
    if calls < 1:
        raise ValueError("calls must be >= 1")

    def sample() -> DeviceTime:
        run()
        total = 0.0
        for _ in range(calls):
            total += measure_once(run)
        return DeviceTime(total / calls)
    return sample


def calls_per_sample(runs: Sequence[Callable[[], object]], min_seconds: float = 0.01, most: int = 1000) -> int:
    """Calls per sample of :func:`warm_sample`, the same for every runner: enough that the fastest
    runner's sample lasts ``min_seconds`` (each runner called twice, the second call, warm, timed)."""
    fastest = math.inf
    for run in runs:
        for _ in range(2):
            start = time.perf_counter()
            run()
        fastest = min(fastest, time.perf_counter() - start)
    return max(1, min(most, math.ceil(min_seconds / max(fastest, 1e-7))))


@dataclass(frozen=True)
class Repeats:
    """How often :func:`median_seconds` runs a callable: ``warmup`` untimed calls, then at least
    ``min_runs`` timed ones, more until ``target_s`` seconds have been spent, at most ``max_runs``."""

    min_runs: int = 5
    max_runs: int = 30
    target_s: float = 0.1
    warmup: int = 2


@dataclass(frozen=True)
class Timing:
    """The seconds of each timed run of one runner."""

    label: str
    seconds: tuple[float, ...]

    @property
    def median(self) -> float:
        """The median run, in seconds."""
        return statistics.median(self.seconds)

    @property
    def min(self) -> float:
        """The fastest run, in seconds."""
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
            times[i].append(measure_once(runners[i][1]))
        if progress is not None:
            progress(r + 1)
    return [Timing(label, tuple(t)) for (label, _), t in zip(runners, times)]


def median_seconds(fn: Callable[[], object], repeats: Repeats = Repeats()) -> float:
    """Median seconds of ``fn`` over the runs ``repeats`` asks for (after its warm-up calls); a
    :class:`DeviceTime` that ``fn`` returns is taken instead of the host's clock."""
    for _ in range(repeats.warmup):
        fn()
    times: list[float] = []
    spent = 0.0
    while len(times) < repeats.min_runs or (spent < repeats.target_s and len(times) < repeats.max_runs):
        times.append(measure_once(fn))
        spent += times[-1]
    return statistics.median(times)
