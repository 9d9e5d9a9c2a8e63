"""``gspo optimize``: front end, partition, search each piece, verify on the board, merge,
verify, save.

Never slower, never different: the model the user gave is always a candidate; every other
candidate is run against it on the same inputs and rejected, with the reason, when onnxruntime
refuses it or its outputs differ; a merged model that differs from the original is an error
(nothing is written); and if nothing is measured faster than the original, the original is the
result.

The steps, each a function below: :func:`_prepare` loads the model as given and as the front end
makes it plain, draws valid inputs and checks the plain graph against the original;
:func:`_search_pieces` searches the pieces of the plain graph in a process pool;
:func:`_choose_piece` verifies and times each piece's options on the values that really reach
it; :func:`_final_options` and :func:`_choose_final` compare the whole models; and
:func:`_keeps_dynamic` decides whether the output can keep the input's dynamic dimensions.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import multiprocessing
import os
import signal
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gspo.costmodel import CostModel, device_description, load_profile
from gspo.costmodel.db import CalibrationDB
from gspo.errors import GspoError
from gspo.ir import Graph, load, save
from gspo.ir.frontend import describe_defaults
from gspo.ir.onnx_io import from_model, save_bytes, serialize, to_model, uses_external_data
from gspo.partition import DEFAULT_THRESHOLD, Partition, partition
from gspo.rules import DEFAULT_RULES, GREEDY_RULES, WHOLE_MODEL_RULES, Rule, apply_greedily
from gspo.runtime import (
    capture_values,
    compare_outputs,
    make_session,
    random_inputs,
    run,
    runtime_version,
)
from gspo.runtime.backends import (
    DEFAULT_BACKEND,
    available_backends,
    backend_versions,
    check_backends,
)
from gspo.runtime.inputs import check_inputs
from gspo.runtime.verify import DEFAULT_ATOL, DEFAULT_NTOL, DEFAULT_RTOL, Tolerance
from gspo.search.backtrack import Candidate, SearchConfig, search
from gspo.search.placement import default_db_path, measure_crossing, mixed_placement, time_pieces
from gspo.search.trial import Option, Outcome, ReferenceError_, Trial, distinct, pick, spread
from gspo.streams import Placement, Schedule, apply_schedule, assign_streams

__all__ = ["OptimizeConfig", "OptimizeResult", "OptimizeError", "optimize"]

log = logging.getLogger(__name__)

#: Shares of ``--time-budget``: the search gets half (spread over the pieces and jobs), the final
#: whole-model comparison and its confirmation keep a fifth, piece verification gets the rest.
#: Measured on NASNet-A Large (24 pieces), where verification and the final comparison of a
#: 500 ms model take longer than the search (benchmarks/RESULTS.md).
SEARCH_SHARE = 0.5
FINAL_SHARE = 0.2
#: The whole model on streams is left unmeasured when estimated slower than on one stream by more
#: than this fraction.
STREAMS_SKIP_MARGIN = 0.25


class OptimizeError(GspoError):
    """The optimized model differs from the original; nothing was written."""


@dataclass(frozen=True)
class OptimizeConfig:
    """Settings of ``optimize`` (the CLI builds this from its options)."""

    device: str = "cpu"
    profile: str | None = None
    force_profile: bool = False
    alpha: float = 1.05
    budget: int = 40
    #: Seconds for the whole optimization (anytime): 90 keeps a full zoo model under 2 minutes
    #: on 2 cores (benchmarks/RESULTS.md); None = no limit.
    time_budget: float | None = 90.0
    threshold: int = DEFAULT_THRESHOLD
    max_streams: int | None = None
    jobs: int = 0
    use_rules: bool = True
    use_streams: bool = True
    keep: int = 3
    seed: int = 0
    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL
    ntol: float = DEFAULT_NTOL
    #: Random input sets every candidate is verified on (user inputs replace them).
    verify_runs: int = 2
    timing_runs: int = 30
    #: Seconds of timing per piece, and per whole-model comparison, at most (runs shrink to fit,
    #: at least 5).
    piece_timing_budget: float = 1.0
    final_timing_budget: float = 8.0
    #: How much faster than the unmodified piece a piece's pick must measure: the best of several
    #: noisy options is biased low, so the bar is high.
    margin: float = 0.05
    #: The same for the whole model, whose choice is made among two or three options and must
    #: hold in two separate timings (the confirmation): a lower bar, so that a real gain of 2-5%
    #: (NASNet-A Large's padded stem, measured 3.6-8.3% in four sets) is not thrown away as noise.
    final_margin: float = 0.02
    #: "measured": pick by measured latency (never slower as measured; may differ between runs
    #: when candidates are within noise). "estimated": pick by the cost model among the verified
    #: candidates (byte-identical output for the same input, seed and profile).
    select: str = "measured"
    #: Pass the model through the front end (constant folding, shape arithmetic as constants).
    frontend: bool = True
    #: Backends to place the model or its pieces on (``None``: every one installed here).
    backends: tuple[str, ...] | None = None
    #: Calibration database caching piece timings per backend (``None``: the user's cache).
    db_path: str | None = None
    rules: tuple[Rule, ...] = field(default=DEFAULT_RULES, compare=False)

    def validate(self) -> None:
        """Raise :class:`GspoError` with a one-line message on an option out of range."""
        finite = {"--alpha": self.alpha, "--rtol": self.rtol, "--atol": self.atol, "ntol": self.ntol,
                  "margin": self.margin, "final margin": self.final_margin}
        if self.time_budget is not None:
            finite["--time-budget"] = self.time_budget
        for name, value in finite.items():
            if not math.isfinite(value):
                raise GspoError(f"{name} must be a finite number (got {value})")
        if self.alpha < 1:
            raise GspoError(f"--alpha must be at least 1 (got {self.alpha})")
        if self.budget < 0:
            raise GspoError(f"--budget must not be negative (got {self.budget})")
        if self.time_budget is not None and self.time_budget <= 0:
            raise GspoError(f"--time-budget must be positive (got {self.time_budget})")
        if self.max_streams is not None and self.max_streams < 1:
            raise GspoError(f"--max-streams must be at least 1 (got {self.max_streams})")
        if self.jobs < 0:
            raise GspoError(f"--jobs must not be negative (got {self.jobs})")
        if self.threshold < 1:
            raise GspoError(f"--threshold must be at least 1 (got {self.threshold})")
        if min(self.rtol, self.atol, self.ntol) < 0:
            raise GspoError("tolerances must not be negative")
        if self.verify_runs < 1:
            raise GspoError(f"verify_runs must be at least 1 (got {self.verify_runs})")
        if not (0 <= self.margin < 1 and 0 <= self.final_margin < 1):
            raise GspoError(f"margins must be in [0, 1) (got {self.margin}, {self.final_margin})")
        if self.select not in ("measured", "estimated"):
            raise GspoError(f"--select must be measured or estimated (got {self.select!r})")
        if self.device not in ("cpu", "cuda"):
            raise GspoError(f"unknown device {self.device!r}")
        if self.device == "cuda":
            from gspo.runtime.cuda import require_gpu

            require_gpu()
            raise GspoError("gspo optimize --device cuda is not implemented yet (no GPU to build it on)")

    @property
    def tolerance(self) -> Tolerance:
        """The equivalence tolerance these settings give."""
        return Tolerance(self.rtol, self.atol, self.ntol)


@dataclass(frozen=True)
class OptimizeResult:
    """What ``optimize`` found: the graph to save, its schedule (``None``: one stream), the report.

    ``keep_dynamic``: the result was checked at other input sizes and is saved with the input's
    dynamic dimensions.
    """

    original: Graph
    graph: Graph
    schedule: Schedule | None
    report: dict
    keep_dynamic: bool = False
    #: The file the model came from, when its bytes are the result as they are (nothing changed
    #: and no input shape pinned): saving then copies it.
    source: Path | None = None
    #: The backend of each op, when not onnxruntime for all (``gspo run`` follows it).
    placement: Placement | None = None

    @property
    def unchanged(self) -> bool:
        """Whether the result is the input as given (same graph, no schedule, no placement)."""
        return self.graph.key == self.original.key and self.schedule is None and self.placement is None

    def save(self, path: str | os.PathLike, overwrite: bool = False) -> Path:
        """Write the optimized model (its schedule and placement, if any, in the model's
        metadata); an unchanged model read from a file is written as the same bytes."""
        if self.unchanged and self.source is not None:
            return save_bytes(self.source.read_bytes(), path, overwrite)
        return save(self.graph, path, self.schedule.to_json() if self.schedule else None, overwrite,
                    keep_dynamic=self.keep_dynamic, placement=self.placement.to_json() if self.placement else None)


# ------------------------------------------------------------------ preparing
@dataclass
class _Prepared:
    """The model as given and as searched, the inputs every check runs on, and what happened."""

    original: Graph
    work: Graph
    feeds: list[dict[str, np.ndarray]]
    notes: list[str]


def _loaded(model: str | os.PathLike | Graph, input_shapes, use_frontend: bool) -> tuple[Graph, Graph]:
    if isinstance(model, Graph):
        if not use_frontend:
            return model, model
        return model, dataclasses.replace(from_model(to_model(model), plain=True), extras=model.extras)
    original = load(model, input_shapes)
    return original, (load(model, input_shapes, plain=True) if use_frontend else original)


def _prepare(model, input_shapes, inputs, cfg: OptimizeConfig) -> _Prepared:
    """Load, draw inputs, and check the front end's graph against the model as given."""
    original, work = _loaded(model, input_shapes, cfg.frontend)
    if inputs is not None:
        inputs = check_inputs(inputs, original)
    notes = []
    if original.extras.defaulted:
        pins = {v.name: v.shape for v in original.inputs}
        notes.append(describe_defaults(original.extras.defaulted, pins))
    feeds = [dict(inputs)] if inputs is not None else [random_inputs(work, cfg.seed + i) for i in range(cfg.verify_runs)]
    if work is original:
        _require_runs(original, feeds[0])
        return _Prepared(original, work, feeds, notes)
    try:
        with Trial(original, [Option("plain", work)], feeds[:1], cfg.tolerance) as trial:
            if trial.rejected:
                notes.append(f"the front end's graph was not used: {trial.rejected[0].rejected}")
                work = original
    except ReferenceError_ as e:
        raise GspoError(f"onnxruntime cannot run the model: {e}") from None
    return _Prepared(original, work, feeds, notes)


