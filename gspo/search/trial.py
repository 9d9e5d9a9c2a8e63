"""On-board verification: run options against a reference, reject what differs or fails, time
the rest interleaved, and pick the winner.

An *option* is a graph (and a schedule) that could replace the reference. A :class:`Trial`
builds each option into an executor once, has its judge check its outputs
(:mod:`gspo.search.judge`: by default against the reference's on the same inputs, the
scale-aware criterion of :mod:`gspo.runtime.verify`), and rejects, with the reason, every option
that onnxruntime refuses to load or run or whose outputs the judge refuses. The
equivalent options can then be timed any number of times (the confirmation of a final choice
reuses the sessions, which on a large model take longer to build than to time).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.runtime import (
    CpuExecutor,
    DeviceTime,
    interleaved,
    timed_runner,
    warm_sample,
)
from gspo.runtime.backends import DEFAULT_BACKEND
from gspo.runtime.bench import burst_sample
from gspo.runtime.settings import RunSettings
from gspo.runtime.spill import Spill
from gspo.runtime.verify import Tolerance, output_steps
from gspo.search.budget import Timebox
from gspo.search.build_costs import BuildRates, build_depth, build_ops, weight_bytes
from gspo.search.candidate import Candidate, Measured
from gspo.search.judge import Judge, Verdict, judge_of
from gspo.search.strategies import Measure
from gspo.streams import Placement, Schedule
from gspo.timing import Deadline

__all__ = ["BURST_CALLS", "BURST_PAUSE_S", "BURST_ROUNDS", "CONFIRM_MAX_ROUNDS", "CONFIRM_ROUNDS", "MIN_ROUNDS",
           "ReferenceError_", "Trial", "WARMUP_ROUNDS", "build_seconds", "burst_seconds", "sample_seconds"]

#: The fewest interleaved rounds a timing takes, however short its budget; and the rounds run
#: before them, untimed.
MIN_ROUNDS = 5
WARMUP_ROUNDS = 3
#: Rounds a confirmation is kept time for: 11 timed, in which a steady gain may lose one round
#: and pass the sign test, and the warm-up; and the rounds it takes when the budget has the time:
#: 20 timed, in which it may lose four. This machine's speed shifts by up to 25% for seconds at a
#: time, and a round that straddles a shift can go the other way: NASNet-A Large on OpenVINO, 10%
#: faster by median, won 8 of 11 rounds and failed. A gain that wins 9 rounds in 10 passes in 20
#: rounds 96% of the time, in 11 70%; but keeping time for 20 left NASNet-A Large no time to try
#: OpenVINO at all at --time-budget 60.
CONFIRM_ROUNDS = 11 + WARMUP_ROUNDS
CONFIRM_MAX_ROUNDS = 20 + WARMUP_ROUNDS
#: Options whose calls all take less than this are timed in warm samples
#: (:func:`~gspo.runtime.warm_sample`: an untimed call, then the timed ones), as a deployed model
#: runs, called in a row: timed right after another runtime's call, gpt2's original at 2 threads
#: measured slower than at 1, the other way round from in a row. A slower model pays the switch
#: in a small part of its call, and a warm call would halve its rounds.
WARM_BELOW_S = 0.05
#: A warm sample of a model of microseconds makes this many seconds of calls in a row (at most
#: 100 calls).
MIN_SAMPLE_S = 0.002


#: A thread setting is also confirmed as a served model is called (issue 51): in bursts of
#: ``BURST_CALLS`` calls, each after ``BURST_PAUSE_S`` idle and one untimed call
#: (:func:`~gspo.runtime.bench.burst_sample`), ``BURST_ROUNDS`` rounds after one untimed round.
#: The shortest of the issue's bursts (the first calls after idle weigh most in it); half its
#: pause, which is past onnxruntime's spin (20-50 ms, benchmarks/placement/run.py) and keeps the
#: idle time a confirmation costs at ``(BURST_ROUNDS + 1) * 2 * BURST_PAUSE_S`` = 2.4 s.
BURST_CALLS = 3
BURST_PAUSE_S = 0.1
BURST_ROUNDS = 11


def burst_seconds(run_s: float, runners: int = 2) -> float:
    """Seconds a timing in bursts of ``runners`` runners whose call takes ``run_s`` lasts, its
    untimed round and the pauses included."""
    return (BURST_ROUNDS + 1) * runners * (BURST_PAUSE_S + (BURST_CALLS + 1) * run_s)


def _calls_per_sample(run_s: float) -> int:
    return max(1, min(100, math.ceil(MIN_SAMPLE_S / max(run_s, 1e-7))))


def sample_seconds(run_s: float) -> float:
    """Seconds one timed sample of a model whose call takes ``run_s`` lasts, its untimed call
    included (see :data:`WARM_BELOW_S`)."""
    return run_s if run_s >= WARM_BELOW_S else (_calls_per_sample(run_s) + 1) * run_s


class ReferenceError_(GspoError):
    """The reference itself cannot be run (so nothing can be verified against it)."""


def build_seconds(option: Candidate, rates: BuildRates) -> float:
    """Seconds that building ``option``'s sessions is expected to take (each backend's share of
    its ops; see :class:`~gspo.search.budget.BuildRates`)."""
    if option.placement is None:
        return rates.estimate(DEFAULT_BACKEND, build_ops(option.graph))
    counts = option.placement.counts(option.graph)
    if len(counts) == 1:  # the whole model on one backend
        return rates.estimate(next(iter(counts)), build_ops(option.graph), weight_bytes(option.graph),
                              build_depth(option.graph))
    return sum(rates.estimate(b, ops) for b, ops in counts.items())


def _executor(graph: Graph, schedule: Schedule | None, placement: Placement | None = None,
              settings: RunSettings = RunSettings()) -> CpuExecutor:
    return CpuExecutor(graph, schedule if schedule and schedule.num_streams > 1 else None,
                       settings.session_config(), placement=placement)


class Trial:
    """A reference and its options, verified on ``feeds`` (one or more input sets); see the
    module docstring. Use as a context manager: it closes the executors. ``judge`` says what an
    option must hold (:mod:`gspo.search.judge`; a :class:`~gspo.runtime.verify.Tolerance`: the
    exact judge with it). ``executor(graph,
    schedule, placement, settings)`` builds the options' executors (default: on the CPU; the reference
    always runs on the CPU, and with another ``executor`` every option runs on it, the reference's
    graph too). ``measure`` times the equivalent options interleaved (:func:`gspo.runtime.interleaved`;
    tests pass a fake), and what building them took is read on ``timebox``'s clock.

    Raises:
        ReferenceError_: onnxruntime cannot load or run the reference.
    """

    def __init__(self, reference: Graph, options: Sequence[Candidate], feeds: Sequence[Mapping[str, np.ndarray]],
                 judge: Judge | Tolerance = Tolerance(), timebox: Timebox | None = None, stage: str = "final",
                 executor: Callable | None = None, measure: Measure = interleaved):
        self.feeds = list(feeds)
        self.measure = measure
        #: What building a session took is read on the budget's clock (the one its estimates run on).
        self.clock = timebox.clock if timebox is not None else time.perf_counter
        self._make = executor or _executor
        self.judge = judge_of(judge)
        self.timebox, self.stage = timebox, stage
        self.executors: list[CpuExecutor] = []
        self.rejected: list[Measured] = []
        self._ok: list[tuple[Candidate, CpuExecutor, Verdict]] = []
        #: Seconds of one run of the reference (what an option's checks and timing are expected to take).
        self.run_s = 0.0
        self._spill = Spill()  # large reference outputs wait in a file, not beside the candidates'
        self.steps = output_steps(reference)  # the quantized outputs may be a step apart
        try:
            expected = self._reference(reference)
            for option in options:
                if (executor is None and option.schedule is None and option.placement is None
                        and option.settings.is_default and option.graph.key == reference.key):
                    self._same(option, expected)
                    continue
                if self._fits(option):
                    self._add(option, expected)
        except BaseException:
            self.close()
            raise
        finally:
            self._spill.close()

    def _reference(self, reference: Graph) -> list[dict[str, np.ndarray]]:
        """Build and run the reference (timed: the budget learns what building and running cost)."""
        try:
            began = self.clock()
            ref = _executor(reference, None)
            built = self.clock()
            self.executors.append(ref)
            outputs, runs = [], []
            for f in self.feeds:
                start = time.perf_counter()
                outputs.append(ref.run(f))
                runs.append(time.perf_counter() - start)
            expected = self._spill.outputs(outputs)
            del outputs
        except GspoError as e:
            raise ReferenceError_(str(e)) from None
        # the faster run: the first one also warms the session up (NASNet-A Large's first run
        # took 1.5x its second), and every later estimate multiplies this
        self.run_s = min(runs, default=0.0)
        if self.timebox is not None:
            self.timebox.rates.record(DEFAULT_BACKEND, build_ops(reference), built - began)
        return expected

    def _fits(self, option: Candidate) -> bool:
        """Whether building, checking and then timing ``option`` (at least :data:`MIN_ROUNDS`
        rounds, beside the options already kept; in the final and the reduced-precision
        comparisons, then confirming a win against the original) ends before the budget's
        deadline; if not, the option is skipped and the budget says so."""
        if self.timebox is None or not self.timebox.limited:
            return True
        build = build_seconds(option, self.timebox.rates)
        rounds = MIN_ROUNDS + WARMUP_ROUNDS
        sample = sample_seconds(self.run_s)
        need = build + len(self.feeds) * self.run_s + rounds * sample * (len(self._ok) + 2)
        if self.stage in ("final", "precision"):  # and then a win's confirmation against the original, in a timing of its own
            need += CONFIRM_ROUNDS * sample * 2
            if not option.settings.is_default:  # a thread setting's, in bursts after idle too
                need += burst_seconds(self.run_s)
        if self.timebox.fits(need):
            return True
        self.timebox.skip(self.stage, option.label, f"building, checking and timing it was estimated at {need:.1f} s, "
                                                    f"{self.timebox.remaining():.1f} s were left")
        return False

    def _record_build(self, option: Candidate, seconds: float) -> None:
        """Teach the budget what building ``option`` took, when it ran on one backend alone."""
        if self.timebox is None:
            return
        counts = option.placement.counts(option.graph) if option.placement is not None else {}
        if len(counts) <= 1:
            self.timebox.rates.record(next(iter(counts), DEFAULT_BACKEND), build_ops(option.graph), seconds)

    def _add(self, option: Candidate, expected: list[dict]) -> None:
        try:
            began = self.clock()
            ex = self._make(option.graph, option.schedule, option.placement, option.settings)
            self._record_build(option, self.clock() - began)
        except GspoError as e:
            backend = "onnxruntime" if option.placement is None else "the backend"
            self.rejected.append(Measured(option, rejected=f"{backend} refused it: {e}"))
            return
        self.executors.append(ex)
        self._judged(option, ex, expected)

    def _same(self, option: Candidate, expected: list[dict]) -> None:
        """The reference's own graph as an option: it runs on the reference's executor, and holds
        without a run where the judge trusts it (the exact judge)."""
        if self.judge.trusts_identity:
            self._ok.append((option, self.executors[0], Verdict()))
        else:
            self._judged(option, self.executors[0], expected)

    def _judged(self, option: Candidate, ex, expected: list[dict]) -> None:
        """``option`` (built into ``ex``) kept or rejected by the judge's verdict."""
        try:
            v = self.judge.verdict(ex.run, self.feeds, expected, self.steps, option.label)
        except GspoError as e:
            self.rejected.append(Measured(option, rejected=f"onnxruntime failed to run it: {e}"))
            return
        if v.rejected is not None:
            self.rejected.append(Measured(option, rejected=v.rejected, diffs=v.diffs, accuracy=v.accuracy))
            return
        self._ok.append((option, ex, v))

    @property
    def equivalent(self) -> list[Candidate]:
        """The options that passed verification, in the order given."""
        return [o for o, _, _ in self._ok]

    def time(self, runs: int, until: Deadline | None = None, labels: Sequence[str] | None = None,
             bursts: bool = False) -> list[Measured]:
        """The rejected options, then the equivalent ones (those in ``labels``, when given)
        timed interleaved: ``runs`` rounds, fewer (at least 5) when what is left
        before ``until`` cannot hold them. With ``bursts``, each sample is a burst after idle
        (:data:`BURST_CALLS`, :data:`BURST_PAUSE_S`; one untimed round), as a served model is
        called. An option that fails while it is timed is rejected with the reason
        (the others are timed again); the reference failing is an error."""
        seconds = None if until is None or not until.limited else until.remaining()
        while True:
            chosen = [(o, ex, d) for o, ex, d in self._ok if labels is None or o.label in labels]
            failed: dict[str, GspoError] = {}
            try:
                return self.rejected + self._timed(chosen, runs, seconds, failed, bursts)
            except GspoError:
                if not failed or any(o.label in failed and ex is self.executors[0] for o, ex, _ in chosen):
                    raise
                for entry in [e for e in self._ok if e[0].label in failed]:
                    self._ok.remove(entry)
                    self.rejected.append(Measured(entry[0], rejected=f"failed while timed: {failed[entry[0].label]}"))

    def release(self, keep: Sequence[str]) -> None:
        """Close every executor but the reference's and those of the options in ``keep``, so
        that their memory is free before more sessions are built; the others are not timed again."""
        ref = self.executors[0]
        self._ok = [e for e in self._ok if e[0].label in keep or e[1] is ref]
        held = [ref, *(ex for _, ex, _ in self._ok)]
        for ex in self.executors:
            if not any(ex is h for h in held):
                ex.close()
        self.executors = [ex for ex in self.executors if any(ex is h for h in held)]

    def time_apart(self, runners: Sequence[tuple[Candidate, CpuExecutor | None]], runs: int,
                   until: Deadline | None = None, bursts: bool = False) -> list[Measured]:
        """``runners`` timed as :meth:`time` times the options, each an option and an executor
        built apart from the trial's (an option's graph in other session settings), ``None``
        for the trial's own executor of that option. When one fails while timed, each comes back
        rejected with the reason."""
        own = {o.label: (ex, d) for o, ex, d in self._ok}
        chosen = [(o, *(own[o.label] if ex is None else (ex, Verdict()))) for o, ex in runners]
        failed: dict[str, GspoError] = {}
        try:
            return self._timed(chosen, runs, None if until is None or not until.limited else until.remaining(),
                               failed, bursts)
        except GspoError as e:
            return [Measured(o, rejected=f"failed while timed: {failed.get(o.label, e)}") for o, _ in runners]

    def _timed(self, chosen, runs: int, seconds: float | None, failed: dict, bursts: bool = False) -> list[Measured]:
        feeds = self.feeds[0]

        def runner(option: Candidate, ex):
            run = timed_runner(ex, feeds)  # on a device: inputs uploaded once, timed by its events

            def call():
                try:
                    return run()
                except GspoError as e:
                    failed[option.label] = e
                    raise
            return call

        calls = [(o.label, runner(o, ex)) for o, ex, _ in chosen]
        firsts, on_device = [], False
        for _, call in calls:
            start = time.perf_counter()
            on_device |= isinstance(call(), DeviceTime)  # timed by the device's events: no host pools to wake
            firsts.append(time.perf_counter() - start)
        warmup = WARMUP_ROUNDS
        if bursts and not on_device:  # the device's events time the calls alone: no idle host threads
            calls = [(label, burst_sample(call, BURST_CALLS, BURST_PAUSE_S)) for label, call in calls]
            one_round = sum(firsts) * (BURST_CALLS + 1) + BURST_PAUSE_S * len(calls)
            warmup = 1
        elif firsts and not on_device and max(firsts) < WARM_BELOW_S:
            n = _calls_per_sample(min(firsts))
            calls = [(label, warm_sample(call, n)) for label, call in calls]
            one_round = sum(firsts) * (n + 1)
        else:
            one_round = sum(firsts)
        if seconds is not None and chosen:
            # the warm-up rounds come out of the budget too (they made NASNet-A Large's
            # timings run 30-40% past theirs)
            runs = max(MIN_ROUNDS, min(runs, int(seconds / max(one_round, 1e-6)) - warmup))
        timings = self.measure(calls, runs, warmup)
        return [Measured(o, t, diffs=v.diffs, accuracy=v.accuracy) for (o, _, v), t in zip(chosen, timings)]

    def close(self) -> None:
        """Free every executor the trial opened."""
        for ex in self.executors:
            ex.close()
        self.executors = []

    def __enter__(self) -> Trial:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
