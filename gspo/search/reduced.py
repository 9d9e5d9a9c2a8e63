"""Reduced precision as a source of the whole-model stage's candidates (``--precision``).

After the exact candidates are decided (:func:`~gspo.search.decide.choose_final`), the precision
fit (:func:`~gspo.precision.stage.fit_precision`) runs on the exact pick in its share of the run's
one :class:`~gspo.search.budget.Timebox` (:meth:`~gspo.search.budget.Timebox.precision_share`,
:attr:`~gspo.search.budget.Shares.precision`), its judgments on the run's device (on ``cuda``,
the torch runtime's kinds: fp16, bf16, tf32). Each kind that
holds ``--max-error`` becomes a :class:`~gspo.search.candidate.Candidate` that knows its
:class:`~gspo.search.candidate.Precision`, at every thread count worth trying; one
:class:`~gspo.search.trial.Trial` with the judge within the error budget
(:class:`~gspo.search.judge.WithinBudget`) times them beside the exact pick with the run's
``measure``, and the decision every candidate goes through
(:func:`~gspo.search.decide.confirmed`) keeps one only when its own timing against the exact pick
finds it faster beyond the noise.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence

from gspo.ir import Graph
from gspo.precision.search import TIMING_RUNS, Fitted, thread_settings
from gspo.precision.stage import (
    MIN_TIMING_RUNS,
    NOT_HELD,
    PrecisionFit,
    fit_precision,
    reduced,
    settings_of,
    timing_runs,
    timing_seconds,
)
from gspo.precision.variants import TORCH, plain, with_placement
from gspo.runtime.settings import RunSettings, saved_settings, with_settings
from gspo.search.budget import Timebox
from gspo.search.candidate import Candidate, Measured, Precision
from gspo.search.decide import confirmed
from gspo.search.judge import WithinBudget
from gspo.search.prepared import Prepared
from gspo.search.report import FinalChoice, ReducedPick
from gspo.search.strategies import Strategies
from gspo.search.trial import Trial
from gspo.streams import Placement, Schedule

__all__ = ["EXACT", "reduced_candidates", "reduced_pick", "saved"]

#: The label the exact pick has in the reduced-precision trial (the baseline of the decision).
EXACT = "original"


def saved(candidate: Candidate) -> Graph:
    """``candidate``'s graph as ``gspo optimize`` saves it: its schedule, placement and thread
    setting in the graph (what the fit's executors follow)."""
    schedule = json.dumps(candidate.schedule.to_json(), sort_keys=True) if candidate.on_streams else ""
    graph = dataclasses.replace(candidate.graph, extras=dataclasses.replace(candidate.graph.extras, schedule=schedule))
    return with_settings(with_placement(graph, candidate.placement), candidate.settings)


def _label(kind: str, threads: int) -> str:
    return f"{kind}[threads={threads}]" if threads else kind


def reduced_candidates(survivors: Sequence[Fitted]) -> list[Candidate]:
    """Each kind that holds the budget as candidates: its graph (the placement its kind built it
    with, apart), at each thread count worth trying (:func:`~gspo.precision.search.thread_settings`;
    a kind of the torch runtime at its default only)."""
    out = []
    for f in survivors:
        placement = Placement.from_json(f.graph.extras.placement) if f.graph.extras.placement else None
        graph = with_placement(f.graph, None)
        precision = Precision(f.kind.name, f.kind.precision, f.kind.backend, tuple(f.reduced))
        threads = (0,) if f.kind.backend == TORCH else thread_settings(f.graph)  # thread counts are the CPU's
        out += [Candidate(graph, None, (), None, placement, RunSettings(t), label=_label(f.kind.name, t), kind="reduced",
                          precision=precision) for t in threads]
    return out


def _executor(tools: Strategies) -> Callable | None:
    """The fit's executor on the run's device (``None``: the CPU's default, which follows the
    graph's saved placement): a graph as saved (:func:`saved`) built with its schedule, placement
    and setting."""
    make = tools.device.executor() if tools.device is not None else None
    if make is None:
        return None

    def build(graph: Graph):
        extras = graph.extras
        placement = Placement.from_json(extras.placement) if extras.placement else None
        schedule = Schedule.from_json(extras.schedule) if extras.schedule else None
        return make(plain(graph), schedule, placement, saved_settings(graph))

    return build


def _fit_backends(tools: Strategies, backends: Sequence[str]) -> tuple[str, ...]:
    """What the fit's kinds may run on: on ``cuda`` the torch runtime (:data:`~gspo.precision.variants.TORCH`:
    its fp16, bf16 and tf32 kinds, the whole model on the GPU), else ``backends``."""
    device = tools.device
    if device is not None and device.name == "cuda":
        return (TORCH,) if device.chosen == TORCH else ()
    return tuple(backends)


def reduced_pick(prepared: Prepared, exact: FinalChoice, cfg, tools: Strategies, backends: Sequence[str],
                 timebox: Timebox, progress: Callable[[str], None] | None = None) -> ReducedPick | None:
    """The reduced-precision candidates fitted on ``exact``'s pick and decided against it (see the
    module docstring), in :meth:`~gspo.search.budget.Timebox.precision_share` of ``timebox``; the
    work skipped goes to its log. ``None`` when ``cfg`` asks for no reduced precision."""
    if not reduced(cfg):
        return None
    share = timebox.precision_share()
    best = exact.best.candidate
    found = fit_precision(prepared.original, saved(best), cfg, _fit_backends(tools, backends), share.end, progress,
                          _executor(tools), tools.measure)
    share.log.extend(found.skips)
    if found.why is not None or not found.survivors:
        return ReducedPick(found.block())
    options = [dataclasses.replace(best, label=EXACT)] + reduced_candidates(found.survivors)
    runs = timing_runs(len(options), found.ref, share.remaining())
    if runs is None:
        found.notes.append("the time budget ended before the reduced-precision models could be timed: kept fp32")
        share.skip("precision", "timing the reduced-precision models",
                   f"{NOT_HELD} (about {timing_seconds(len(options), MIN_TIMING_RUNS, found.ref):.1f} s "
                   f"in {MIN_TIMING_RUNS} rounds)")
        return ReducedPick(found.block())
    (progress or (lambda text: None))("timing")
    return _decided(found, best, options, runs, (cfg, tools, share))


def _decided(found: PrecisionFit, best: Candidate, options: list[Candidate], runs: int, run) -> ReducedPick:
    """``options`` (the exact pick first) verified within the error budget, timed with the run's
    ``measure`` in ``runs`` rounds (fewer when half of what is left holds no more) and decided by
    :func:`~gspo.search.decide.confirmed`; each kind's fastest thread count and its median noted
    on its fit for the block."""
    cfg, tools, share = run
    val = found.ref.data.validation
    known = {o.label: f.validation for f in found.survivors for o in options
             if o.precision is not None and o.precision.kind == f.kind.name}
    judge = WithinBudget(found.errors, val, found.ref.outputs["validation"], keeps=EXACT,
                         known={**known, EXACT: found.fp32} if found.fp32 is not None else known)
    cap = cfg.timing.final_timing_budget
    if share.limited:
        cap = min(cap, share.remaining() / 4)
    with Trial(best.graph, options, val[:1], judge, share, "precision", executor=tools.device.executor(),
               measure=tools.measure) as trial:
        outcomes = trial.time(runs, share.timing(math.inf, 0.5) if share.limited else None)
        base = next((o for o in outcomes if o.label == EXACT and o.timing is not None), None)
        if base is None:
            found.notes.append("the exact pick could not be timed beside the reduced-precision models: kept fp32")
            return ReducedPick(found.block())
        if (rounds := len(base.timing.seconds)) < TIMING_RUNS:
            found.notes.append(f"timed in {rounds} interleaved rounds, not {TIMING_RUNS}: the time budget held no more")
        found.fp32 = found.fp32 if found.fp32 is not None else base.accuracy
        choice = confirmed(trial, outcomes, cfg, cap, share)
    chosen = choice.best if choice.best.candidate.precision is not None else None
    kind = _note_timings(found, outcomes, chosen)
    settings = settings_of(kind) if kind is not None else None
    return ReducedPick(found.block(kind, base.median_s), chosen, settings)


def _note_timings(found: PrecisionFit, outcomes: list[Measured], chosen: Measured | None) -> Fitted | None:
    """Each surviving kind's median and thread count set from ``outcomes`` (its fit replaced in
    ``found.fitted``): the chosen kind's those of the variant ``chosen`` (its median in the first
    timing), any other's its fastest variant's; the chosen kind's fit (``None``: none chosen)."""
    best, timed = None, []
    for f in found.fitted:
        mine = [o for o in outcomes if o.timing is not None and o.candidate.precision is not None
                and o.candidate.precision.kind == f.kind.name] if f.reduced is not None else []
        if mine:
            pick = min(mine, key=lambda o: (o.median_s, o.candidate.settings.threads))
            picked = chosen is not None and chosen.candidate.precision.kind == f.kind.name
            if picked:
                pick = next(o for o in mine if o.label == chosen.label)
            f = dataclasses.replace(f, threads=pick.candidate.settings.threads, median_s=pick.median_s)
            best = f if picked else best
        timed.append(f)
    found.fitted = timed
    return best
