"""Precision searched per piece, within the user's accuracy budget (``gspo optimize --precision``).

After the exact search has found the best fp32 model, each reduced-precision kind
(:mod:`gspo.precision.variants`) is tried with every piece it can touch reduced. Its error is
measured against the source model, first on the calibration data; when a limit breaks, the
pieces go back to fp32 one at a time, the one whose error alone is the largest first (its
contribution measured on the calibration data, as NNCF's accuracy control ranks layers; a model
of more than :data:`MAX_RANKED` pieces is ranked and sent back in as many runs of neighbouring
pieces, each of these pieces then reduced again on its own where the budget still holds). The
pieces are finer than the rewrite search's (:data:`PIECE_OPS`). A combination that holds on the
calibration data is then judged on the validation data, which nothing is tuned on; if it breaks
there, reverting goes on. A kind with every piece back at fp32 is dropped. (A kind whose other
pieces run at bf16, :attr:`~gspo.precision.variants.Kind.rest`, sends its pieces back to bf16.)
On OpenVINO, the pieces back at fp32 run in the same compiled model as the bf16 ones
(:func:`~gspo.streams.placement.split_runs`). The survivors are the reduced-precision candidates
of ``optimize``'s whole-model stage (:mod:`gspo.search.reduced`), each at the thread counts worth
trying (:func:`thread_settings`): timed there with the run's ``measure`` and confirmed against the
exact pick by the same decision as every other candidate; the budget is never traded for speed.

Every judgment runs the model on the executor the caller gives (``executor(graph)``: the run's
device; :func:`cpu_executor` by default, the graph's saved placement followed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.precision.accuracy import Accuracy, ErrorBudget, measure
from gspo.precision.variants import Kind
from gspo.runtime.executor import make_executor
from gspo.streams import node_id
from gspo.timing.deadline import Deadline

__all__ = ["OUT_OF_TIME", "Fitted", "Pieces", "Progress", "cpu_executor", "evaluate", "fit", "outputs_of",
           "reduce_again", "resume", "thread_settings"]

#: The largest piece precision is chosen for (ops; the search's ``--threshold`` when smaller):
#: finer than the rewrite search's pieces (64), so that what goes back to fp32 is no more of the
#: model than the budget needs. MobileNetV3 at nmse=1e-3 in the precision benchmark's rounds: in 5
#: pieces, bf16 with one back at f32, 1.46x; in 19, the same with one of 19 back, 1.38-1.52x over
#: seven runs; in 34, int8 of 12 pieces with the rest at bf16, 1.57x.
PIECE_OPS = 8
#: Rounds of the reduced-precision candidates' first interleaved timing.
TIMING_RUNS = 20


@dataclass(frozen=True)
class Pieces:
    """The fp32 graph's pieces as sets of node ids (the unit precision is chosen for)."""

    ops: tuple[frozenset[str], ...]

    @classmethod
    def of(cls, graph: Graph, threshold: int) -> Pieces:
        """``graph`` cut into pieces of at most ``threshold`` ops, and at most :data:`PIECE_OPS`."""
        from gspo.partition import partition

        parts = partition(graph, min(threshold, PIECE_OPS))
        return cls(tuple(frozenset(node_id(graph.nodes[i]) for i in p.ops) for p in parts.pieces))

    def union(self, chosen) -> frozenset[str]:
        """The node ids of the pieces ``chosen``."""
        return frozenset(op for i in chosen for op in self.ops[i])


@dataclass
class Fitted:
    """One kind after fitting: the pieces left reduced (``None``: none, the kind was dropped), its
    graph, the accuracy on the validation data and what happened to each piece; once timed, its
    median and the thread count it was fastest at (0: the backend's default)."""

    kind: Kind
    reduced: tuple[int, ...] | None
    graph: Graph | None = None
    validation: Accuracy | None = None
    calibration: Accuracy | None = None
    pieces: dict[int, str] = field(default_factory=dict)
    note: str = ""
    median_s: float | None = None
    threads: int = 0
    #: The runs of pieces sent back, in turn (:func:`reduce_again` tries each piece of a run
    #: again), and the pieces with nothing the kind reduces.
    sent: tuple[tuple[int, ...], ...] = ()
    idle: tuple[int, ...] = ()
    #: Where the fit stands while the deadline has stopped it (:func:`resume`).
    progress: Progress | None = None

    @property
    def runs_sent_back(self) -> bool:
        """Whether the fit holds with pieces sent back in runs (:func:`reduce_again` has work)."""
        return self.reduced is not None and any(len(unit) > 1 for unit in self.sent)


def cpu_executor(graph: Graph):
    """``graph``'s executor on the CPU, its saved placement followed (the judgments' default)."""
    return make_executor(graph, None, "cpu")