def _require_runs(graph: Graph, feeds) -> None:
    try:
        run(make_session(graph), feeds)
    except GspoError as e:
        raise GspoError(f"onnxruntime cannot run the model: {e}") from None


# ------------------------------------------------------------------- the pool
_WORK: dict = {}  # set before the fork; read-only in the workers


def _search_piece(index: int):
    piece, cost_fn, cfg, per_piece_time = _WORK["pieces"][index], _WORK["cost_fn"], _WORK["cfg"], _WORK["time"]
    scfg = SearchConfig(cfg.alpha, cfg.budget, per_piece_time, _WORK["max_streams"], cfg.use_rules, cfg.use_streams,
                        cfg.keep, cfg.rules)
    result = search(piece.graph, cost_fn, scfg)
    cands = [(c.graph.nodes, dict(c.graph.weights), dict(c.graph.retired_weights), c.schedule, c.cost, c.applied)
             for c in (result.start, *result.candidates)]
    return index, cands, result.expanded, result.generated, result.seconds, result.invalid_reasons


def _rebuild(template: Graph, packed) -> Candidate:
    nodes, weights, retired, schedule, cost, applied = packed
    g = dataclasses.replace(template, nodes=nodes, weights=weights, retired_weights=retired)
    return Candidate(g, schedule, cost, applied)


