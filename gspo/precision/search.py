"""Precision searched per piece, within the user's accuracy budget (``gspo optimize --precision``).

After the exact search has found the best fp32 model, each reduced-precision kind
(:mod:`gspo.precision.variants`) is judged with every piece it can touch reduced, on all the
calibration data, then on the validation data, which nothing is tuned on. Where the budget
breaks, the pieces are ranked by the error each adds, from one run of the kind with every piece
reduced and with none against each other (:mod:`gspo.precision.sensitivity`; where that cannot
run, by judging at most :data:`MAX_RANKED` runs of neighbouring pieces alone), and the fewest of
the most harmful that must go back to fp32 are found by bisection over the ranked list, each
judgment on a subset of the calibration samples (:mod:`gspo.precision.plan`). The answer is then
judged on all the calibration samples and on the validation data; a break there moves the lower
bound and the bisection goes on, on the data that broke. The cost is about ``log2(pieces) + 5``
judgments, stated before the fit begins (:func:`prepare`). With time left,
:func:`reduce_again` tries each piece sent back reduced again on its own, the least harmful
first. The pieces are finer than the rewrite search's (:data:`PIECE_OPS`). A kind with every
piece back at fp32 is dropped. (A kind whose other pieces run at bf16,
:attr:`~gspo.precision.variants.Kind.rest`, sends its pieces back to bf16.) On OpenVINO, the
pieces back at fp32 run in the same compiled model as the bf16 ones
(:func:`~gspo.streams.placement.split_runs`). The survivors are the reduced-precision candidates
of ``optimize``'s whole-model stage (:mod:`gspo.search.reduced`), each at the thread counts worth
trying (:func:`thread_settings`): timed there with the run's ``measure`` and confirmed against the
exact pick by the same decision as every other candidate; the budget is never traded for speed.

Every judgment runs the model on the executor the caller gives (``executor(graph)``: the run's
device; :func:`cpu_executor` by default, the graph's saved placement followed).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gspo.errors import GspoError, first_line
from gspo.ir import Graph
from gspo.precision.accuracy import Accuracy, ErrorBudget, measure
from gspo.precision.plan import Plan, plan
from gspo.precision.variants import Kind
from gspo.runtime.executor import make_executor
from gspo.streams import node_id
from gspo.timing.deadline import Deadline

__all__ = ["LEVELS", "MAX_RANKED", "OUT_OF_TIME", "Fitted", "Pieces", "Progress", "cpu_executor", "evaluate", "fit",
           "outputs_of", "prepare", "reduce_again", "resume", "thread_settings"]

log = logging.getLogger(__name__)

#: The largest piece precision is chosen for (ops; the search's ``--threshold`` when smaller):
#: finer than the rewrite search's pieces (64), so that what goes back to fp32 is no more of the
#: model than the budget needs. MobileNetV3 at nmse=1e-3 in the precision benchmark's rounds: in 5
#: pieces, bf16 with one back at f32, 1.46x; in 19, the same with one of 19 back, 1.38-1.52x over
#: seven runs; in 34, int8 of 12 pieces with the rest at bf16, 1.57x.
PIECE_OPS = 8
#: Rounds of the reduced-precision candidates' first interleaved timing.
TIMING_RUNS = 20
#: The data a judgment runs on: a subset of the calibration samples (the bisection's), all of
#: them, the validation samples. An answer holds on the last two.
LEVELS = ("subset", "calibration", "validation")
#: Where the one-run ranking cannot run, at most this many runs of neighbouring pieces are
#: ranked by judging each alone (fewer where the time left holds fewer judgments).
MAX_RANKED = 8


@dataclass(frozen=True)
class Pieces:
    """The fp32 graph's pieces as sets of node ids (the unit precision is chosen for), and the
    graph (``None``: not given; the one-run ranking measures a kind whose rest is fp32 against it)."""

    ops: tuple[frozenset[str], ...]
    graph: Graph | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, graph: Graph, threshold: int) -> Pieces:
        """``graph`` cut into pieces of at most ``threshold`` ops, and at most :data:`PIECE_OPS`."""
        from gspo.partition import partition

        parts = partition(graph, min(threshold, PIECE_OPS))
        return cls(tuple(frozenset(node_id(graph.nodes[i]) for i in p.ops) for p in parts.pieces), graph)

    def union(self, chosen) -> frozenset[str]:
        """The node ids of the pieces ``chosen``."""
        return frozenset(op for i in chosen for op in self.ops[i])


@dataclass(frozen=True)
class Progress:
    """Where a fit stands, every judgment it made in it, so that one the deadline stopped goes on
    from there (:func:`resume`) and :func:`reduce_again` repeats none: the pieces it can send
    back, its :class:`~gspo.precision.plan.Plan` (the subset), the order they go back in once
    ranked (runs of pieces, the most harmful first) with what each run's rank rests on, each
    judgment's accuracy by the pieces back and the data (:data:`LEVELS`), and the last graph
    built with the pieces it has back (the next judgment of those pieces runs it again)."""

    touched: tuple[int, ...]
    plan: Plan
    order: tuple[tuple[int, ...], ...] | None = None
    ranked: Mapping[tuple[int, ...], str] = field(default_factory=dict)
    judged: Mapping[tuple[frozenset[int], str], Accuracy] = field(default_factory=dict)
    built: tuple[frozenset[int], Graph] | None = None


@dataclass(frozen=True)
class Fitted:
    """One kind after fitting: the pieces left reduced (``None``: none, the kind was dropped), its
    graph, the accuracy on the validation data and what happened to each piece; once timed, its
    median and the thread count it was fastest at (0: the backend's default). Frozen: each step
    of a fit (:func:`resume`, :func:`reduce_again`) and the timing return a new one
    (:func:`dataclasses.replace`), ``pieces`` a new mapping, never the old one changed."""

    kind: Kind
    reduced: tuple[int, ...] | None
    graph: Graph | None = None
    validation: Accuracy | None = None
    calibration: Accuracy | None = None
    pieces: Mapping[int, str] = field(default_factory=dict)
    note: str = ""
    median_s: float | None = None
    threads: int = 0
    #: The runs of pieces sent back, the most harmful first, the pieces sent back that
    #: :func:`reduce_again` has tried reduced again, and the pieces with nothing the kind reduces.
    sent: tuple[tuple[int, ...], ...] = ()
    refined: tuple[int, ...] = ()
    idle: tuple[int, ...] = ()
    #: The fit's judgments and where it stands (:func:`resume`); its expected cost, the line the
    #: notes say (:meth:`~gspo.precision.plan.Plan.line`).
    progress: Progress | None = None
    plan: str = ""

    @property
    def to_refine(self) -> tuple[int, ...]:
        """The pieces sent back that :func:`reduce_again` has yet to try, the least harmful first."""
        if self.reduced is None:
            return ()
        return tuple(i for unit in reversed(self.sent) for i in reversed(unit) if i not in self.refined)


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


#: A fit's note when its time ran out before anything held the budget.
OUT_OF_TIME = "the time budget ended before the error was within the budget"


def fit(kind: Kind, pieces: Pieces, data, reference: Mapping[str, list], budget: ErrorBudget,
        deadline: Deadline | None, pinned: Mapping[int, str] | None = None, executor: Callable | None = None) -> Fitted:
    """Fit ``kind`` to the budget (see the module docstring): :func:`prepare`, then :func:`resume`.
    ``reference`` holds the source model's outputs on ``data.calibration`` and
    ``data.validation`` under those keys; the fit ends at ``deadline`` (``None``: it does not;
    where it ends it, :func:`resume` goes on). The pieces ``pinned`` names are left as the kind
    builds them unreduced, each with the reason given. Each judgment runs on ``executor(graph)``
    (:func:`outputs_of`)."""
    fitted = prepare(kind, pieces, data, deadline, pinned)
    if fitted.progress is None:
        return fitted
    return resume(fitted, pieces, data, reference, budget, deadline, executor)


def prepare(kind: Kind, pieces: Pieces, data, deadline: Deadline | None,
            pinned: Mapping[int, str] | None = None) -> Fitted:
    """``kind``'s fit before its first judgment: the pieces it touches (none: dropped, with the
    note), the ones it leaves, and its expected cost until ``deadline``
    (:func:`~gspo.precision.plan.plan`; :attr:`Fitted.plan` says it), for :func:`resume` to go
    on from."""
    pinned = dict(pinned or {})
    touched = [i for i, ops in enumerate(pieces.ops) if kind.touches(ops) and i not in pinned]
    left = {i: pinned.get(i, "nothing in it this kind reduces") for i in range(len(pieces.ops)) if i not in touched}
    if not touched:
        return Fitted(kind, None, pieces=left, note="nothing in the model this kind reduces")
    runs = max(len(data.calibration), len(data.validation))
    cost = plan(kind, len(touched), len(data.calibration), runs, deadline)
    idle = tuple(i for i in range(len(pieces.ops)) if i not in touched and i not in pinned)
    return Fitted(kind, None, pieces=left, plan=cost.line(), idle=idle, progress=Progress(tuple(touched), cost))


def resume(fitted: Fitted, pieces: Pieces, data, reference: Mapping[str, list], budget: ErrorBudget,
           deadline: Deadline | None, executor: Callable | None = None) -> Fitted:
    """Go on with a fit from its :class:`Progress` until ``deadline``: a fit the deadline stopped
    (its note :data:`OUT_OF_TIME`) loses none of the judgments it made (each is looked up, not
    made again). Returns the fit as it then stands (``fitted`` itself is left as it was)."""
    judge = _Judge(dataclasses.replace(fitted, note=""), pieces, (data, reference, budget), deadline, executor)
    try:
        _bisect(judge)
    except _Out:
        judge.update(note=OUT_OF_TIME)
    except GspoError as e:
        judge.update(note=f"could not be built or run: {e}")
    if judge.fitted.note != OUT_OF_TIME:
        judge.record(built=None)
    return judge.fitted


def reduce_again(fitted: Fitted, pieces: Pieces, data, reference: Mapping[str, list], budget: ErrorBudget,
                 deadline: Deadline | None, executor: Callable | None = None) -> Fitted:
    """With time left until ``deadline``: each piece a fitted kind sent back tried reduced again on
    its own (:attr:`Fitted.to_refine`, the least harmful first), kept reduced where the budget
    still holds on all the calibration data and the validation data. Stops, keeping what holds,
    at the deadline; a judgment made before is looked up, not made again. Returns the fit as it
    then stands (``fitted`` itself is left as it was)."""
    if not fitted.to_refine or fitted.progress is None:
        return fitted
    judge = _Judge(fitted, pieces, (data, reference, budget), deadline, executor)
    try:
        for i in fitted.to_refine:
            back = judge.back_now() - {i}
            broke = judge.verify(back)
            judge.update(refined=judge.fitted.refined + (i,))
            if broke is None:
                _holds(judge, back)
            else:
                why = f"{judge.fitted.pieces[i]}; reduced again on its own, {_broke(judge, back, broke)}"
                judge.update(pieces={**judge.fitted.pieces, i: why})
    except (_Out, GspoError):
        pass
    judge.record(built=None)
    return judge.fitted


class _Judge:
    """The judgments of one fit: ``judge(back, level)`` is the accuracy of the kind with the
    touched pieces ``back`` at its rest (the others and the idle ones reduced) on the ``level``
    data (:data:`LEVELS`), looked up in the fit's :class:`Progress` or made and recorded there.
    The fit as it stands is :attr:`fitted`, replaced (never changed) at each step.
    The idle pieces (nothing in them the kind reduces) are built as reduced all along: their ops
    (a Concat or a MaxPool between quantized Convs) are left to the kind, as with the whole model
    reduced, not kept as fp32 ops that cut it. No judgment starts that the deadline cannot hold
    (:attr:`~gspo.precision.variants.Kind.cost`; on the subset, less the runs it leaves out)."""

    def __init__(self, fitted: Fitted, pieces: Pieces, judged, deadline: Deadline | None,
                 executor: Callable | None) -> None:
        self.fitted, self.pieces, self.deadline = fitted, pieces, deadline
        self.data, self.reference, self.budget = judged
        self.executor = executor or cpu_executor

    @property
    def state(self) -> Progress:
        return self.fitted.progress

    def update(self, **changes) -> None:
        """The fit as it stands, with ``changes`` (:func:`dataclasses.replace`)."""
        self.fitted = dataclasses.replace(self.fitted, **changes)

    def record(self, **changes) -> None:
        """The fit's :class:`Progress`, with ``changes``."""
        self.update(progress=dataclasses.replace(self.state, **changes))

    def check(self, seconds: float) -> None:
        """Raise :class:`_Out` unless the deadline holds work of ``seconds``."""
        if self.deadline is not None and (self.deadline.expired() or not self.deadline.fits(seconds)):
            raise _Out

    def build(self, back: frozenset[int]) -> Graph:
        """The kind with the pieces ``back`` at its rest (the last graph again where it is that)."""
        state = self.state
        if state.built is not None and state.built[0] == back:
            return state.built[1]
        graph = self.fitted.kind.build(self.pieces.union([i for i in state.touched if i not in back] + list(self.fitted.idle)))
        self.record(built=(back, graph))
        return graph

    def samples(self, level: str):
        """The samples of the ``level`` data and the reference outputs on them."""
        if level == "subset":
            m = self.state.plan.subset
            return self.data.calibration[:m], self.reference["calibration"][:m]
        return getattr(self.data, level), self.reference[level]

    def __call__(self, back: frozenset[int], level: str) -> Accuracy:
        key = (back, "calibration" if level == "subset" and self.full_subset else level)
        if key not in self.state.judged:
            cost = self.state.plan
            self.check(cost.subset_s if key[1] == "subset" else cost.full_s)
            graph = self.build(back)
            acc = evaluate(graph, *self.samples(key[1]), self.budget, self.executor)
            self.record(judged={**self.state.judged, key: acc})
        return self.state.judged[key]

    @property
    def full_subset(self) -> bool:
        """Whether the subset is all the calibration samples."""
        return self.state.plan.subset >= len(self.data.calibration)

    def holds_known(self, back: frozenset[int], level: str) -> bool:
        """Whether a judgment made holds on the ``level`` data (on the subset: or on all the
        calibration data) with the pieces ``back``."""
        judged = self.state.judged
        levels = ("subset", "calibration") if level == "subset" else (level,)
        return any((back, lv) in judged and judged[(back, lv)].holds for lv in levels)

    def verify(self, back: frozenset[int]) -> str | None:
        """The data set, of all the calibration and the validation data, that breaks the budget
        with the pieces ``back`` (``None``: both hold)."""
        return next((lv for lv in LEVELS[1:] if not self(back, lv).holds), None)

    def back_now(self) -> frozenset[int]:
        """The touched pieces the fit has at the rest."""
        return frozenset(self.state.touched) - frozenset(self.fitted.reduced or ())


