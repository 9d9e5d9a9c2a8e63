"""What a candidate must hold, as a value a :class:`~gspo.search.trial.Trial` is given: a judge.

Two judges, one shape (``verdict(run, feeds, expected, steps, label)`` -> :class:`Verdict`, as
tinygrad's ``beam_search`` takes its ``validate``):

* :class:`Exact`: every output within the :class:`~gspo.runtime.verify.Tolerance` of the
  reference's on the trial's input sets (the scale-aware criterion of :mod:`gspo.runtime.verify`):
  what every rewrite, schedule, backend and thread setting must hold;
* :class:`WithinBudget`: the outputs on the validation data within an
  :class:`~gspo.precision.accuracy.ErrorBudget` of the source model's there: what a reduced
  precision must hold (``--max-error``).

Example:
    >>> import numpy as np
    >>> want = [{"y": np.ones(4, np.float32)}]
    >>> Exact().verdict(lambda feeds: {"y": np.ones(4, np.float32)}, [{}], want).rejected is None
    True
    >>> Exact().verdict(lambda feeds: {"y": np.zeros(4, np.float32)}, [{}], want).rejected
    'output y differs (max abs error 1)'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from gspo.runtime.verify import OutputDiff, Tolerance, worse
from gspo.search.candidate import compare

if TYPE_CHECKING:
    from gspo.precision.accuracy import Accuracy, ErrorBudget

__all__ = ["Exact", "Judge", "Verdict", "WithinBudget", "judge_of"]

#: One input set (by input name), and a model's outputs on one (by output name).
Feeds = Mapping[str, np.ndarray]
Outputs = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class Verdict:
    """What a judge said of a candidate: why it was rejected (``None``: it holds), and what it
    measured: per output the worst difference from the reference over the input sets
    (:class:`Exact`), or the accuracy on the validation data (:class:`WithinBudget`)."""

    rejected: str | None = None
    diffs: tuple[OutputDiff, ...] = ()
    accuracy: Accuracy | None = None


class Judge(Protocol):
    """What a candidate must hold: ``verdict(run, feeds, expected, steps, label)`` judges the
    outputs ``run(feeds)`` gives (``feeds``: the trial's input sets; ``expected``: the
    reference's outputs on them; ``steps``: the reference's quantized outputs' steps; ``label``:
    the candidate's). ``trusts_identity``: whether the reference's own graph, unchanged, holds
    without a run."""

    trusts_identity: bool

    def verdict(self, run: Callable[[Feeds], Outputs], feeds: Sequence[Feeds], expected: Sequence[Outputs],
                steps=None, label: str = "") -> Verdict: ...


@dataclass(frozen=True)
class Exact:
    """Every output within ``tolerance`` of the reference's, on every input set of the trial."""

    tolerance: Tolerance = Tolerance()
    trusts_identity = True

    def verdict(self, run: Callable[[Feeds], Outputs], feeds: Sequence[Feeds], expected: Sequence[Outputs],
                steps=None, label: str = "") -> Verdict:
        """The worst difference per output over the input sets; rejected, naming the first output
        that differs, when any does (:func:`~gspo.search.candidate.compare`)."""
        worst: dict[str, OutputDiff] = {}
        for f, want in zip(feeds, expected):
            for d in compare(want, run(f), self.tolerance, steps).outputs:
                if worse(worst.get(d.name), d, by="norm_rel"):  # per output, the worst over the input sets
                    worst[d.name] = d
        diffs = tuple(worst.values())
        bad = next((d for d in diffs if not d.ok), None)
        return Verdict(None if bad is None else f"output {bad.name} differs ({bad.reason})", diffs)


@dataclass(frozen=True)
class WithinBudget:
    """The outputs on ``samples`` (the validation data) within ``budget`` of ``reference`` (the
    source model's outputs on them), whatever the trial's own input sets give. ``keeps``: the
    label of the candidate judged but never rejected (the exact pick the others are confirmed
    against: the budget bounds what a reduced precision changes, not the fp32 result).
    ``known``: the accuracies already measured on ``samples``, by the label of the candidate they
    are of (the precision fit judged each reduced graph on the validation data as it chose it:
    its thread variants are not run on them again)."""

    budget: ErrorBudget
    samples: Sequence[Feeds]
    reference: Sequence[Outputs]
    keeps: str | None = None
    known: Mapping[str, Accuracy] = field(default_factory=dict)
    trusts_identity = False

    def verdict(self, run: Callable[[Feeds], Outputs], feeds: Sequence[Feeds] = (), expected: Sequence[Outputs] = (),
                steps=None, label: str = "") -> Verdict:
        """The accuracy on the validation data; rejected, with the limits broken, when it does
        not hold (:func:`~gspo.precision.accuracy.measure`)."""
        from gspo.precision.accuracy import measure

        acc = self.known.get(label)
        if acc is None:
            names = list(self.reference[0]) if self.reference else []
            got = [{n: np.array(v, copy=True) for n, v in run(s).items() if n in names} for s in self.samples]
            acc = measure(self.reference, got, self.budget)
        why = None if acc.holds or label == self.keeps else "the validation data broke the budget (" + "; ".join(acc.broken) + ")"
        return Verdict(why, accuracy=acc)


def judge_of(judge: Judge | Tolerance) -> Judge:
    """``judge``, a :class:`Tolerance` standing for :class:`Exact` with it."""
    return Exact(judge) if isinstance(judge, Tolerance) else judge
