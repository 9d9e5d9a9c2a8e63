"""The time of one ``optimize`` run (``--time-budget``): a :class:`Timebox`, the run's deadline
counted from its start (loading and the front end included; ``gspo optimize``'s imports too) and
the deadlines each stage may use, computed from the run's :class:`Plan` of shares; beside it the
run's :class:`RunLog`, which records the work skipped to hold the deadline (the report's
``skipped``) and learns what building a session costs (:class:`~gspo.search.build_costs.BuildRates`).

Seconds become deadlines where they enter (:meth:`Timebox.of`); every share of the time is a
:class:`Timebox` of its own, frozen, whose deadline is never later than its parent's, and all of
them record into the one run's log. Every stage asks its timebox before it starts a piece of work
it cannot interrupt (a search step, building or compiling a session, a timing) and skips the work
that would run past its deadline, saying so with :meth:`Timebox.skip`. A timebox without a limit
(``seconds=None``) allows everything and records nothing, so a run without one does exactly what
it did before.

Example:
    >>> clock = iter([0.0, 1.0, 1.0, 7.0]).__next__
    >>> b = Timebox.of(10.0, clock=clock)   # started at 0
    >>> round(b.remaining(), 1)             # at 1.0
    9.0
    >>> search = b.share(0.5)               # at 1.0: half of what is left
    >>> search.end.at
    5.5
    >>> search.expired()                    # at 7.0
    True
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gspo.records import Skip
from gspo.search.build_costs import BuildRates
from gspo.timing.deadline import Deadline

__all__ = ["MAX_FINAL", "Plan", "RunLog", "Shares", "Timebox"]


@dataclass(frozen=True)
class Shares:
    """How a budget is divided among the stages of ``optimize``.

    ``search``: the fraction of what loading, checking and partitioning left that the search
    gets (spread over the pieces and jobs). ``final``: the fraction of the whole budget kept
    for the whole-model comparison and its confirmation. Piece verification and backend
    placement share the rest, ``placement`` of it kept for timing the pieces on the backends
    other than onnxruntime's CPU provider (when there are any). The search and final shares
    were measured on NASNet-A Large (24 pieces), where verification and the final comparison
    of a 500 ms model take longer than the search (benchmarks/RESULTS.md). ``precision``: the
    fraction of the whole budget kept at its end, when ``--precision`` asks for a reduced one,
    for fitting the reduced-precision candidates to ``--max-error`` and confirming them against
    the exact pick (:meth:`Timebox.precision_share`); the stages before it share the rest as
    they share a whole budget without it.
    """

    search: float = 0.5
    final: float = 0.2
    placement: float = 0.4
    precision: float = 0.5


#: At most this much of what is left after loading goes to the final comparison: the whole model
#: on another backend is where most real models gained (OpenVINO ran 25 of 33 faster than
#: onnxruntime), the pieces' search on a few; on NASNet-A Large (1,242 ops, 0.28 s a run) at
#: --time-budget 60, half of what was left could not hold compiling it for OpenVINO and timing it.
MAX_FINAL = 2 / 3


@dataclass
class RunLog:
    """What one run learns and records as it keeps time, shared by every share of its time.

    Attributes:
        skipped: the work skipped to hold the deadline (the report's ``skipped``), in order.
        rates: what building a session costs in this run (:class:`~gspo.search.build_costs.BuildRates`).
    """

    skipped: list[Skip] = field(default_factory=list)
    rates: BuildRates = field(default_factory=BuildRates)

    def skip(self, stage: str, what: str, why: str) -> None:
        """Record work skipped to hold the deadline (for the report)."""
        self.skipped.append(Skip(stage, what, why))


@dataclass(frozen=True)
class Plan:
    """The run's plan of shares, fixed once its final comparison's reserve is known.

    Attributes:
        shares: how the time is divided among the stages.
        started: when the run began on the clock.
        seconds: the exact stages' seconds (``None``: no limit); less than the whole budget by
            :attr:`Shares.precision` of it when the run fits a reduced precision after them.
        whole: the end of the whole budget (the precision fit's, when the run has one).
        final_s: seconds kept for the final comparison: its share of :attr:`seconds`, or more once
            :meth:`Timebox.reserve_final` asked for more.
    """

    shares: Shares
    started: float
    seconds: float | None
    whole: Deadline
    final_s: float

    def extra_final(self) -> float:
        """Seconds kept for the final comparison beyond its share."""
        return max(0.0, self.final_s - self.shares.final * self.seconds)


@dataclass(frozen=True)
class Timebox:
    """The time one stage of a run may use: its deadline (:attr:`end`), the run's :class:`Plan` of
    shares and the run's :class:`RunLog` (see the module docstring). Made by :meth:`of` where the
    seconds enter; its shares are timeboxes of their own (:meth:`share`, :meth:`until_final`, ...)."""

    end: Deadline
    plan: Plan
    run: RunLog = field(default_factory=RunLog, compare=False)

    @classmethod
    def of(cls, seconds: float | None, shares: Shares = Shares(), clock: Callable[[], float] = time.perf_counter,
           run: RunLog | None = None, started: float | None = None, reduced: bool = False) -> Timebox:
        """The run's time: ``seconds`` from its start (``None``: no limit).

        Args:
            seconds: the whole budget (``--time-budget``; ``None``: no limit).
            shares: how it is divided among the stages.
            clock: seconds, monotonic (:func:`time.perf_counter`; tests pass a fake one).
            run: the run's :class:`RunLog` (its work skipped, the report's ``skipped``, which
                :meth:`skip` appends to, and its build rates; one of its own when not given).
            started: when the run began on ``clock`` (``None``: now; never later than now), so that
                what came before counts (``gspo optimize``: its imports).
            reduced: whether the run fits a reduced precision after the exact stages: then
                :attr:`Shares.precision` of ``seconds`` is kept at the end for it
                (:meth:`precision_share`), and :attr:`seconds` and :attr:`end` are the exact stages'.
        """
        now = clock()
        began = now if started is None else min(started, now)
        whole = Deadline(None if seconds is None else began + seconds, clock)
        exact = None if seconds is None else seconds * (1 - shares.precision if reduced else 1.0)
        plan = Plan(shares, began, exact, whole, 0.0 if exact is None else shares.final * exact)
        return cls(Deadline(None if exact is None else began + exact, clock), plan, RunLog() if run is None else run)

    # The plan's and the run's parts, read where the stages read them.
    clock = property(lambda self: self.end.clock, doc="The run's clock.")
    started = property(lambda self: self.plan.started, doc="When the run began on :attr:`clock`.")
    seconds = property(lambda self: self.plan.seconds, doc="The exact stages' seconds (``None``: no limit).")
    shares = property(lambda self: self.plan.shares, doc="How the time is divided among the stages.")
    whole = property(lambda self: self.plan.whole, doc="The end of the whole budget.")
    final_s = property(lambda self: self.plan.final_s, doc="Seconds kept for the final comparison.")
    log = property(lambda self: self.run.skipped, doc="The run's record of the work skipped.")
    rates = property(lambda self: self.run.rates, doc="What building a session costs in this run.")

    @property
    def limited(self) -> bool:
        """Whether there is a deadline at all."""
        return self.end.limited

    def remaining(self) -> float:
        """Seconds left before the deadline (never negative; infinite without a limit)."""
        return self.end.remaining()

    def expired(self) -> bool:
        """Whether the deadline has passed."""
        return self.end.expired()

    def fits(self, seconds: float) -> bool:
        """Whether work expected to take ``seconds`` ends before the deadline."""
        return self.end.fits(seconds)

    def _within(self, end: Deadline) -> Timebox:
        """The share of this time that ends at ``end`` or at this deadline, whichever comes first."""
        return dataclasses.replace(self, end=self.end.earlier(end.at))

    def precision_share(self) -> Timebox:
        """The reduced-precision fit's time: from now to the end of the whole budget (at least
        :attr:`Shares.precision` of it, kept at its end), its final comparison's time all of it."""
        final_s = 0.0 if self.seconds is None else self.whole.remaining()
        return dataclasses.replace(self, end=self.whole, plan=dataclasses.replace(self.plan, final_s=final_s))

    def keeping(self, seconds: float) -> Timebox:
        """The share that ends ``seconds`` before this one (for work that must come after it)."""
        if not self.limited:
            return self
        return self._within(Deadline(self.end.at - max(0.0, seconds), self.clock))

    def share(self, fraction: float) -> Timebox:
        """A share of ``fraction`` of the seconds left now (no limit without one)."""
        return self._within(self.end.share(fraction))

    def reserve_final(self, seconds: float) -> Timebox:
        """This time with ``seconds`` kept for the final comparison when that is more than its
        share of the whole budget, but never more than :data:`MAX_FINAL` of what is left now; what
        is kept beyond the share is taken from the stages before it (:meth:`search_share`,
        :meth:`until_final`)."""
        if not self.limited:
            return self
        final_s = max(self.shares.final * self.seconds, min(seconds, MAX_FINAL * self.remaining()))
        return dataclasses.replace(self, plan=dataclasses.replace(self.plan, final_s=final_s))

    def until_final(self) -> Timebox:
        """The share that ends when the final comparison's time (:attr:`Shares.final` of the
        whole budget, or what :meth:`reserve_final` kept) must begin."""
        if not self.limited:
            return self
        return self._within(Deadline(self.end.at - self.final_s, self.clock))

    def search_share(self) -> Timebox:
        """The search's share: :attr:`Shares.search` of what is left now, less what
        :meth:`reserve_final` kept beyond the final comparison's share."""
        if not self.limited:
            return self
        now = self.clock()
        left = max(0.0, self.end.at - now - self.plan.extra_final())
        return self._within(Deadline(now + self.shares.search * left, self.clock))

    def search_seconds(self, pieces: int, jobs: int) -> float | None:
        """Seconds of search each piece may take from its start: the search's share
        (:meth:`search_share`), spread over the pieces and the processes searching them
        (``None``: no limit)."""
        if not self.limited:
            return None
        left = max(0.0, self.remaining() - self.plan.extra_final())
        return self.shares.search * left * max(1, jobs) / max(1, pieces)

    def timing(self, cap: float, fraction: float = 1.0) -> Deadline:
        """The deadline of a timing starting now: ``cap`` seconds, or ``fraction`` of what is
        left when less."""
        return Deadline(self.clock() + min(cap, fraction * self.remaining()), self.clock)

    def skip(self, stage: str, what: str, why: str) -> None:
        """Record in the run's log work skipped to hold the deadline (for the report)."""
        self.run.skip(stage, what, why)