def outputs_of(graph: Graph, samples: Sequence[Mapping[str, np.ndarray]],
               executor: Callable | None = None) -> list[dict[str, np.ndarray]]:
    """The outputs of ``graph`` on every sample, run on ``executor(graph)`` (default:
    :func:`cpu_executor`)."""
    ex = (executor or cpu_executor)(graph)
    try:
        names = graph.output_names()
        return [{n: np.array(v, copy=True) for n, v in ex.run(s).items() if n in names} for s in samples]
    finally:
        ex.close()


def evaluate(graph: Graph, samples, reference, budget: ErrorBudget, executor: Callable | None = None) -> Accuracy:
    """The accuracy of ``graph`` against the reference outputs on ``samples`` (run on
    ``executor(graph)``, :func:`outputs_of`)."""
    return measure(reference, outputs_of(graph, samples, executor), budget)


class _Out(Exception):
    """The deadline came before the fit ended."""


@dataclass
class Progress:
    """Where a fit stands, so that one the deadline stopped goes on from there
    (:func:`resume`): the pieces still reduced, the order the rest go back in once ranked (the
    units' errors alone found so far), the runs sent back, and the current pieces' judgment on the
    calibration data once made."""

    current: list[int]
    order: list[tuple[int, ...]] | None = None
    excess: dict[tuple[int, ...], float] = field(default_factory=dict)
    sent: list[tuple[int, ...]] = field(default_factory=list)
    calibration: tuple[Graph, Accuracy] | None = None


#: A fit's note when its time ran out before anything held the budget.
OUT_OF_TIME = "the time budget ended before the error was within the budget"


def fit(kind: Kind, pieces: Pieces, data, reference: Mapping[str, list], budget: ErrorBudget,
        deadline: Deadline | None, pinned: Mapping[int, str] | None = None, executor: Callable | None = None) -> Fitted:
    """Fit ``kind`` to the budget (see the module docstring; the pieces sent back together are
    tried again by :func:`reduce_again`). ``reference`` holds the source model's outputs on
    ``data.calibration`` and ``data.validation`` under those keys; the fit ends at ``deadline``
    (``None``: it does not; where it ends it, :func:`resume` goes on). The pieces ``pinned``
    names are left as the kind builds them unreduced, each with the reason given. Each judgment
    runs on ``executor(graph)`` (:func:`outputs_of`)."""
    pinned = dict(pinned or {})
    touched = [i for i, ops in enumerate(pieces.ops) if kind.touches(ops) and i not in pinned]
    fitted = Fitted(kind, None, pieces={i: pinned.get(i, "nothing in it this kind reduces")
                                        for i in range(len(pieces.ops)) if i not in touched})
    if not touched:
        fitted.note = "nothing in the model this kind reduces"
        return fitted
    fitted.idle = tuple(i for i in range(len(pieces.ops)) if i not in touched and i not in pinned)
    fitted.progress = Progress(touched)
    return resume(fitted, pieces, data, reference, budget, deadline, executor)


def resume(fitted: Fitted, pieces: Pieces, data, reference: Mapping[str, list], budget: ErrorBudget,
           deadline: Deadline | None, executor: Callable | None = None) -> Fitted:
    """Go on with a fit from its :class:`Progress` until ``deadline``: a fit the deadline stopped
    (its note :data:`OUT_OF_TIME`) loses none of the judgments it made."""
    fitted.note = ""
    try:
        judge = _judge(fitted.kind, pieces, (data, reference, budget), deadline, fitted.idle, executor)
        _revert(fitted, fitted.progress, judge)
    except _Out:
        fitted.note = OUT_OF_TIME
    except GspoError as e:
        fitted.note = f"could not be built or run: {e}"
    if fitted.note != OUT_OF_TIME:
        fitted.progress = None
    return fitted


def reduce_again(fitted: Fitted, pieces: Pieces, data, reference: Mapping[str, list], budget: ErrorBudget,
                 deadline: Deadline | None, executor: Callable | None = None) -> Fitted:
    """A fitted kind's pieces sent back in runs of neighbours reduced again one at a time
    (:func:`_reduce_again`), until ``deadline``."""
    if not fitted.runs_sent_back:
        return fitted
    judge = _judge(fitted.kind, pieces, (data, reference, budget), deadline, fitted.idle, executor)
    return _reduce_again(fitted, list(fitted.sent), judge)


def _judge(kind: Kind, pieces: Pieces, judged, deadline: Deadline | None, idle: Sequence[int],
           executor: Callable | None = None):
    """``judge(chosen, which)``: ``kind`` built with the pieces ``chosen`` reduced, and its accuracy
    on the ``which`` data (``judged``: the data, the reference outputs, the budget). The pieces
    ``idle`` (nothing in them the kind reduces) are built as reduced all along: their ops (a Concat
    or a MaxPool between quantized Convs) are left to the kind, as with the whole model reduced,
    not kept as fp32 ops that cut it. No judgment starts that ``deadline`` cannot hold
    (:attr:`~gspo.precision.variants.Kind.cost`)."""
    data, reference, budget = judged

    def judge(chosen, which: str) -> tuple[Graph, Accuracy]:
        if deadline is not None and (deadline.expired() or not deadline.fits(kind.cost)):
            raise _Out
        graph = kind.build(pieces.union(list(chosen) + list(idle)))
        return graph, evaluate(graph, getattr(data, which), reference[which], budget, executor)

    return judge