def _quiet_worker() -> None:
    """A search process leaves interrupts to the parent (which ends the pool) and dies silently
    when the pool ends it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _search_pieces(pieces, cost_fn, cfg, max_streams, per_piece_time, jobs, progress):
    """Search every piece (in a process pool when ``jobs`` > 1); results in piece order."""
    _WORK.update(pieces=pieces, cost_fn=cost_fn, cfg=cfg, max_streams=max_streams, time=per_piece_time)
    results = [None] * len(pieces)
    try:
        if jobs <= 1 or len(pieces) <= 1:
            for i in range(len(pieces)):
                results[i] = _search_piece(i)
                if progress:
                    progress(i + 1, len(pieces))
        else:
            ctx = multiprocessing.get_context("fork")
            with ctx.Pool(jobs, initializer=_quiet_worker) as pool:
                for done, r in enumerate(pool.imap_unordered(_search_piece, range(len(pieces))), 1):
                    results[r[0]] = r
                    if progress:
                        progress(done, len(pieces))
    finally:
        _WORK.clear()
    return results


# --------------------------------------------------------------------- pieces
def _piece_options(piece, cands: list[Candidate], cfg: OptimizeConfig, max_streams: int, allowed) -> list[Option]:
    """The unmodified piece, its greedy variant, the search's candidates (and each on one
    stream), and the unmodified piece on streams; without repeats."""
    start, improving = cands[0], cands[1:]
    options = [Option("unmodified", piece.graph, None, (), start.cost)]
    if cfg.use_rules:
        greedy, counts = apply_greedily(piece.graph, [r for r in GREEDY_RULES if r.name in allowed])
        if greedy.key != piece.graph.key:
            options.append(Option("greedy", greedy, None, tuple(Counter(counts).elements())))
    for i, c in enumerate(improving):
        options.append(Option(f"candidate{i}", c.graph, c.schedule, c.applied, c.cost))
    for i, c in enumerate(improving):
        if c.schedule is not None:  # the substitutions alone, in case the streams do not pay
            options.append(Option(f"candidate{i}-1stream", c.graph, None, c.applied))
    if cfg.use_streams:
        s = assign_streams(piece.graph, max_streams=max_streams)
        if s.num_streams > 1:
            options.append(Option("unmodified+streams", piece.graph, s))
    return distinct(options)


def _choose_piece(piece, options: list[Option], feeds, cfg: OptimizeConfig, timing_budget: float,
                  cost_fn) -> tuple[Option, list[Outcome], str]:
    """Verify and time a piece's options on the values that reach it; the pick, every outcome,
    and a note when the piece could not be tried."""
    if len(options) < 2:
        return options[0], [], ""
    try:
        with Trial(piece.graph, options, feeds, cfg.tolerance) as trial:
            outcomes = trial.time(cfg.timing_runs, timing_budget)
    except ReferenceError_ as e:
        return options[0], [], f"left unchanged: onnxruntime cannot run the piece alone ({e})"
    best = pick(outcomes, "unmodified", cfg.margin, cfg.select, lambda o: _estimate(o, cost_fn))
    return best.option, outcomes, ""


def _estimate(option: Option, cost_fn) -> float:
    """The option's estimated cost (infinite when the cost model cannot read its graph)."""
    if option.estimated_s is not None:
        return option.estimated_s
    try:
        return cost_fn(option.graph, option.schedule)
    except (GspoError, KeyError, TypeError, ValueError):
        return float("inf")