def _bisect(judge: _Judge) -> None:
    """The fit (see the module docstring): every piece reduced, judged on all the calibration and
    the validation data; where that breaks, the pieces ranked (:func:`_rank`) and the fewest of
    the most harmful sent back found by bisection on the data the last break was on (first the
    subset), each answer judged on all the data and the search moved on where it breaks."""
    broke = judge.verify(frozenset())
    if broke is None:
        return _holds(judge, frozenset())
    _rank(judge)
    order = judge.state.order
    n = len(order)
    backs = [frozenset(i for unit in order[:k] for i in unit) for k in range(n + 1)]
    lo, level = 0, "subset" if broke == "calibration" else broke
    while True:
        hi = next((k for k in range(lo + 1, n) if judge.holds_known(backs[k], level)), n)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if judge(backs[mid], level).holds else (mid, hi)
        broke = judge.verify(backs[hi]) if hi < n else None
        if broke is None:
            break
        lo, level = hi, max(level, broke, key=LEVELS.index)
    why = _broke(judge, backs[lo], _first_broken(judge, backs[lo])) + " " + _with_back(lo, n)
    rest = judge.fitted.kind.rest
    sent = {i: f"back to {rest}: {why}; ranked {r} of {n} {judge.state.ranked[unit]}"
            for r, unit in enumerate(order[:hi], 1) for i in unit}
    judge.update(sent=tuple(order[:hi]), pieces={**judge.fitted.pieces, **sent})
    if hi == n:
        judge.update(note=f"every piece went back to {rest} to hold the budget")
    else:
        _holds(judge, backs[hi])