#: At most this many units are ranked: with more pieces, neighbouring pieces are ranked and sent
#: back together, so the ranking costs at most this many judgments however many pieces there are.
MAX_RANKED = 8


def _revert(fitted: Fitted, state: Progress, judge) -> Fitted:
    """Pieces back to the kind's rest (fp32, or bf16), largest error first, until calibration and
    validation both hold; the runs of pieces sent back are kept in ``fitted.sent``."""
    current = state.current
    while True:
        if state.calibration is None:
            state.calibration = judge(current, "calibration")
        graph, cal = state.calibration
        if cal.holds:
            _, val = judge(current, "validation")
            if val.holds:
                _holds(fitted, current, graph, cal, val)
                fitted.sent = tuple(state.sent)
                return fitted
            why = "the validation data broke the budget (" + "; ".join(val.broken) + ")"
        else:
            why = "the calibration data broke the budget (" + "; ".join(cal.broken) + ")"
        if state.order is None:
            units = _units(current, MAX_RANKED) if len(current) > 1 else [tuple(current)]
            state.order = _ranked(units, judge, state.excess) if len(units) > 1 else units
        worst = state.order.pop(0)
        state.sent.append(worst)
        rank = len(state.sent)
        alone = "its error alone" if len(worst) == 1 else f"the error of pieces {worst[0]}-{worst[-1]} alone"
        for i in worst:
            current.remove(i)
            fitted.pieces[i] = f"back to {fitted.kind.rest}: {why}; {alone} ranked {rank}"
        state.calibration = None
        if not current:
            fitted.note = f"every piece went back to {fitted.kind.rest} to hold the budget"
            return fitted


def _holds(fitted: Fitted, current, graph: Graph, cal: Accuracy, val: Accuracy) -> None:
    """Record ``current``, which holds the budget on both data sets, as the fit."""
    fitted.reduced, fitted.graph, fitted.calibration, fitted.validation = tuple(sorted(current)), graph, cal, val
    for i in current:
        fitted.pieces[i] = "reduced"


def _reduce_again(fitted: Fitted, sent: list[tuple[int, ...]], judge) -> Fitted:
    """Each piece sent back in a run of neighbours (:data:`MAX_RANKED`) reduced again on its own,
    the last run sent back first, where the budget still holds on both data sets: the run's error
    alone broke it, which says little of each piece's. Stops, keeping what holds, at the
    deadline."""
    current = list(fitted.reduced)
    try:
        for unit in reversed(sent):
            for i in unit if len(unit) > 1 else ():
                graph, cal = judge(current + [i], "calibration")
                which, acc = ("validation", judge(current + [i], "validation")[1]) if cal.holds else ("calibration", cal)
                if acc.holds:
                    current.append(i)
                    _holds(fitted, current, graph, cal, acc)
                else:
                    fitted.pieces[i] += f"; reduced again on its own, the {which} data broke the budget (" + \
                        "; ".join(acc.broken) + ")"
    except (_Out, GspoError):
        pass
    return fitted


def _units(current: list[int], limit: int) -> list[tuple[int, ...]]:
    """``current`` in at most ``limit`` runs of neighbouring pieces, as even as can be."""
    n, k = len(current), min(limit, len(current))
    return [tuple(current[j * n // k:(j + 1) * n // k]) for j in range(k)]


def _ranked(units: list[tuple[int, ...]], judge, excess: dict) -> list[tuple[int, ...]]:
    """The units by their error alone on the calibration data, the largest first (``excess``:
    those judged so far, filled in as they are)."""
    for u in units:
        if u not in excess:
            excess[u] = judge(list(u), "calibration")[1].excess
    return sorted(units, key=lambda u: (-excess[u], u))


def thread_settings(graph: Graph, cores: int | None = None) -> tuple[int, ...]:
    """The thread counts a fitted kind is timed at, whatever the fp32 result's setting: the
    backend's default (0) and, unless its tensors take more than
    :data:`~gspo.runtime.settings.MAX_SESSION_BYTES` (each count is one more session of the
    model), those worth trying here (:func:`~gspo.runtime.settings.thread_counts`). On a small
    model OpenVINO's default is one thread on the 2-core EPYC (ViT-Tiny f32: 11.1 ms, 8.7 ms
    at 2 threads)."""
    from gspo.runtime.settings import MAX_SESSION_BYTES, session_bytes, thread_counts

    if session_bytes(graph) > MAX_SESSION_BYTES:
        return (0,)
    return (0,) + thread_counts(cores)