def _piece_report(k, piece, searched, chosen: Option, outcomes: list[Outcome], note: str) -> dict:
    _, packed, expanded, generated, seconds, invalid = searched
    return {
        "piece": k, "ops": piece.size, "expanded": expanded, "generated": generated, "search_s": seconds,
        "estimated_unmodified_s": packed[0][4], "chosen": chosen.label, "note": note,
        "invalid_rewrites": dict(invalid),
        "candidates": [{"label": o.label, "measured_s": o.median_s, "rejected": o.rejected,
                        "estimated_s": o.option.estimated_s if o.label.startswith("candidate") and
                        not o.label.endswith("1stream") else None,
                        "rules": list(dict.fromkeys(o.option.rules))} for o in outcomes],
    }


def _optimize_pieces(parts: Partition, searched, prepared: _Prepared, cfg, max_streams, cost_fn, deadline,
                     progress) -> tuple[list[Option], list[dict], list[dict]]:
    """Each piece's chosen option and its report, sharing what is left of the time budget; and
    the values that cross between pieces (per input set)."""
    pieces = parts.pieces
    names = [v.name for p in pieces for v in p.graph.inputs]
    boundary = [capture_values(prepared.work, f, names) for f in prepared.feeds]
    allowed = {r.name for r in cfg.rules}
    chosen, reports = [], []
    seconds_per_option = 0.3  # first guess at building, checking and timing one option; then measured
    for k, piece in enumerate(pieces):
        cands = [_rebuild(piece.graph, p) for p in searched[k][1]]
        options = _piece_options(piece, cands, cfg, max_streams, allowed)
        timing_budget = cfg.piece_timing_budget
        if deadline is not None:
            # Anytime: share what is left (less the final comparison's reserve) among the pieces
            # still to verify; drop the least promising options when it cannot hold them all.
            share = (deadline - time.perf_counter() - FINAL_SHARE * cfg.time_budget) / (len(pieces) - k)
            timing_budget = min(timing_budget, max(0.0, share) / 2)
            options = options[:max(1, int(share / seconds_per_option))]
        feeds = [{v.name: b[v.name] for v in piece.graph.inputs} for b in boundary]
        began = time.perf_counter()
        best, outcomes, note = _choose_piece(piece, options, feeds, cfg, timing_budget, cost_fn)
        if outcomes:
            seconds_per_option = max(0.05, (time.perf_counter() - began - timing_budget) / len(options))
        chosen.append(best)
        reports.append(_piece_report(k, piece, searched[k], best, outcomes, note))
        if progress:
            progress(k + 1, len(pieces))
    return chosen, reports, boundary


