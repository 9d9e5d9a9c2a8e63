"""A precision fit's expected cost, stated before it begins and shaped to its share of the time.

The fit (:mod:`gspo.precision.search`) judges a kind with every piece reduced on all the
calibration data; where that breaks the budget it ranks the pieces in one run
(:mod:`gspo.precision.sensitivity`), bisects the ranked list on a subset of the calibration
samples and judges the answer on all the calibration samples and the validation data: about
``3 + 2 + ceil(log2(n))`` judgments for ``n`` pieces, whatever the model's latency, each costing
:attr:`~gspo.precision.kind.Kind.cost` (less the runs a subset leaves out). A share too short for
the estimate cuts the subset to one sample.

Example:
    >>> p = Plan("int8", units=100, samples=8, runs=8, full_s=3.0, sample_s=0.2, share_s=60.0)
    >>> p.subset, p.judgments, round(p.seconds, 1)
    (2, 12, 25.2)
    >>> p.line()
    'int8: about 12 judgments (3 on all the data, 3.0 s each; 9 on 2 of 8 calibration samples, 1.8 s each, 2 of them ranking the pieces in one run: 25 s) in its 60 s share'
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from gspo.timing.deadline import Deadline

__all__ = ["RANKING_RUNS", "SUBSET_SAMPLES", "SUBSET_SHARE", "Plan", "plan", "subset_size"]

#: The fewest calibration samples, and the share of them, each judgment of the bisection runs
#: (the answer is judged again on all of them and on the validation data). The bisection's
#: judgments only say where in the ranked list the budget breaks; an answer the whole data set
#: breaks moves the bound and the bisection goes on, so a small subset costs at worst more
#: judgments, never a broken budget. Two samples, not one, so that no single odd sample decides;
#: BERT-base at 223 ms a call with 8 samples: 0.45 s of runs a judgment instead of 1.8 s.
SUBSET_SAMPLES = 2
SUBSET_SHARE = 0.25
#: Judgment-sized runs the one-run ranking takes: the kind with nothing reduced and with every
#: piece reduced, each with the pieces' boundary tensors as outputs, on the subset.
RANKING_RUNS = 2


def subset_size(samples: int) -> int:
    """The calibration samples a bisection judgment runs of ``samples``
    (:data:`SUBSET_SAMPLES`, :data:`SUBSET_SHARE`), never more than there are."""
    return min(samples, max(SUBSET_SAMPLES, int(samples * SUBSET_SHARE)))


@dataclass(frozen=True)
class Plan:
    """One kind's fit as expected: the kind's name, the pieces it can send back (``units``), the
    calibration samples and the runs of a judgment on all the data (the larger set), the
    seconds of that judgment and of one sample's run, the fit's share (``None``: no limit), the
    subset the bisection judges on and whether the share cut it."""

    kind: str
    units: int
    samples: int
    runs: int
    full_s: float
    sample_s: float
    share_s: float | None
    subset: int = 0
    shrunk: bool = False

    def __post_init__(self) -> None:
        if not self.subset:
            object.__setattr__(self, "subset", subset_size(self.samples))

    @property
    def probes(self) -> int:
        """The bisection's judgments on the subset: ``ceil(log2(units))``."""
        return math.ceil(math.log2(self.units)) if self.units > 1 else 0

    @property
    def full(self) -> int:
        """Judgments on all the data: every piece reduced on the calibration data, the answer
        on it and on the validation data (one piece alone: on each data set once)."""
        return 3 if self.units > 1 else 2

    @property
    def partial(self) -> int:
        """Judgments on the subset: the ranking's runs and the bisection's."""
        return RANKING_RUNS + self.probes if self.units > 1 else 0

    @property
    def judgments(self) -> int:
        """Every judgment expected."""
        return self.full + self.partial

    @property
    def subset_s(self) -> float:
        """Seconds a judgment on the subset is expected to take: the full one less the runs the
        subset leaves out."""
        return max(0.0, self.full_s - max(0, self.runs - self.subset) * self.sample_s)

    @property
    def seconds(self) -> float:
        """Seconds the fit is expected to take."""
        return self.full * self.full_s + self.partial * self.subset_s

    def line(self) -> str:
        """The cost as the notes and the progress say it."""
        if self.full_s <= 0:
            cost = f"about {self.judgments} judgments (their cost unknown)"
        elif self.partial == 0 or self.subset >= self.samples:
            cost = f"about {self.judgments} judgments of {_s(self.full_s)} ({_s(self.seconds)})"
        else:
            cost = (f"about {self.judgments} judgments ({self.full} on all the data, {_s(self.full_s)} each; "
                    f"{self.partial} on {self.subset} of {self.samples} calibration samples, {_s(self.subset_s)} "
                    f"each, {RANKING_RUNS} of them ranking the pieces in one run: {_s(self.seconds)})")
        share = "with no time limit" if self.share_s is None else f"in its {_s(self.share_s)} share"
        shrunk = f"; the subset cut to {self.subset} sample to fit the share" if self.shrunk else ""
        over = ("; more than the share holds: what it leaves goes on in the second round"
                if self.share_s is not None and self.seconds > self.share_s else "")
        return f"{self.kind}: {cost} {share}{shrunk}{over}"


def plan(kind, units: int, samples: int, runs: int, deadline: Deadline | None) -> Plan:
    """The :class:`Plan` of fitting ``kind`` (its name, :attr:`~gspo.precision.kind.Kind.cost`
    and ``sample_s``) with ``units`` pieces to send back, ``samples`` calibration samples and
    ``runs`` runs a judgment on all the data, until ``deadline``: its subset cut to one sample
    where the share cannot hold the estimate."""
    share = deadline.remaining() if deadline is not None and deadline.limited else None
    p = Plan(kind.name, units, samples, runs, kind.cost, kind.sample_s, share)
    if share is not None and p.seconds > share and p.subset > 1 and kind.sample_s > 0:
        p = dataclasses.replace(p, subset=1, shrunk=True)
    return p


def _s(seconds: float) -> str:
    """Seconds as the notes show them (``12.3 s``, ``45 ms``; whole seconds from 10 s)."""
    if seconds >= 10:
        return f"{seconds:.0f} s"
    return f"{seconds:.1f} s" if seconds >= 0.1 else f"{1e3 * seconds:.0f} ms"
