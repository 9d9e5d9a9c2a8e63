"""``gspo optimize``: front end, partition, search each piece, verify on the board, merge,
verify, save.

Never slower, never different: the model the user gave is always a candidate; every other
candidate is run against it on the same inputs and rejected, with the reason, when onnxruntime
refuses it or its outputs differ; a merged model that differs from the original is an error
(nothing is written); and if nothing is measured faster than the original, the original is the
result.

The steps: :func:`~gspo.search.prepare.prepare` loads the model as given and as the front end
makes it plain, draws valid inputs and checks the plain graph against the original;
:func:`~gspo.search.pool.search_pieces` searches the pieces of the plain graph in a process pool;
:func:`~gspo.search.pieces.verify_pieces` verifies and times each piece's options on the values
that really reach it; :func:`_final_options` and :func:`_choose_final` (below) compare the whole
models; and :func:`~gspo.search.dynamic.keeps_dynamic` decides whether the output can keep the
input's dynamic dimensions. One :class:`~gspo.search.budget.Budget` holds the time of them all.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from gspo.costmodel import CostModel, device_description
from gspo.costmodel.db import CalibrationCache
from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.partition import Partition, partition
from gspo.precision.stage import exact_seconds, with_precision
from gspo.rules import WHOLE_MODEL_RULES, apply_greedily
from gspo.runtime.backends import (
    DEFAULT_BACKEND,
    available_backends,
    backend_versions,
    check_backends,
)
from gspo.runtime.verify import check_finite_inputs
from gspo.search.budget import (
    Budget,
    Shares,
    build_depth,
    build_ops,
    partition_seconds,
    streams_seconds,
    weight_bytes,
)
from gspo.search.config import (
    OptimizeConfig,
    OptimizeError,
    OptimizeResult,
    Prepared,
    check_model_and_inputs,
    check_options,
    refuse_no_outputs,
)
from gspo.search.device import (
    baseline_refusal,
    device_streams,
    option_executor,
    search_profile,
)
from gspo.search.dynamic import keeps_dynamic
from gspo.search.joint import joint_option
from gspo.search.pieces import verify_pieces
from gspo.search.placement import default_db_path, measure_crossing, mixed_placement, time_pieces
from gspo.search.pool import search_pieces
from gspo.search.prepare import prepare
from gspo.search.report import FinalChoice, build_report, estimated_cost, speed_verdict
from gspo.search.settings import option_backend, settled, thread_options
from gspo.search.trial import (
    CONFIRM_MAX_ROUNDS,
    CONFIRM_ROUNDS,
    MIN_ROUNDS,
    PAIRED_ALPHA,
    WARMUP_ROUNDS,
    Option,
    Outcome,
    Trial,
    distinct,
    pick,
    rounds_faster,
    sample_seconds,
)
from gspo.streams import Placement, Schedule, apply_schedule, assign_streams

__all__ = ["OptimizeConfig", "OptimizeResult", "OptimizeError", "optimize"]

log = logging.getLogger(__name__)

#: How ``--time-budget`` is divided among the stages (see :class:`~gspo.search.budget.Shares`).
SHARES = Shares()
#: At most this many whole-model options are confirmed against the original, each in a timing
#: of its own (with --time-budget, the first timing and these fit the final comparison's share).
CONTENDERS = 3
#: The whole model on streams is left unmeasured when estimated slower than on one stream by more
#: than this fraction.
STREAMS_SKIP_MARGIN = 0.25


# ---------------------------------------------------------------- whole model
def _final_options(prepared: Prepared, merged: Graph, rules: tuple[str, ...], cfg: OptimizeConfig, cost_model,
                   allowed, budget: Budget) -> tuple[list[Option], dict | None]:
    """The original, the merged result (and on streams, unless clearly slower by estimate or
    the time budget is spent), and the whole model rewritten greedily when something can be
    batched across pieces."""
    original, work = prepared.original, prepared.work
    options = [Option("original", original, None, (), cost_model.cost(work), kind="original")]
    # No piece changed: what the front end alone did (folded constants) is no optimization,
    # so streams, if any, go on the original as given.
    base = original if merged.key == work.key else merged
    if base.key != original.key:
        options.append(Option("optimized", merged, None, rules, cost_model.cost(merged), kind="merged"))
    skipped = None
    if cfg.use_streams and not budget.fits(streams_seconds(len(base.nodes))):
        skipped = {"reason": "the time budget was spent"}
        budget.skip("final", "the whole model on streams", "the time budget could not hold assigning them")
    elif cfg.use_streams:
        option, skipped = _streams_option(base, rules if base is merged else (), cost_model, cfg.max_streams)
        options += [option] if option is not None else []
    batching = WHOLE_MODEL_RULES[0]
    # Only when something can be batched across pieces: elsewhere the pieces' greedy variants
    # already cover it, and greedy rewriting of a whole large model costs tens of seconds.
    if cfg.use_rules and batching.name in allowed and next(iter(batching.match(work)), None) is not None:
        if budget.expired():
            budget.skip("final", "the whole model rewritten greedily", "the time budget was spent")
        else:
            whole, counts = apply_greedily(work, [r for r in WHOLE_MODEL_RULES if r.name in allowed])
            if whole.key not in (original.key, merged.key):
                options.append(Option("greedy-whole-model", whole, None, tuple(Counter(counts).elements()),
                                      cost_model.cost(whole), kind="greedy"))
    return distinct(options), skipped


def _streams_option(base: Graph, rules: tuple[str, ...], cost_model,
                    max_streams: int) -> tuple[Option | None, dict | None]:
    """``base`` on streams, unless on one stream already or estimated clearly slower (then why)."""
    s = assign_streams(base, max_streams=max_streams)
    if s.num_streams <= 1:
        return None, None
    # Measured only when the cost model does not call it clearly slower: a whole large model on
    # streams costs seconds to build and time (NASNet-A Large: ~0.8 s a run against ~0.53 s on
    # one stream), and "clearly" is beyond the parallel model's mean error (about 20%, the
    # profile's evaluation report).
    est_streams, est_one = _cost(cost_model, base, s), _cost(cost_model, base, None)
    if est_streams is None or est_one is None or est_streams <= est_one * (1 + STREAMS_SKIP_MARGIN):
        return Option("optimized+streams", base, s, rules, est_streams, kind="streams"), None
    return None, {"estimated_ms": est_streams * 1e3, "estimated_one_stream_ms": est_one * 1e3}


def _backend_options(prepared: Prepared, merged: Graph, rules: tuple[str, ...], pieces: list[Graph],
                     boundary: list[dict] | None, cfg: OptimizeConfig, backends: tuple[str, ...],
                     budget: Budget) -> tuple[list[Option], dict]:
    """The original and the optimized model each whole on every other backend, and the
    optimized model with each piece on its fastest backend when that is estimated to pay (see
    :mod:`gspo.search.placement`; not when ``budget`` cannot hold timing the pieces); and what
    was measured, for the report."""
    others = [b for b in backends if b != DEFAULT_BACKEND]
    report = {"backends": list(backends)}
    if not others:
        return [], report
    options = []
    changed = merged.key != prepared.work.key  # what the front end alone did is no optimization
    for b in others:
        options.append(Option(f"original@{b}", prepared.original, placement=Placement.whole(prepared.original, b),
                              kind="original"))
        if changed:
            options.append(Option(f"optimized@{b}", merged, None, rules, placement=Placement.whole(merged, b),
                                  kind="merged"))
    crossing = sum(budget.rates.estimate(b, 2) for b in backends)
    if boundary is None or not budget.fits(crossing):
        if boundary is not None:
            budget.skip("placement", "timing the pieces on each backend", "the time budget could not hold it")
        return options, report
    db = CalibrationCache(cfg.db_path or default_db_path(), device_description("cpu"), backend_versions(backends))
    try:
        feeds = [[{v.name: b[v.name] for v in g.inputs} for b in boundary] for g in pieces]
        times = time_pieces(pieces, feeds, backends, db, tolerance=cfg.tolerance, budget=budget)
        fixed, bandwidth = measure_crossing(backends, db)
    finally:
        db.close()
    mixed, estimate = mixed_placement(pieces, times, fixed, bandwidth, backends)
    report.update(estimate, crossing_fixed_s=fixed,
                  refused=[{"piece": k, "backend": b, "reason": why} for k, t in enumerate(times) for b, why in t.refused.items()],
                  pieces_cached=sum(t.cached for t in times))
    if mixed is not None:
        options.append(Option("optimized@mixed", merged, None, rules, placement=mixed, kind="merged"))
    return options, report


def _cost(cost_model: CostModel, graph: Graph, schedule: Schedule | None) -> float | None:
    """The estimate, or ``None`` for a graph the cost model cannot read (an exported graph
    before the front end, with shapes unknown)."""
    try:
        return cost_model.cost(graph, schedule)
    except (GspoError, KeyError, TypeError, ValueError):
        return None


def _original_seconds(prepared: Prepared, budget: Budget) -> float:
    """Seconds that building, checking and timing the original alone is expected to take."""
    build = budget.rates.estimate(DEFAULT_BACKEND, len(prepared.original.nodes))
    return build + len(prepared.feeds) * prepared.run_s + (MIN_ROUNDS + WARMUP_ROUNDS) * sample_seconds(prepared.run_s)


def _choose_final(prepared: Prepared, options: list[Option], cfg, cost_fn, budget: Budget) -> FinalChoice:
    """Verify the whole-model options against the original and pick one (by measurement, each
    contender confirmed by a timing of its own against the original; see :func:`_confirmed`).
    Options that ``budget`` cannot hold are skipped (the original first of all, and then the
    input is handed back unmeasured).

    Raises:
        OptimizeError: the merged model's outputs differ from the original's.
    """
    if not budget.fits(_original_seconds(prepared, budget)):
        budget.skip("final", "comparing the whole model's options with the original (the input is returned)",
                    "the time budget could not hold building, checking and timing the original")
        unmeasured = [Outcome(options[0])]
        return FinalChoice(unmeasured[0], unmeasured, unmeasured, [])
    cap = cfg.final_timing_budget
    if budget.limited:
        cap = min(cap, budget.final_s / 4)
    with Trial(prepared.original, options, prepared.feeds, cfg.tolerance, budget, "final",
               executor=option_executor(cfg.device)) as trial:
        # an option that compared nothing (outputs all NaN on these inputs) is only rejected
        differs = [o for o in trial.rejected if o.label == "optimized" and any(not d.ok and d.compared for d in o.diffs)]
        if differs:
            raise OptimizeError(f"the optimized model differs from the original: {differs[0].rejected}; nothing written")
        outcomes = trial.time(cfg.timing_runs, budget.timing_seconds(cap, 0.5))
        if not any(o.label == "original" for o in outcomes):  # the trial's budget skipped it (it says so)
            unmeasured = [Outcome(next((o for o in options if o.label == "original"), options[0]))]
            return FinalChoice(unmeasured[0], unmeasured, unmeasured, [])
        if refused := baseline_refusal(outcomes, "original"):
            raise GspoError(f"the model as given cannot be measured on {cfg.device}: {refused}")
        if cfg.select == "estimated":
            best = pick(outcomes, "original", cfg.final_margin, cfg.select, lambda o: estimated_cost(o, cost_fn))
            return FinalChoice(best, outcomes, outcomes, [])
        return _confirmed(trial, outcomes, cfg, cap, budget)


def _contenders(outcomes: list[Outcome], margin: float) -> list[Outcome]:
    """The options worth confirming, fastest first, at most :data:`CONTENDERS`: on one stream,
    any faster than the original by median in the first timing (the options timed beside each
    other disturb each other: a slow multi-stream option in the same rounds took an exported
    SqueezeNet on OpenVINO from 12% faster than onnxruntime to 1%); on several streams, one
    already faster beyond the spread (see :func:`_confirmed`)."""
    original = next(o for o in outcomes if o.label == "original")
    timed = sorted((o for o in outcomes if o.timing is not None and o.label != "original"), key=lambda o: o.median_s)
    return [o for o in timed if o.median_s < original.median_s
            and (not o.option.on_streams or _beyond_noise(outcomes, o.label, margin))][:CONTENDERS]


def _confirmed(trial: Trial, outcomes: list[Outcome], cfg, seconds: float | None,
               budget: Budget | None = None) -> FinalChoice:
    """The contender that a timing of its own against the original alone (the same sessions,
    twice the rounds in ``seconds``) finds fastest beyond the noise, else the original; a
    contender whose timing ``budget`` cannot hold is not confirmed (the budget says so).

    A contender's own timing decides: the first timing ranks several options at once, and the
    fastest of several medians is biased low. Beyond the noise is faster by the margin by median
    and either by more than the timings' spread, or, on one stream, faster in significantly more
    of the interleaved rounds than chance gives (a sign test at :data:`PAIRED_ALPHA` shared among
    the contenders). A schedule on several streams must beat the spread in both timings: its
    speed depends on the other core being free, which the rounds of one timing do not vary (a
    loaded machine once turned an Inception-v3 export's 2-stream "win" by 9% against a 12%
    spread into 18% slower). A contender that fails while timed again is rejected with the reason.
    """
    original = next(o for o in outcomes if o.label == "original")
    contenders = _contenders(outcomes, cfg.final_margin)
    alpha = PAIRED_ALPHA / max(1, len(contenders))
    best, decisive, best_speedup = original, outcomes, 0.0
    failed: dict[str, Outcome] = {}
    confirmations = []
    for o in contenders:
        round_s = sample_seconds(original.median_s) + sample_seconds(o.median_s)
        if budget is not None and not budget.fits((MIN_ROUNDS + WARMUP_ROUNDS) * round_s):
            budget.skip("final", f"confirming {o.label} against the original", "the time budget could not hold it")
            continue
        own = seconds
        if budget is not None and seconds is not None:  # up to CONFIRM_MAX_ROUNDS, what is left allowing
            own = budget.timing_seconds(max(seconds, CONFIRM_MAX_ROUNDS * round_s))
        again = {x.label: x for x in trial.time(2 * cfg.timing_runs, own, labels=("original", o.label))}
        if again[o.label].timing is None:
            failed[o.label] = again[o.label]
            confirmations.append({"label": o.label, "confirmed": False, "rejected": again[o.label].rejected})
            continue
        pair = [again["original"], again[o.label]]
        confirmed = _beyond_noise(pair, o.label, cfg.final_margin, alpha)
        wins, rounds = rounds_faster(pair[0].timing, pair[1].timing)
        confirmations.append({"label": o.label, "confirmed": confirmed, "original_ms": pair[0].median_s * 1e3,
                              "measured_ms": pair[1].median_s * 1e3, "rounds_faster": [wins, rounds]})
        speedup = pair[0].median_s / pair[1].median_s
        if confirmed and speedup > best_speedup:
            best, decisive, best_speedup = pair[1], pair, speedup
    return FinalChoice(best, [failed.get(o.label, o) for o in outcomes], decisive, confirmations)


def _beyond_noise(outcomes: Sequence[Outcome], label: str, margin: float, alpha: float = PAIRED_ALPHA) -> bool:
    """Whether ``label`` measured faster than the original beyond the margin and the noise
    (:func:`~gspo.search.report.speed_verdict`); never for an option without a timing."""
    chosen = next(o for o in outcomes if o.label == label)
    if chosen.timing is None:
        return False
    return speed_verdict(list(outcomes), chosen, margin, alpha)[2] == "faster"


def final_seconds(prepared: Prepared, backends: Sequence[str], budget: Budget) -> float:
    """What the final comparison needs to measure the options most likely to win on a CPU: the
    original built on onnxruntime and whole on every other backend (at the build rates the
    budget knows), each checked on the input sets and timed in the first timing and in a
    confirmation (their least rounds and warm-up), as the final comparison counts it when it
    takes them in (``Trial``)."""
    ops, size, deep = build_ops(prepared.original), weight_bytes(prepared.original), build_depth(prepared.original)
    builds = sum(budget.rates.estimate(b, ops, size, deep) for b in backends)
    n, rounds = len(backends), MIN_ROUNDS + WARMUP_ROUNDS
    samples = rounds * sum(k + 2 for k in range(n)) + CONFIRM_ROUNDS * 2
    return builds + n * len(prepared.feeds) * prepared.run_s + samples * sample_seconds(prepared.run_s)


def by_promise(options: list[Option]) -> list[Option]:
    """The CPU's whole-model options in the order the final comparison's time goes to them (an
    option the time budget cannot hold is skipped, and every option kept makes each timing
    round longer): the original, then each result on one stream and one backend (onnxruntime
    first, then each whole model on another backend, which ran most real models 1.1-1.8x
    faster here), then schedules on several streams (never faster than one stream on a whole
    model on these 2-core machines), then splits across backends. Ties keep their order."""
    def rank(o: Option) -> int:
        backend = option_backend(o)  # None: several backends or streams
        if o.on_streams:
            return 3
        if backend is None:
            return 4
        if backend == DEFAULT_BACKEND:
            return 0 if o.kind == "original" else 1
        return 2

    return sorted(options, key=rank)


# ----------------------------------------------------------------- optimize
def resolved(cfg: OptimizeConfig, cores: int | None = None) -> OptimizeConfig:
    """``cfg`` with what it leaves to gspo chosen for this machine, as every stage reads it: the
    stream cap (``max_streams``: :func:`~gspo.search.device.device_streams`) and the search's
    processes (``jobs``: one per core, and never more than the cores)."""
    cores = cores or os.cpu_count() or 1
    return dataclasses.replace(cfg, max_streams=cfg.max_streams or device_streams(cfg.device, cores),
                               jobs=min(cfg.jobs or cores, cores))


def _whole_model(prepared: Prepared, parts: Partition | None, chosen: list[Option], boundary, cfg: OptimizeConfig,
                 cost_model: CostModel, cost_fn, backends: tuple[str, ...], budget: Budget):
    """The pieces' choices merged, the whole-model options built (streams, greedy, backends),
    verified and timed against the original: the choice, what was skipped, and what the
    placement measured."""
    if not budget.fits(_original_seconds(prepared, budget)):
        original = Option("original", prepared.original, None, (), cost_model.cost(prepared.work), kind="original")
        return _choose_final(prepared, [original], cfg, cost_fn, budget), None, {"backends": list(backends)}
    merged = parts.merge([o.graph for o in chosen]) if parts is not None else prepared.work
    rules = tuple(r for o in chosen for r in o.rules)
    allowed = {r.name for r in cfg.rules}
    final, skipped = _final_options(prepared, merged, rules, cfg, cost_model, allowed, budget)
    final += joint_option(merged, chosen, rules, cost_fn) if cfg.device == "cuda" and cfg.use_streams else []
    placed, placement_report = ([], {"backends": ["cuda"]}) if cfg.device == "cuda" else _backend_options(
        prepared, merged, rules, [o.graph for o in chosen], boundary, cfg, backends, budget.until_final())
    options = distinct(final + placed)
    if cfg.device == "cpu":
        options = by_promise(options)
    threaded = thread_options(options, budget.deadline) if cfg.device == "cpu" else []  # CPU backends' thread counts
    choice = _choose_final(prepared, distinct(options + threaded), cfg, cost_fn, budget)
    return choice, skipped, placement_report


def _search(prepared: Prepared, cfg: OptimizeConfig, cost_fn, budget: Budget, progress) -> tuple[Partition | None, list]:
    """The model partitioned and each piece searched, in the search's share of ``budget``
    (``None`` and nothing when loading spent it all)."""
    if not budget.fits(partition_seconds(len(prepared.work.nodes), cfg.threshold)) or budget.expired():
        budget.skip("search", "partitioning, searching, verifying and placing the pieces",
                    "the time budget could not hold partitioning the model")
        return None, []
    parts = partition(prepared.work, cfg.threshold, rules=cfg.rules)
    seconds, share = budget.search_seconds(len(parts.pieces), cfg.jobs), budget.search_share()
    searched = search_pieces(parts.pieces, cost_fn, cfg, seconds, progress, share.deadline)
    for r in searched:
        if r.lost:  # its search process died or overstayed: the piece is kept as given
            budget.skip("search", f"searching piece {r.index}", r.lost)
    cut = sum(1 for r in searched if r.out_of_time)
    if cut:
        budget.skip("search", f"expanding {cut} of the {len(searched)} pieces further",
                    "each piece's share of the search's time ended")
    return parts, searched


def optimize(model: str | os.PathLike | Graph, progress: Callable[[str, int, int], None] | None = None,
             input_shapes: Mapping[str, Sequence[int]] | None = None,
             inputs: Mapping[str, np.ndarray] | None = None, **options) -> OptimizeResult:
    """Optimize a model (a path or a :class:`~gspo.ir.Graph`); options are :class:`OptimizeConfig` fields.

    Everything after the call counts against ``time_budget`` (loading, the front end, the
    search, verifying and placing the pieces, building and timing the whole models): work that
    would run past it is skipped, and the report lists it under ``skipped``; with no time left
    for the final comparison the input is handed back unchanged.

    Args:
        model: the ``.onnx`` path (its dynamic dimensions get defaults unless ``input_shapes``
            pins them; the result keeps them dynamic when it computes the same at other sizes),
            or a loaded graph.
        progress: called with ``(phase, done, total)`` on long work.
        input_shapes: static shapes for graph inputs (``--input-shape``).
        inputs: feeds to verify and time with (``--inputs``); valid random ones otherwise.

    Returns:
        :class:`OptimizeResult` with the optimized graph, its schedule (``None``: one stream)
        and a report (the same as ``gspo optimize --report``).

    Raises:
        OptimizeError: the optimized model's outputs differ from the original's.
        GspoError: bad input (model, profile, options), or a model onnxruntime cannot run.
    """
    given = check_options(options)
    check_model_and_inputs(model, inputs)
    cfg = resolved(given)
    budget = Budget(exact_seconds(cfg), SHARES)
    profile = search_profile(cfg.device, cfg.profile, cfg.force_profile)
    cost_model = CostModel(profile)
    try:
        prepared = prepare(model, input_shapes, inputs, cfg, budget)
    except GspoError:
        refuse_no_outputs(model)  # onnxruntime's own words on a model with no outputs are a page of C++
        raise
    if inputs is not None:
        check_finite_inputs(prepared.feeds[0], "--inputs")  # all NaN: every comparison would compare nothing
    backends = check_backends(cfg.backends if cfg.backends is not None else available_backends())
    if cfg.device == "cpu":
        budget.reserve_final(final_seconds(prepared, backends, budget))

    def cost_fn(g, s):
        return cost_model.cost(g, s)

    show = (lambda phase: (lambda d, t: progress(phase, d, t))) if progress else (lambda phase: None)
    parts, searched = _search(prepared, cfg, cost_fn, budget, show("search"))
    t_search = time.perf_counter() - budget.started
    placing = any(b != DEFAULT_BACKEND for b in backends)
    chosen, pieces_detail, boundary = verify_pieces(prepared, parts, searched, cfg, cost_fn, placing, budget,
                                                     show("verify"))
    choice, skipped, placement_report = _whole_model(prepared, parts, chosen, boundary, cfg, cost_model, cost_fn,
                                                     backends, budget)
    result = _result(inputs, prepared, cfg, given, profile, parts, t_search, choice, pieces_detail, skipped,
                     cost_model, placement_report, budget)
    return with_precision(result, prepared, cfg, backends, budget.started, progress)


def _result(inputs, prepared: Prepared, cfg: OptimizeConfig, given: OptimizeConfig, profile, parts, t_search,
            choice: FinalChoice, pieces_detail, skipped, cost_model, placement_report,
            budget: Budget) -> OptimizeResult:
    """The chosen option as optimize's result, with its report (which shows the options as
    ``given``, before :func:`resolved`)."""
    best = choice.best
    graph, schedule, placement = best.option.graph, best.option.schedule, best.option.placement
    keep_dynamic, dynamic_note = _keeps_dynamic(prepared, graph, schedule, cfg, budget)
    if schedule is not None:
        graph = apply_schedule(graph, schedule)
    graph, source = settled(prepared.original, graph, best.option.settings, prepared.data)
    report = build_report(prepared, given, profile, parts, t_search, choice, pieces_detail, skipped, cost_model,
                          dynamic_note, graph=graph, placement_report=placement_report,
                          inputs_given=inputs is not None, budget=budget)
    return OptimizeResult(prepared.original, graph, schedule, report, keep_dynamic, source, placement)


def _keeps_dynamic(prepared: Prepared, graph: Graph, schedule, cfg: OptimizeConfig, budget: Budget) -> tuple[bool, str]:
    """:func:`~gspo.search.dynamic.keeps_dynamic`, when the budget holds the two sessions it builds."""
    changed = prepared.original.extras.defaulted and graph.key != prepared.original.key
    if changed and not budget.fits(2 * budget.rates.estimate(DEFAULT_BACKEND, len(graph.nodes))):
        budget.skip("final", "checking the result at other sizes of the dynamic dimensions",
                    "the time budget could not hold it")
        return False, "fixed: the time budget left no time to check the result at other sizes"
    return keeps_dynamic(prepared, graph, schedule, cfg)