# ---------------------------------------------------------------- whole model
def _final_options(prepared: _Prepared, merged: Graph, rules: tuple[str, ...], cfg, cost_model, max_streams,
                   allowed, deadline: float | None = None) -> tuple[list[Option], dict | None]:
    """The original, the merged result (and on streams, unless clearly slower by estimate or
    the time budget is spent), and the whole model rewritten greedily when something can be
    batched across pieces."""
    original, work = prepared.original, prepared.work
    options = [Option("original", original, None, (), cost_model.cost(work))]
    # No piece changed: what the front end alone did (folded constants) is no optimization,
    # so streams, if any, go on the original as given.
    base = original if merged.key == work.key else merged
    if base.key != original.key:
        options.append(Option("optimized", merged, None, rules, cost_model.cost(merged)))
    skipped = None
    if cfg.use_streams and deadline is not None and time.perf_counter() > deadline:
        skipped = {"reason": "the time budget was spent"}
    elif cfg.use_streams:
        s = assign_streams(base, max_streams=max_streams)
        if s.num_streams > 1:
            # Measured only when the cost model does not call it clearly slower: a whole large
            # model on streams costs seconds to build and time (NASNet-A Large: ~0.8 s a run
            # against ~0.53 s on one stream), and "clearly" is beyond the parallel model's mean
            # error (about 20%, the profile's evaluation report).
            est_streams, est_one = _cost(cost_model, base, s), _cost(cost_model, base, None)
            if est_streams is None or est_one is None or est_streams <= est_one * (1 + STREAMS_SKIP_MARGIN):
                options.append(Option("optimized+streams", base, s, rules if base is merged else (), est_streams))
            else:
                skipped = {"estimated_ms": est_streams * 1e3, "estimated_one_stream_ms": est_one * 1e3}
    batching = WHOLE_MODEL_RULES[0]
    # Only when something can be batched across pieces: elsewhere the pieces' greedy variants
    # already cover it, and greedy rewriting of a whole large model costs tens of seconds.
    if cfg.use_rules and batching.name in allowed and next(iter(batching.match(work)), None) is not None:
        whole, counts = apply_greedily(work, [r for r in WHOLE_MODEL_RULES if r.name in allowed])
        if whole.key not in (original.key, merged.key):
            options.append(Option("greedy-whole-model", whole, None, tuple(Counter(counts).elements()),
                                  cost_model.cost(whole)))
    return distinct(options), skipped