def _first_broken(judge: _Judge, back: frozenset[int]) -> str:
    """The data, of those judged with the pieces ``back``, that broke the budget (the last of them)."""
    return next(lv for lv in reversed(LEVELS) if (back, lv) in judge.state.judged and not judge.state.judged[(back, lv)].holds)


def _broke(judge: _Judge, back: frozenset[int], level: str) -> str:
    """How the ``level`` data broke the budget with the pieces ``back`` (``the calibration data
    broke the budget (y: nmse 2e-3 > 1e-3)``)."""
    acc = judge.state.judged[(back, "calibration" if level == "subset" and judge.full_subset else level)]
    data = f"the first {judge.state.plan.subset} calibration samples" if level == "subset" and not judge.full_subset \
        else f"the {level} data"
    return f"{data} broke the budget (" + "; ".join(acc.broken) + ")"


def _with_back(lo: int, n: int) -> str:
    """With how many of the ranked ``n`` back the budget broke."""
    if lo == 0:
        return "with every piece reduced"
    return "with the most harmful back" if lo == 1 else f"with the {lo} most harmful back"


def _holds(judge: _Judge, back: frozenset[int]) -> None:
    """Record the kind with the pieces ``back`` at its rest, which holds the budget on both data
    sets, as the fit."""
    state = judge.state
    reduced = tuple(i for i in state.touched if i not in back)
    graph = judge.build(back)
    judge.update(reduced=reduced, graph=graph, calibration=state.judged[(back, "calibration")],
                 validation=state.judged[(back, "validation")],
                 pieces={**judge.fitted.pieces, **dict.fromkeys(reduced, "reduced")})


