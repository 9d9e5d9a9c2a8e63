"""The time budget of one ``optimize`` run (``--time-budget``): a deadline counted from the start
(loading and the front end included; ``gspo optimize``'s imports too) and the shares of it each
stage may use; what building a session costs is :mod:`gspo.search.build_costs`, and the work
skipped to hold it goes to the run's log (the report's ``skipped``).

Every stage asks its budget before it starts a piece of work it cannot interrupt (a search
step, building or compiling a session, a timing) and skips the work that would run past its
deadline, saying so with :meth:`Budget.skip`. A budget without a limit (``seconds=None``)
allows everything and records nothing, so a run without one does exactly what it did before.

Example:
    >>> clock = iter([0.0, 1.0, 1.0, 7.0]).__next__
    >>> b = Budget(10.0, clock=clock)   # started at 0
    >>> round(b.remaining(), 1)         # at 1.0
    9.0
    >>> search = b.share(0.5)           # at 1.0: half of what is left
    >>> search.end.at
    5.5
    >>> search.expired()                # at 7.0
    True
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from gspo.records import Skip
from gspo.search.build_costs import BuildRates
from gspo.timing.deadline import Deadline

__all__ = ["Budget", "MAX_FINAL", "Shares"]


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
    the exact pick (:meth:`Budget.precision_share`); the stages before it share the rest as
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


class Budget:
    """The time of one run from its start (a :class:`~gspo.search.deadline.Deadline`), and the
    budgets of its stages (see the module docstring).

    Args:
        seconds: the whole budget (``None``: no limit).
        shares: how it is divided among the stages.
        clock: seconds, monotonic (:func:`time.perf_counter`; tests pass a fake one).
        log: the run's record of the work skipped (the report's ``skipped``), which
            :meth:`skip` appends to (a list of its own when not given).
        started: when the run began on ``clock`` (``None``: now; never later than now), so that
            what came before the budget was made counts (``gspo optimize``: its imports).
        reduced: whether the run fits a reduced precision after the exact stages: then
            :attr:`Shares.precision` of ``seconds`` is kept at the end for it
            (:meth:`precision_share`), and :attr:`seconds` and :attr:`end` are the exact stages'.
    """

    def __init__(self, seconds: float | None, shares: Shares = Shares(),
                 clock: Callable[[], float] = time.perf_counter, log: list[Skip] | None = None,
                 started: float | None = None, reduced: bool = False):
        self.shares = shares
        self.clock = clock
        now = clock()
        self.started = now if started is None else min(started, now)
        #: The end of the whole budget (the precision fit's, when the run has one).
        self.whole = Deadline(None if seconds is None else self.started + seconds, clock)
        self.seconds = None if seconds is None else seconds * (1 - shares.precision if reduced else 1.0)
        self.end = Deadline(None if seconds is None else self.started + self.seconds, clock)
        self.log: list[Skip] = [] if log is None else log
        #: What building a session costs in this run (shared with every child budget).
        self.rates = BuildRates()
        #: Seconds kept for the final comparison: its share of the whole budget, or more once
        #: :meth:`reserve_final` asked for more.
        self.final_s = 0.0 if seconds is None else shares.final * self.seconds

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

    def _child(self, end: Deadline) -> Budget:
        child = object.__new__(Budget)
        child.seconds, child.shares, child.clock, child.started = self.seconds, self.shares, self.clock, self.started
        child.end = self.end.earlier(end.at)
        child.whole, child.log, child.rates, child.final_s = self.whole, self.log, self.rates, self.final_s
        return child

    def precision_share(self) -> Budget:
        """The reduced-precision fit's child budget: from now to the end of the whole budget
        (at least :attr:`Shares.precision` of it, kept at its end), its final comparison's time
        all of it."""
        child = self._child(self.end)
        child.end = self.whole
        child.final_s = 0.0 if self.seconds is None else self.whole.remaining()
        return child

    def share(self, fraction: float) -> Budget:
        """A child budget of ``fraction`` of the seconds left now (no limit without one)."""
        return self._child(self.end.share(fraction))

    def reserve_final(self, seconds: float) -> None:
        """Keep ``seconds`` for the final comparison when that is more than its share of the
        whole budget, but never more than :data:`MAX_FINAL` of what is left now; what is kept
        beyond the share is taken from the stages before it (:meth:`search_share`,
        :meth:`until_final`)."""
        if self.limited:
            self.final_s = max(self.shares.final * self.seconds, min(seconds, MAX_FINAL * self.remaining()))

    def _extra_final(self) -> float:
        """Seconds kept for the final comparison beyond its share."""
        return max(0.0, self.final_s - self.shares.final * self.seconds)

    def until_final(self) -> Budget:
        """A child budget that ends when the final comparison's time (:attr:`Shares.final` of
        the whole budget, or what :meth:`reserve_final` kept) must begin."""
        if not self.limited:
            return self._child(self.end)
        return self._child(Deadline(self.end.at - self.final_s, self.clock))

    def search_share(self) -> Budget:
        """The search's child budget: :attr:`Shares.search` of what is left now, less what
        :meth:`reserve_final` kept beyond the final comparison's share."""
        if not self.limited:
            return self._child(self.end)
        now = self.clock()
        return self._child(Deadline(now + self.shares.search * max(0.0, self.end.at - now - self._extra_final()),
                                    self.clock))

    def search_seconds(self, pieces: int, jobs: int) -> float | None:
        """Seconds of search each piece may take from its start: the search's share
        (:meth:`search_share`), spread over the pieces and the processes searching them
        (``None``: no limit)."""
        if not self.limited:
            return None
        left = max(0.0, self.remaining() - self._extra_final())
        return self.shares.search * left * max(1, jobs) / max(1, pieces)

    def timing(self, cap: float, fraction: float = 1.0) -> Deadline:
        """The deadline of a timing starting now: ``cap`` seconds, or ``fraction`` of what is
        left when less."""
        return Deadline(self.clock() + min(cap, fraction * self.remaining()), self.clock)

    def skip(self, stage: str, what: str, why: str) -> None:
        """Record in the run's log work skipped to hold the deadline (for the report)."""
        self.log.append(Skip(stage, what, why))