def _backend_options(prepared: _Prepared, merged: Graph, rules: tuple[str, ...], pieces: list[Graph],
                     boundary: list[dict], cfg: OptimizeConfig, cost_model, deadline) -> tuple[list[Option], dict]:
    """The original and the optimized model each whole on every other backend, and the
    optimized model with each piece on its fastest backend when that is estimated to pay (see
    :mod:`gspo.search.placement`); and what was measured, for the report."""
    backends = check_backends(cfg.backends if cfg.backends is not None else available_backends())
    others = [b for b in backends if b != DEFAULT_BACKEND]
    report = {"backends": list(backends)}
    if not others:
        return [], report
    options = []
    changed = merged.key != prepared.work.key  # what the front end alone did is no optimization
    for b in others:
        options.append(Option(f"original@{b}", prepared.original, placement=Placement.whole(prepared.original, b)))
        if changed:
            options.append(Option(f"optimized@{b}", merged, None, rules, placement=Placement.whole(merged, b)))
    db = CalibrationDB(cfg.db_path or default_db_path(), device_description("cpu"), backend_versions(backends))
    try:
        feeds = [[{v.name: b[v.name] for v in g.inputs} for b in boundary] for g in pieces]
        times = time_pieces(pieces, feeds, backends, db, tolerance=cfg.tolerance, deadline=deadline)
        fixed, bandwidth = measure_crossing(backends, db)
    finally:
        db.close()
    mixed, estimate = mixed_placement(pieces, times, fixed, bandwidth, backends)
    report.update(estimate, crossing_fixed_s=fixed,
                  refused=[{"piece": k, "backend": b, "reason": why} for k, t in enumerate(times) for b, why in t.refused.items()],
                  pieces_cached=sum(t.cached for t in times))
    if mixed is not None:
        options.append(Option("optimized@mixed", merged, None, rules, placement=mixed))
    return options, report


def _cost(cost_model: CostModel, graph: Graph, schedule: Schedule | None) -> float | None:
    """The estimate, or ``None`` for a graph the cost model cannot read (an exported graph
    before the front end, with shapes unknown)."""
    try:
        return cost_model.cost(graph, schedule)
    except (GspoError, KeyError, TypeError, ValueError):
        return None


def _choose_final(prepared: _Prepared, options: list[Option], cfg, budget, cost_fn) -> tuple[Outcome, list[Outcome]]:
    """Verify the whole-model options against the original and pick one (confirmed by a second
    timing when it is not the original).

    Raises:
        OptimizeError: the merged model's outputs differ from the original's.
    """
    with Trial(prepared.original, options, prepared.feeds, cfg.tolerance) as trial:
        differs = [o for o in trial.rejected if o.label == "optimized" and o.diffs]
        if differs:
            raise OptimizeError(f"the optimized model differs from the original: {differs[0].rejected}; nothing written")
        outcomes = trial.time(cfg.timing_runs, budget)
        estimate = lambda o: _estimate(o, cost_fn)  # noqa: E731
        best = pick(outcomes, "original", cfg.final_margin, cfg.select, estimate)
        if best.label != "original" and cfg.select == "measured":
            # A measured choice replaces the input only when it is faster beyond the timings'
            # spread, and again in a second timing of the same sessions: this machine's speed
            # drifts, and one lucky set of runs must not replace the input with something slower.
            confirm = trial.time(cfg.timing_runs, budget, labels=("original", best.label))
            if not (_beyond_noise(outcomes, best.label, cfg.final_margin)
                    and _beyond_noise(confirm, best.label, cfg.final_margin)):
                best = next(o for o in outcomes if o.label == "original")
    return best, outcomes


def _beyond_noise(outcomes: Sequence[Outcome], label: str, margin: float) -> bool:
    """Whether ``label`` measured faster than the original by more than ``margin`` and more
    than the spread of either timing."""
    chosen = pick(outcomes, "original", margin)
    if chosen.label != label:
        return False
    return _speed_verdict(list(outcomes), chosen)[2] == "faster"


def _feeds_at(graph: Graph, dims: Mapping[tuple[str, int], int], seed: int) -> dict[str, np.ndarray]:
    """Random inputs for ``graph`` with the dynamic dimensions ``dims`` ((input, axis) -> size)."""
    resized = tuple(dataclasses.replace(v, shape=tuple(dims.get((v.name, i), d) for i, d in enumerate(v.shape)))
                    for v in graph.inputs)
    return random_inputs(dataclasses.replace(graph, inputs=resized), seed)