def _rank(judge: _Judge) -> None:
    """The touched pieces in the order they go back in, the most harmful first, recorded in the
    fit's :class:`Progress`: by the error each adds, from one run
    (:func:`~gspo.precision.sensitivity.harm`); where that cannot run, by the error of runs of
    neighbouring pieces alone (judged on the subset)."""
    state = judge.state
    if state.order is not None:
        return
    if len(state.touched) == 1:
        unit = (state.touched[0],)
        order, ranked = (unit,), {unit: "(the only piece this kind reduces)"}
    else:
        judge.check(2 * state.plan.subset_s)
        try:
            order, ranked = _by_harm(judge)
        except _Out:
            raise
        except Exception as e:  # the exposed-output build did not run: rank by judgments
            log.info("ranking %s by judgments: %s", judge.fitted.kind.name, first_line(e))
            order, ranked = _by_judgments(judge, first_line(e))
    judge.record(order=order, ranked=ranked)


def _rest(judge: _Judge) -> Graph:
    """The kind with nothing reduced, the one-run ranking's reference: the fp32 graph of the pieces
    (:attr:`Pieces.graph`) for a kind whose rest is fp32, else the kind's own build (its rest at
    bf16), else the fp32 graph."""
    kind, base = judge.fitted.kind, judge.pieces.graph
    if kind.rest == "fp32" and base is not None:
        return base
    try:
        return kind.build(frozenset())
    except GspoError:
        if base is None:
            raise
        return base


