"""The one record a candidate carries from the search to the report, and what measuring it gave.

A :class:`Candidate` is made by the search of a piece (:func:`~gspo.search.backtrack.search`: a
graph, its streams, its estimate, the rules applied), labelled and kinded when it becomes one of
a piece's or the whole model's options, and given a placement or a thread setting on the way; a
:class:`~gspo.search.trial.Trial` turns it into a :class:`Measured` (its timing, or why it was
rejected, and how far its outputs were from the reference's), which the report reads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.runtime import Timing
from gspo.runtime.settings import RunSettings
from gspo.runtime.verify import OutputDiff, Tolerance, VerifyResult, compare_outputs
from gspo.streams import Placement, Schedule

if TYPE_CHECKING:
    from gspo.precision.accuracy import Accuracy

__all__ = ["Candidate", "Measured", "Precision", "baseline_refusal", "compare", "distinct", "estimate_or", "estimated_cost"]


@dataclass(frozen=True)
class Precision:
    """The reduced precision a candidate runs at: its kind's name (``"int8 on onnxruntime"``), the
    precision (``"bf16"``, ``"int8"``), the backend it runs on (``"openvino:bf16"``), and the
    pieces (of the precision fit's, :class:`~gspo.precision.search.Pieces`) left reduced."""

    kind: str
    precision: str
    backend: str
    pieces: tuple[int, ...]


@dataclass(frozen=True)
class Candidate:
    """A graph (with a schedule, or ``None`` for one stream) that could replace the reference.

    ``rules`` are the substitutions that made it, in order; ``estimate`` its cost-model estimate
    in seconds (``None``: not estimated); ``placement`` the backend of each op (``None``:
    onnxruntime for all); ``settings`` the thread setting its runners are built with (saved in
    the model when it wins). ``label`` names it in a trial and in the report (unique there,
    never parsed); ``kind`` says what it is: ``"original"`` or ``"unmodified"`` (the model or
    piece as given), ``"candidate"`` (a search result with the streams it was estimated on),
    ``"substitutions"`` (a candidate's rewrites on one stream), ``"greedy"``, ``"streams"`` (the
    given graph on Nimble's streams: a piece's ``"unmodified+streams"``, the whole model's
    ``"streams only"``), ``"merged"`` (the pieces' choices put together, on one stream, on
    Nimble's streams or on the streams the pieces chose), or ``"other"`` (what the search itself
    returns, before it is labelled; ``"near"`` for a result the estimate cannot tell from the
    piece as given, a near-tie, measured beside it; ``"reduced"`` for a reduced-precision one).
    ``precision``: the reduced precision it runs at (``None``: fp32, exact).
    """

    graph: Graph
    schedule: Schedule | None = None
    rules: tuple[str, ...] = ()
    estimate: float | None = None
    placement: Placement | None = None
    settings: RunSettings = RunSettings()
    label: str = ""
    kind: str = "other"
    precision: Precision | None = None

    @property
    def on_streams(self) -> bool:
        """Whether it runs on several streams (its speed then depends on the other core being free)."""
        return self.schedule is not None and self.schedule.num_streams > 1

    @property
    def identity(self) -> tuple:
        """What makes two candidates the same thing to run (the label and the estimate aside)."""
        return self.graph.key, self.schedule, self.placement, self.settings


@dataclass(frozen=True)
class Measured:
    """What the board said of a candidate: its timing, or why it was rejected; and its judge's
    verdict (:class:`~gspo.search.judge.Verdict`): per output the worst difference from the
    reference over the input sets (the exact judge), or its accuracy on the validation data (the
    judge within an error budget)."""

    candidate: Candidate
    timing: Timing | None = None
    rejected: str | None = None
    diffs: tuple[OutputDiff, ...] = ()
    accuracy: Accuracy | None = None

    @property
    def label(self) -> str:
        """The candidate's label."""
        return self.candidate.label

    @property
    def median_s(self) -> float | None:
        """The median seconds measured (``None`` when rejected or not timed)."""
        return self.timing.median if self.timing is not None else None


def distinct(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Candidates without repeats (the greedy variant and a search result are often the same graph)."""
    seen, out = set(), []
    for c in candidates:
        if c.identity not in seen:
            seen.add(c.identity)
            out.append(c)
    return out


def estimate_or(cost_fn: Callable, graph: Graph, schedule: Schedule | None, fallback: float | None) -> float | None:
    """The cost model's estimate of ``graph`` on ``schedule``, or ``fallback`` for a graph it
    cannot read (an exported graph before the front end, with shapes unknown)."""
    try:
        return cost_fn(graph, schedule)
    except (GspoError, KeyError, TypeError, ValueError):
        return fallback


def baseline_refusal(outcomes: Sequence[Measured], label: str) -> str | None:
    """Why the candidate ``label`` (the unmodified piece, the original model) was rejected, if it
    was: on a device, the graph as given may itself be refused (CUDA fell back to the CPU)."""
    return next((o.rejected for o in outcomes if o.label == label and o.timing is None), None)


def estimated_cost(candidate: Candidate, cost_fn: Callable) -> float:
    """The candidate's estimate, else the cost model's (infinite when it cannot read the graph)."""
    if candidate.estimate is not None:
        return candidate.estimate
    return estimate_or(cost_fn, candidate.graph, candidate.schedule, float("inf"))


def compare(want, got, tolerance: Tolerance, steps=None) -> VerifyResult:
    """Outputs ``got`` against the reference's ``want`` within ``tolerance`` (``steps``: the
    reference's quantized outputs' steps; :func:`gspo.runtime.verify.compare_outputs`)."""
    return compare_outputs(want, got, tolerance.rtol, tolerance.atol, tolerance.ntol, steps)
