"""The timing harness: warm-up, interleaved rounds (A B, B A, ...), medians, minima, ratios.

Every measurement in gspo goes through here: :func:`interleaved` compares runners (``gspo
bench``, optimize's verification and confirmation, placement), :func:`median_seconds` times one
callable until a time target is met (calibration and its evaluation). Sessions are built before
timing, never inside the loop. Idle onnxruntime threads do not spin
(``SessionConfig.allow_spinning`` is off), and the order of the runners rotates every round so
that neither is always first after the other. A runner that times itself on the device (the
CUDA executor's :meth:`timed_runner`, with CUDA events) returns a :class:`DeviceTime`, which is
taken instead of the host's clock. :func:`bursts` times runners as served models are called:
short bursts after idle time (:func:`burst_sample`), the first calls after idle weighing in.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["BURST_CALLS", "BURST_PAUSE_S", "DeviceTime", "Repeats", "Timing", "burst_sample", "bursts", "calls_per_sample",
           "interleaved", "measure_once", "median_seconds", "timed_runner", "warm_sample"]


class DeviceTime(float):
    """Seconds a runner measured on the device itself (CUDA events on its streams)."""


def measure_once(fn: Callable[[], object], clock: Callable[[], float] | None = None) -> float:
    """Seconds of one call of ``fn``: its :class:`DeviceTime` if it returns one, else ``clock``'s
    (default: ``time.perf_counter``)."""
    clock = clock or time.perf_counter
    start = clock()
    result = fn()
    elapsed = clock() - start
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


#: A served model is called in bursts after idle time (issue 51): the calls of a burst, and the
#: idle time before it. After 0.2 s every runtime's idle threads have stopped spinning and gone
#: to sleep (onnxruntime as installed spins a core for 20-50 ms after a call), so the first call
#: of the burst pays their wake-up, which calls back to back never do.
BURST_CALLS = (3, 5)
BURST_PAUSE_S = 0.2


def burst_sample(run: Callable[[], object], calls: int | tuple[int, int] = BURST_CALLS, pause: float = BURST_PAUSE_S,
                 clock: Callable[[], float] | None = None,
                 sleep: Callable[[float], object] | None = None) -> Callable[[], DeviceTime]:
    """One sample of ``run`` as a served model is called (for :func:`interleaved`, whose rounds
    rotate the runners): ``pause`` seconds idle, one untimed call, then a burst of ``calls``
    calls timed together; returns the burst's mean seconds a call (its device time where ``run``
    reports it; ``clock`` and ``sleep`` default to :mod:`time`'s). ``calls`` a pair ``(lo, hi)``:
    the bursts cycle through ``lo..hi`` calls, the same sizes in the same order for every runner.
    The mean, not the burst's median: the first calls after idle are what this sample is for, and
    a median of three would drop them."""
    lo, hi = (calls, calls) if isinstance(calls, int) else calls
    if lo < 1 or hi < lo or pause < 0:
        raise ValueError("a burst needs 1 <= lo <= hi calls and a pause >= 0")
    sizes = list(range(lo, hi + 1))
    taken = [0]
    sleep = sleep or time.sleep

    def sample() -> DeviceTime:
        n = sizes[taken[0] % len(sizes)]
        taken[0] += 1
        if pause:
            sleep(pause)
        run()
        total = 0.0
        for _ in range(n):
            total += measure_once(run, clock)
        return DeviceTime(total / n)
    return sample


def bursts(runners: Sequence[tuple[str, Callable[[], object]]], rounds: int = 20,
           calls: int | tuple[int, int] = BURST_CALLS, pause: float = BURST_PAUSE_S, warmup: int = 1,
           clock: Callable[[], float] | None = None, sleep: Callable[[float], object] | None = None,
           progress: Callable[[int], None] | None = None) -> list[Timing]:
    """Time each runner as a served model is called: ``rounds`` rounds in rotating order, each
    runner in turn a :func:`burst_sample` (``pause`` idle, one untimed call, ``calls`` timed
    calls); one Timing each, of the bursts' mean seconds a call (``warmup`` rounds untimed
    first). Seconds it takes: ``(rounds + warmup) * len(runners) * pause`` idle beside the calls."""
    samples = [(label, burst_sample(run, calls, pause, clock, sleep)) for label, run in runners]
    return interleaved(samples, rounds, warmup, progress=progress)


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