def _keeps_dynamic(prepared: _Prepared, graph: Graph, schedule: Schedule | None, cfg) -> tuple[bool, str]:
    """Whether the result can be saved with the input's dynamic dimensions: it must compute the
    same as the original at other sizes too (batch 2; other dimensions halved)."""
    defaulted = prepared.original.extras.defaulted
    if not defaulted:
        return False, ""
    if graph.key == prepared.original.key:
        return True, "kept"
    if not graph.extras.dynamic_io:
        return False, "fixed: the model's shape arithmetic depends on its dynamic dimensions"
    sizes = [{(d.input, d.axis): (2 if d.value == 1 else max(1, d.value // 2)) for d in defaulted}]
    try:
        ref = make_session(serialize(prepared.original, keep_dynamic=True))
        got = make_session(serialize(graph, schedule.to_json() if schedule else None, keep_dynamic=True))
        for dims in sizes:
            feeds = _feeds_at(prepared.work, dims, cfg.seed)
            try:
                want = run(ref, feeds)
            except GspoError:
                continue  # the original does not run at this size either: nothing to compare
            t = cfg.tolerance
            res = compare_outputs(want, run(got, feeds), t.rtol, t.atol, t.ntol)
            if not res.equivalent:
                return False, f"fixed: at other sizes the result differs ({res.worst.name})"
    except GspoError as e:
        return False, f"fixed: at other sizes the result does not run ({e})"
    return True, "kept"


# --------------------------------------------------------------------- report
def _speed_verdict(outcomes: list[Outcome], best: Outcome) -> tuple[float, float, str]:
    """Speedup of the pick over the original, the timings' relative spread, and the verdict."""
    base = next(o for o in outcomes if o.label == "original")
    speedup = base.median_s / best.median_s
    noise = max(spread(base.timing), spread(best.timing))
    if best.label == "original":
        return speedup, noise, "unchanged"
    return speedup, noise, ("faster" if speedup - 1 > noise else "no measurable change")


def _report(prepared, cfg, profile, parts, t_search, t_total, best: Outcome, outcomes, pieces_detail,
            skipped, cost_model, dynamic_note) -> dict:
    speedup, noise, verdict = _speed_verdict(outcomes, best)
    base = next(o for o in outcomes if o.label == "original")
    rules = Counter(best.option.rules) if best.label != "original" else Counter()
    return {
        "model": prepared.original.name,
        "machine": device_description("cpu"),
        "profile": cfg.profile or "cpu",
        "profile_device": profile.device,
        "pieces": len(parts.pieces),
        "threshold": cfg.threshold,
        "cut_weight": parts.cut_weight,
        "frontend": {"nodes_in_file": len(prepared.original.nodes), "nodes_plain": len(prepared.work.nodes),
                     "used": prepared.work is not prepared.original},
        "notes": prepared.notes,
        "dynamic_dims": dynamic_note or None,
        "search_seconds": t_search,
        "total_seconds": t_total,
        "latency_before_ms": base.median_s * 1e3,
        "latency_after_ms": best.median_s * 1e3,
        "speedup": speedup,
        "timing_spread": noise,
        "verdict": verdict,
        "estimated_before_ms": base.option.estimated_s * 1e3,
        "estimated_after_ms": _estimate(best.option, cost_model.cost) * 1e3,
        "chosen": best.label,
        "select": cfg.select,
        "unchanged": best.label == "original",
        "substitutions": dict(sorted(rules.items())),
        "streams": best.option.schedule.num_streams if best.option.schedule else 1,
        "syncs": len(best.option.schedule.events) if best.option.schedule else 0,
        "equivalence": {d.name: {"max_abs": d.max_abs, "max_rel": d.max_rel, "norm_rel": d.norm_rel}
                        for d in best.diffs},
        "max_rel_err": max((d.norm_rel for d in best.diffs), default=0.0),
        "candidates_rejected_by_verification": sum(1 for p in pieces_detail for c in p["candidates"] if c["rejected"])
        + sum(1 for o in outcomes if o.rejected),
        "rejected": [{"piece": p["piece"], "label": c["label"], "reason": c["rejected"]}
                     for p in pieces_detail for c in p["candidates"] if c["rejected"]]
        + [{"piece": None, "label": o.label, "reason": o.rejected} for o in outcomes if o.rejected],
        "invalid_rewrites": dict(sum((Counter(p["invalid_rewrites"]) for p in pieces_detail), Counter())),
        "final_candidates": [{"label": o.label, "measured_ms": o.median_s * 1e3 if o.median_s else None,
                              "rejected": o.rejected} for o in outcomes],
        "final_streams_skipped": skipped,
        "pieces_detail": pieces_detail,
        "config": {k: v for k, v in dataclasses.asdict(cfg).items() if k != "rules"},
    }


# ----------------------------------------------------------------- optimize
def optimize(model: str | os.PathLike | Graph, progress: Callable[[str, int, int], None] | None = None,
             input_shapes: Mapping[str, Sequence[int]] | None = None,
             inputs: Mapping[str, np.ndarray] | None = None, **options) -> OptimizeResult:
    """Optimize a model (a path or a :class:`~gspo.ir.Graph`); options are :class:`OptimizeConfig` fields.

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
    cfg = OptimizeConfig(**options)
    cfg.validate()
    t0 = time.perf_counter()
    profile = load_profile(cfg.profile or "cpu", device_description("cpu"), runtime_version(),
                           force=cfg.force_profile or cfg.profile is None)
    cost_model = CostModel(profile)
    prepared = _prepare(model, input_shapes, inputs, cfg)
    cores = os.cpu_count() or 1
    max_streams = cfg.max_streams or cores
    jobs = cfg.jobs or cores
    parts = partition(prepared.work, cfg.threshold, rules=cfg.rules)
    deadline = None if cfg.time_budget is None else t0 + cfg.time_budget
    search_time = None
    if cfg.time_budget is not None:
        search_time = SEARCH_SHARE * cfg.time_budget * max(1, jobs) / max(1, len(parts.pieces))

    def cost_fn(g, s):
        return cost_model.cost(g, s)

    show = (lambda phase: (lambda d, t: progress(phase, d, t))) if progress else (lambda phase: None)
    searched = _search_pieces(parts.pieces, cost_fn, cfg, max_streams, search_time, jobs, show("search"))
    t_search = time.perf_counter() - t0
    chosen, pieces_detail, boundary = _optimize_pieces(parts, searched, prepared, cfg, max_streams, cost_fn, deadline,
                                                       show("verify"))
    merged = parts.merge([o.graph for o in chosen])
    rules = tuple(r for o in chosen for r in o.rules)
    allowed = {r.name for r in cfg.rules}
    final, skipped = _final_options(prepared, merged, rules, cfg, cost_model, max_streams, allowed, deadline)
    placed, placement_report = _backend_options(prepared, merged, rules, [o.graph for o in chosen], boundary, cfg,
                                                cost_model, deadline)
    final = distinct(final + placed)
    final_budget = cfg.final_timing_budget
    if cfg.time_budget is not None:
        final_budget = min(final_budget, FINAL_SHARE * cfg.time_budget / 4)
    best, outcomes = _choose_final(prepared, final, cfg, final_budget, cost_fn)
    graph, schedule, placement = best.option.graph, best.option.schedule, best.option.placement
    keep_dynamic, dynamic_note = _keeps_dynamic(prepared, graph, schedule, cfg)
    if schedule is not None:
        graph = apply_schedule(graph, schedule)
    report = _report(prepared, cfg, profile, parts, t_search, time.perf_counter() - t0, best, outcomes,
                     pieces_detail, skipped, cost_model, dynamic_note)
    report["inputs"] = "given" if inputs is not None else "random"
    report["placement"] = {**placement_report, "chosen": placement.counts(graph) if placement else {"ort": len(graph.nodes)}}
    source = None
    if not isinstance(model, Graph) and not input_shapes and not uses_external_data(prepared.original):
        source = Path(model)
    return OptimizeResult(prepared.original, graph, schedule, report, keep_dynamic, source, placement)