def _by_harm(judge: _Judge):
    """The order and its reasons from :func:`~gspo.precision.sensitivity.harm` on the subset: the
    pieces whose added error was measured by it, the largest first, then those with none of
    their tensors in the reduced build, in model order, last."""
    from gspo.precision.sensitivity import harm

    state, m = judge.state, judge.state.plan.subset
    measured = harm(judge.build(frozenset()), _rest(judge), judge.pieces.ops, judge.data.calibration[:m], judge.executor)
    added = {i: measured.added.get(i) for i in state.touched}
    order = sorted(state.touched, key=lambda i: (added[i] is None, -(added[i] or 0.0), i))
    ranked = {(i,): (f"by the error it adds (its outputs' nmse {added[i]:.2g} above its inputs', on {m} calibration "
                     f"samples)"
                     if added[i] is not None else "last: none of its outputs could be measured in the reduced build")
              for i in order}
    return tuple((i,) for i in order), ranked


def _by_judgments(judge: _Judge, why: str):
    """The order and its reasons where the one-run ranking failed (``why``): at most
    :data:`MAX_RANKED` runs of neighbouring pieces (fewer where half the time left holds fewer
    judgments on the subset), each judged alone on the subset, the largest error first."""
    state = judge.state
    limit = min(MAX_RANKED, len(state.touched))
    if judge.deadline is not None and judge.deadline.limited and state.plan.subset_s > 0:
        limit = max(2, min(limit, int(0.5 * judge.deadline.remaining() / state.plan.subset_s)))
    n, k = len(state.touched), limit
    units = [tuple(state.touched[j * n // k:(j + 1) * n // k]) for j in range(k)]
    everything = frozenset(state.touched)
    excess = {u: judge(everything - frozenset(u), "subset").excess for u in units}
    order = sorted(units, key=lambda u: (-excess[u], u))
    alone = {u: "by its error alone" if len(u) == 1 else f"by the error of pieces {u[0]}-{u[-1]} alone" for u in units}
    return tuple(order), {u: f"{alone[u]} (the one-run ranking could not run: {why})" for u in units}


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
