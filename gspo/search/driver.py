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
that really reach it; :func:`_final_options` and :func:`_backend_options` (below) build the whole
models, and :func:`~gspo.search.decide.choose_final` compares them; with ``--precision``,
:func:`~gspo.search.reduced.reduced_pick` adds the reduced-precision candidates fitted on the
exact pick and decides them against it by the same confirmation; and
:func:`~gspo.search.dynamic.keeps_dynamic` decides whether the output can keep the input's
dynamic dimensions. One :class:`~gspo.search.budget.Timebox` holds the time of them all; what the
stages use that a caller may replace (the cost model, the timing function, the clock, the
device) is one :class:`~gspo.search.strategies.Strategies`; the run's records make the report
(:func:`~gspo.search.report.build_report`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from gspo.costmodel import CostModel
from gspo.costmodel.db import CalibrationCache
from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.partition import Partition, partition
from gspo.precision.stage import reduced
from gspo.rules import WHOLE_MODEL_RULES, apply_greedily
from gspo.runtime import backends as runtime_backends
from gspo.runtime.backends import (
    DEFAULT_BACKEND,
    available_backends,
    check_backends,
)
from gspo.runtime.verify import check_finite_inputs
from gspo.search.budget import RunLog, Shares, Timebox
from gspo.search.build_costs import (
    partition_seconds,
    streams_seconds,
)
from gspo.search.candidate import (
    Candidate,
    Measured,
    distinct,
    estimate_or,
)
from gspo.search.config import (
    OptimizeConfig,
    OptimizeError,
    check_model_and_inputs,
    check_options,
    refuse_no_outputs,
)
from gspo.search.decide import by_promise, choose_final, final_seconds, original_seconds
from gspo.search.device import Device, device_of
from gspo.search.dynamic import keeps_dynamic
from gspo.search.joint import joint_option
from gspo.search.pieces import VerifiedPieces, verify_pieces
from gspo.search.placement import default_db_path, measure_crossing, mixed_placement, time_pieces
from gspo.search.pool import search_pieces
from gspo.search.prepare import prepare
from gspo.search.prepared import Prepared
from gspo.search.reduced import reduced_pick
from gspo.search.report import (
    FinalChoice,
    Run,
    WholeModel,
    build_report,
)
from gspo.search.report_parts import (
    PiecesTimed,
    PlacementRefusal,
    PlacementReport,
    StreamsSkipped,
)
from gspo.search.result import OptimizeResult
from gspo.search.strategies import Strategies
from gspo.search.threads import settled
from gspo.streams import Placement, apply_schedule, assign_streams

__all__ = ["OptimizeConfig", "OptimizeResult", "OptimizeError", "optimize"]

log = logging.getLogger(__name__)

#: How ``--time-budget`` is divided among the stages (see :class:`~gspo.search.budget.Shares`).
SHARES = Shares()
#: The whole model on streams is left unmeasured when estimated slower than on one stream by more
#: than this fraction.
STREAMS_SKIP_MARGIN = 0.25


# ---------------------------------------------------------------- whole model
#: The labels of the whole-model ablations in the final pool: the input on Nimble's streams
#: once the pieces changed something (with nothing changed, the input on streams is the result
#: on streams, :data:`ON_STREAMS`), and the merged result on Nimble's streams.
STREAMS_ONLY = "streams only"
ON_STREAMS = "optimized+streams"


def _final_options(prepared: Prepared, merged: Graph, chosen: Sequence[Candidate], rules: tuple[str, ...],
                   cfg: OptimizeConfig, tools: Strategies, allowed,
                   timebox: Timebox) -> tuple[list[Candidate], StreamsSkipped | None]:
    """The whole-model pool and its ablations: the original on one stream; the merged result
    (rules only, one stream); with streams, the merged result on Nimble's streams, the input on
    Nimble's streams (streams only), and the merged result on the streams its pieces chose (the
    joint search's own schedule), each unless clearly slower by estimate or the time budget is
    spent; and the whole model rewritten greedily when something can be batched across pieces.
    Identical candidates (the same graph on the same schedule) are kept once."""
    original, plain = prepared.original, prepared.plain
    options = [Candidate(original, None, (), tools.cost(plain), label="original", kind="original")]
    # No piece changed: what the front end alone did (folded constants) is no optimization,
    # so streams, if any, go on the original as given.
    changed = merged.key != plain.key
    if changed and merged.key != original.key:
        options.append(Candidate(merged, None, rules, tools.cost(merged), label="optimized", kind="merged"))
    skipped = None
    if cfg.search.use_streams:
        skipped = _on_streams(options, merged if changed else original, rules if changed else (), ON_STREAMS,
                              "the whole model on streams", tools, cfg, timebox)
        if changed:  # the input on streams, beside the result on streams (streams only)
            streams_only = _on_streams(options, original, (), STREAMS_ONLY, "the input on streams", tools, cfg, timebox)
            skipped = skipped or streams_only
        options += joint_option(merged, chosen, rules, tools.cost)
    options += _greedy_option(prepared, merged, cfg, tools, allowed, timebox)
    return distinct(options), skipped


def _on_streams(options: list[Candidate], base: Graph, rules: tuple[str, ...], label: str, what: str,
                tools: Strategies, cfg: OptimizeConfig, timebox: Timebox) -> StreamsSkipped | None:
    """``base`` on Nimble's streams appended to ``options`` as ``label`` (see :func:`_streams_option`),
    unless the time budget cannot hold assigning them (the budget says so: ``what``); why not."""
    if not timebox.fits(streams_seconds(len(base.nodes))):
        timebox.skip("final", what, "the time budget could not hold assigning them")
        return StreamsSkipped(reason="the time budget was spent")
    option, skipped = _streams_option(base, rules, tools, cfg.search.max_streams, label)
    options += [option] if option is not None else []
    return skipped


def _greedy_option(prepared: Prepared, merged: Graph, cfg: OptimizeConfig, tools: Strategies, allowed,
                   timebox: Timebox) -> list[Candidate]:
    """The whole model rewritten greedily, when something can be batched across pieces."""
    original, plain = prepared.original, prepared.plain
    batching = WHOLE_MODEL_RULES[0]
    # Only when something can be batched across pieces: elsewhere the pieces' greedy variants
    # already cover it, and greedy rewriting of a whole large model costs tens of seconds.
    if not (cfg.search.use_rules and batching.name in allowed and next(iter(batching.match(plain)), None) is not None):
        return []
    if timebox.expired():
        timebox.skip("final", "the whole model rewritten greedily", "the time budget was spent")
        return []
    whole, counts = apply_greedily(plain, [r for r in WHOLE_MODEL_RULES if r.name in allowed])
    if whole.key in (original.key, merged.key):
        return []
    return [Candidate(whole, None, tuple(Counter(counts).elements()), tools.cost(whole), label="greedy-whole-model",
                      kind="greedy")]


def _streams_option(base: Graph, rules: tuple[str, ...], tools: Strategies, max_streams: int,
                    label: str = ON_STREAMS) -> tuple[Candidate | None, StreamsSkipped | None]:
    """``base`` on streams, unless on one stream already or estimated clearly slower (then why):
    kind ``"streams"`` when ``base`` is the input as given (no rules), else ``"merged"``."""
    s = assign_streams(base, max_streams=max_streams)
    if s.num_streams <= 1:
        return None, None
    # Measured only when the cost model does not call it clearly slower: a whole large model on
    # streams costs seconds to build and time (NASNet-A Large: ~0.8 s a run against ~0.53 s on
    # one stream), and "clearly" is beyond the parallel model's mean error (about 20%, the
    # profile's evaluation report).
    est_streams, est_one = estimate_or(tools.cost, base, s, None), estimate_or(tools.cost, base, None, None)
    if est_streams is None or est_one is None or est_streams <= est_one * (1 + STREAMS_SKIP_MARGIN):
        return Candidate(base, s, rules, est_streams, label=label, kind="merged" if rules else "streams"), None
    return None, StreamsSkipped(estimated_ms=est_streams * 1e3, estimated_one_stream_ms=est_one * 1e3)


def _backend_options(prepared: Prepared, merged: Graph, rules: tuple[str, ...], verified: VerifiedPieces,
                     cfg: OptimizeConfig, tools: Strategies, backends: tuple[str, ...],
                     timebox: Timebox) -> tuple[list[Candidate], PlacementReport]:
    """The original and the optimized model each whole on every other backend, and the
    optimized model with each piece on its fastest backend when that is estimated to pay (see
    :mod:`gspo.search.placement`; not when ``timebox`` cannot hold timing the pieces); and what
    was measured, for the report."""
    others = [b for b in backends if b != DEFAULT_BACKEND]
    report = PlacementReport(list(backends))
    if not others:
        return [], report
    options = []
    changed = merged.key != prepared.plain.key  # what the front end alone did is no optimization
    for b in others:
        options.append(Candidate(prepared.original, placement=Placement.whole(prepared.original, b),
                                 label=f"original@{b}", kind="original"))
        if changed:
            options.append(Candidate(merged, None, rules, placement=Placement.whole(merged, b), label=f"optimized@{b}",
                                     kind="merged"))
    crossing = sum(timebox.rates.estimate(b, 2) for b in backends)
    pieces, boundary = [o.graph for o in verified.chosen], verified.boundary
    if boundary is None or not timebox.fits(crossing):
        if boundary is not None:
            timebox.skip("placement", "timing the pieces on each backend", "the time budget could not hold it")
        return options, report
    db = CalibrationCache(cfg.device.db_path or default_db_path(), tools.device.machine,
                          runtime_backends.backend_versions(backends))
    try:
        feeds = [boundary.feeds_at(g) for g in pieces]
        times = time_pieces(pieces, feeds, backends, db, tolerance=cfg.tolerance, timebox=timebox, measure=tools.measure)
        fixed, bandwidth = measure_crossing(backends, db)
    finally:
        db.close()
    mixed, estimate = mixed_placement(pieces, times, fixed, bandwidth, backends)
    refused = [PlacementRefusal(k, b, why) for k, t in enumerate(times) for b, why in t.refused.items()]
    report = PlacementReport(list(backends), PiecesTimed(estimate, fixed, refused, sum(t.cached for t in times)))
    if mixed is not None:
        options.append(Candidate(merged, None, rules, placement=mixed, label="optimized@mixed", kind="merged"))
    return options, report


def resolved(cfg: OptimizeConfig, cores: int | None = None, device: Device | None = None) -> OptimizeConfig:
    """``cfg`` with what it leaves to gspo chosen for this machine, as every stage reads it: the
    stream cap (``max_streams``: the device's, :meth:`~gspo.search.device.Device.streams`) and the
    search's processes (``jobs``: one per core, and never more than the cores)."""
    cores = cores or os.cpu_count() or 1
    device = device or device_of(cfg.device.name, cfg.device.cuda_runtime)
    return cfg.replace(max_streams=cfg.search.max_streams or device.streams(cores),
                       jobs=min(cfg.search.jobs or cores, cores))


def _whole_model(prepared: Prepared, parts: Partition | None, pieces: VerifiedPieces, cfg: OptimizeConfig,
                 tools: Strategies, backends: tuple[str, ...], timebox: Timebox, progress=None) -> WholeModel:
    """The whole-model stage: the exact candidates decided against the original
    (:func:`_exact_model`), then, with ``--precision``, the reduced-precision candidates fitted on
    the exact pick and decided against it (:func:`~gspo.search.reduced.reduced_pick`)."""
    whole = _exact_model(prepared, parts, pieces, cfg, tools, backends, timebox)
    say = (lambda text: progress(text, 0, 0)) if progress else None
    return dataclasses.replace(whole, precision=reduced_pick(prepared, whole.choice, cfg, tools, backends, timebox, say))


def _exact_model(prepared: Prepared, parts: Partition | None, pieces: VerifiedPieces, cfg: OptimizeConfig,
                 tools: Strategies, backends: tuple[str, ...], timebox: Timebox) -> WholeModel:
    """The pieces' choices merged, the whole-model candidates built (streams, greedy, backends),
    verified and timed against the original: the choice, what was skipped, and what the
    placement measured."""
    chosen = pieces.chosen
    if not prepared.feeds:  # the budget ended while the inputs were drawn (prepare logged it)
        timebox.skip("final", "comparing the whole model's options with the original (the input is returned)",
                     "the time budget ended while the random inputs were drawn")
        unmeasured = [Measured(Candidate(prepared.original, None, (), tools.cost(prepared.plain), label="original",
                                         kind="original"))]
        return WholeModel(FinalChoice(unmeasured[0], unmeasured, unmeasured, []), None, PlacementReport(list(backends)))
    if not timebox.fits(original_seconds(prepared, timebox)):
        original = Candidate(prepared.original, None, (), tools.cost(prepared.plain), label="original", kind="original")
        return WholeModel(choose_final(prepared, [original], cfg, tools, timebox), None, PlacementReport(list(backends)))
    merged = parts.merge([o.graph for o in chosen]) if parts is not None else prepared.plain
    rules = tuple(r for o in chosen for r in o.rules)
    allowed = {r.name for r in cfg.search.rules}
    final, skipped = _final_options(prepared, merged, chosen, rules, cfg, tools, allowed, timebox)

    def placed(pool: list[Candidate]) -> tuple[list[Candidate], PlacementReport]:  # where the device places
        options, report = _backend_options(prepared, merged, rules, pieces, cfg, tools, backends, timebox.until_final())
        return by_promise(distinct(pool + options)), report

    options, placement_report = tools.device.whole_model_options(final, placed, timebox.end)
    return WholeModel(choose_final(prepared, options, cfg, tools, timebox), skipped, placement_report)


def _search(prepared: Prepared, cfg: OptimizeConfig, tools: Strategies, timebox: Timebox,
            progress) -> tuple[Partition | None, list]:
    """The model partitioned and each piece searched, in the search's share of ``timebox``
    (``None`` and nothing when loading spent it all)."""
    fits = timebox.fits(partition_seconds(len(prepared.plain.nodes), cfg.search.threshold))
    if not prepared.feeds or timebox.expired() or not fits:  # no feeds: the budget ended while they were drawn
        timebox.skip("search", "partitioning, searching, verifying and placing the pieces",
                     "the time budget could not hold partitioning the model")
        return None, []
    parts = partition(prepared.plain, cfg.search.threshold, rules=cfg.search.rules)
    seconds, share = timebox.search_seconds(len(parts.pieces), cfg.search.jobs), timebox.search_share()
    searched = search_pieces(parts.pieces, tools.cost, cfg, seconds, progress, share.end)
    for r in searched:
        if r.lost:  # its search process died or overstayed: the piece is kept as given
            timebox.skip("search", f"searching piece {r.index}", r.lost)
    cut = sum(1 for r in searched if r.out_of_time)
    if cut:
        timebox.skip("search", f"expanding {cut} of the {len(searched)} pieces further",
                     "each piece's share of the search's time ended")
    return parts, searched


def optimize(model: str | os.PathLike | Graph, config: OptimizeConfig | None = None, *,
             progress: Callable[[str, int, int], None] | None = None,
             input_shapes: Mapping[str, Sequence[int]] | None = None, inputs: Mapping[str, np.ndarray] | None = None,
             strategies: Strategies | None = None, started: float | None = None, **options) -> OptimizeResult:
    """Optimize a model (a path or a :class:`~gspo.ir.Graph`) with ``config`` (default: the
    defaults), any :class:`OptimizeConfig` field given as a keyword option replacing its value.

    Everything after the call (or ``started``) counts against ``time_budget`` (loading, drawing
    the inputs, the search, verifying and placing the pieces, timing the whole models): work that
    would run past it is skipped, and the report lists it under ``skipped``; with no time left
    for the final comparison (or the inputs) the input is handed back unchanged.

    Args:
        model: the ``.onnx`` path (its dynamic dimensions get defaults unless ``input_shapes``
            pins them; the result keeps them dynamic when it computes the same at other sizes),
            or a loaded graph.
        progress: called with ``(phase, done, total)`` on long work.
        input_shapes: static shapes for graph inputs (``--input-shape``).
        inputs: feeds to verify and time with (``--inputs``); valid random ones otherwise.
        strategies: the cost model, the timing function and the clock to use instead of the
            profile's cost model, :func:`gspo.runtime.interleaved` and :func:`time.perf_counter`
            (:class:`~gspo.search.strategies.Strategies`; tests pass fakes).
        started: when the run began on that clock, if before the call (``gspo optimize``: when
            the command began, its imports and reading ``--inputs`` counted).

    Returns:
        :class:`OptimizeResult` with the optimized graph, its schedule (``None``: one stream)
        and a report (the same as ``gspo optimize --report``).

    Raises:
        OptimizeError: the optimized model's outputs differ from the original's.
        GspoError: bad input (model, profile, options), or a model onnxruntime cannot run.
    """
    given = check_options(options, config)
    check_model_and_inputs(model, inputs)
    tools = _on_device(strategies or Strategies(), given)
    cfg = resolved(given, device=tools.device)
    log = RunLog()  # the run's: the work skipped to hold its time (the report's ``skipped``), the build rates learned
    timebox = Timebox.of(cfg.timing.time_budget, SHARES, clock=tools.clock, run=log, started=started,
                         reduced=reduced(cfg))
    profile = tools.device.profile(cfg.device.profile, cfg.device.force_profile)
    tools = dataclasses.replace(tools, cost_model=tools.cost_model or CostModel(profile))
    try:
        prepared = prepare(model, input_shapes, inputs, cfg, timebox)
    except GspoError:
        refuse_no_outputs(model)  # onnxruntime's own words on a model with no outputs are a page of C++
        raise
    if inputs is not None:
        check_finite_inputs(prepared.feeds[0], "--inputs")  # all NaN: every comparison would compare nothing
    backends = check_backends(cfg.device.backends if cfg.device.backends is not None else available_backends())
    timebox = timebox.reserve_final(tools.device.final_reserve(lambda: final_seconds(prepared, backends, timebox)))
    show = (lambda phase: (lambda d, t: progress(phase, d, t))) if progress else (lambda phase: None)
    parts, searched = _search(prepared, cfg, tools, timebox, show("search"))
    t_search = timebox.clock() - timebox.started
    placing = any(b != DEFAULT_BACKEND for b in backends)
    pieces = verify_pieces(prepared, parts, searched, cfg, tools, placing, timebox, show("verify"))
    whole = _whole_model(prepared, parts, pieces, cfg, tools, backends, timebox, progress)
    run = Run(prepared, given, profile, parts, t_search, pieces, whole, inputs is not None, tools, timebox, log.skipped)
    return _result(run, cfg)


def _on_device(tools: Strategies, given: OptimizeConfig) -> Strategies:
    """``tools`` with the device ``given`` names when they name none."""
    if tools.device is not None:
        return tools
    return dataclasses.replace(tools, device=device_of(given.device.name, given.device.cuda_runtime))


def _result(run: Run, cfg: OptimizeConfig) -> OptimizeResult:
    """The chosen candidate as optimize's result, with its report (which shows the options as
    given, before :func:`resolved`); ``cfg``: the options resolved. A reduced-precision pick
    replaces the exact one (the report's figures stay the exact decision's, its ``precision``
    block says what the reduced one gained): it is saved with the sizes it was judged at."""
    prepared, best = run.prepared, run.whole.choice.best
    graph, schedule, placement = best.candidate.graph, best.candidate.schedule, best.candidate.placement
    keep_dynamic, dynamic_note = _keeps_dynamic(prepared, graph, schedule, cfg, run.timebox)
    if schedule is not None:
        graph = apply_schedule(graph, schedule)
    graph, source = settled(prepared.original, graph, best.candidate.settings, prepared.data)
    pick = run.whole.precision.best if run.whole.precision is not None else None
    if pick is None:
        return OptimizeResult(prepared.original, graph, schedule, build_report(run, graph, dynamic_note), keep_dynamic,
                              source, placement)
    if keep_dynamic:
        dynamic_note = "fixed: a reduced precision is judged at the validation data's sizes only"
    report = build_report(run, graph, dynamic_note)
    reduced_graph, _ = settled(prepared.original, pick.candidate.graph, pick.candidate.settings, None)
    return OptimizeResult(prepared.original, reduced_graph, None, report, False, None, pick.candidate.placement)


def _keeps_dynamic(prepared: Prepared, graph: Graph, schedule, cfg: OptimizeConfig, timebox: Timebox) -> tuple[bool, str]:
    """:func:`~gspo.search.dynamic.keeps_dynamic`, when the budget holds the two sessions it builds."""
    changed = prepared.original.extras.defaulted and graph.key != prepared.original.key
    if changed and not timebox.fits(2 * timebox.rates.estimate(DEFAULT_BACKEND, len(graph.nodes))):
        timebox.skip("final", "checking the result at other sizes of the dynamic dimensions",
                     "the time budget could not hold it")
        return False, "fixed: the time budget left no time to check the result at other sizes"
    return keeps_dynamic(prepared, graph, schedule, cfg)
