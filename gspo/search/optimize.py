"""``gspo optimize``: partition, search each piece, verify on the board, merge, verify, save.

Never slower, never different: the unmodified piece is always a verified candidate, the merged
model is checked against the original on random inputs (a mismatch is an error naming the
output, and nothing is written), and if the optimized model is not measured faster than the
original, the original is the result.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gspo.costmodel import CostModel, device_description, load_profile
from gspo.errors import GspoError
from gspo.ir import Graph, load, save
from gspo.partition import DEFAULT_THRESHOLD, partition
from gspo.rules import DEFAULT_RULES, Rule, apply_greedily, combine, cse, enlarge, fold, merge, move
from gspo.runtime import CpuExecutor, compare_outputs, interleaved, random_inputs, runtime_version
from gspo.search.backtrack import Candidate, SearchConfig, search
from gspo.streams import Schedule, apply_schedule, assign_streams

__all__ = ["OptimizeConfig", "OptimizeResult", "OptimizeError", "optimize"]

log = logging.getLogger(__name__)

#: The TASO-like greedy variant every piece also gets verified with: folds, CSE, enlargement and
#: merges applied wherever they match (no splits or moves, which only the search explores, except
#: swapping nested Splits, which only ever removes Splits).
GREEDY_RULES = tuple(fold.RULES + cse.RULES + enlarge.RULES + combine.RULES + merge.RULES) + (move.SwapNestedSplits(),)
#: The same over the whole model, batching first: merges across pieces (an unrolled RNN's input
#: projections sit in different pieces, one per step) need the whole graph, and batching them
#: must come before the per-step merges that would use up their MatMuls.
WHOLE_MODEL_RULES = (merge.BatchSharedWeightMatMuls(), *GREEDY_RULES)


#: Shares of ``--time-budget``: the search gets half (spread over the pieces and jobs), the final
#: whole-model comparison and its confirmation keep a fifth, piece verification gets the rest.
#: Measured on NASNet-A Large (24 pieces), where verification and the final comparison of a
#: 500 ms model take longer than the search (benchmarks/RESULTS.md).
SEARCH_SHARE = 0.5
FINAL_SHARE = 0.2
#: The whole model on streams is left unmeasured when estimated slower than on one stream by more
#: than this fraction.
STREAMS_SKIP_MARGIN = 0.25


def _distinct(options):
    """Options without repeats (the greedy variant and a candidate are often the same graph)."""
    seen, out = set(), []
    for label, g, s in options:
        if (g.key, s) not in seen:  # a Schedule is frozen: equal schedules hash alike
            seen.add((g.key, s))
            out.append((label, g, s))
    return out


class OptimizeError(GspoError):
    """The optimized model differs from the original; nothing was written."""


@dataclass(frozen=True)
class OptimizeConfig:
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
    rtol: float = 1e-3
    atol: float = 1e-4
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
    rules: tuple[Rule, ...] = field(default=DEFAULT_RULES, compare=False)

    def validate(self) -> None:
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


@dataclass(frozen=True)
class OptimizeResult:
    original: Graph
    graph: Graph
    schedule: Schedule | None
    report: dict

    @property
    def unchanged(self) -> bool:
        return self.graph.key == self.original.key and self.schedule is None

    def save(self, path: str | os.PathLike, overwrite: bool = False) -> Path:
        return save(self.graph, path, self.schedule.to_json() if self.schedule else None, overwrite)


# ------------------------------------------------------------------- the pool
_WORK: dict = {}  # set before the fork; read-only in the workers


def _search_piece(index: int):
    piece, cost_fn, cfg, per_piece_time = _WORK["pieces"][index], _WORK["cost_fn"], _WORK["cfg"], _WORK["time"]
    scfg = SearchConfig(cfg.alpha, cfg.budget, per_piece_time, _WORK["max_streams"], cfg.use_rules, cfg.use_streams,
                        cfg.keep, cfg.rules)
    result = search(piece.graph, cost_fn, scfg)
    cands = [(c.graph.nodes, dict(c.graph.weights), dict(c.graph.retired_weights), c.schedule, c.cost, c.applied)
             for c in (result.start, *result.candidates)]
    return index, cands, result.expanded, result.generated, result.seconds


def _rebuild(template: Graph, packed) -> Candidate:
    nodes, weights, retired, schedule, cost, applied = packed
    g = dataclasses.replace(template, nodes=nodes, weights=weights, retired_weights=retired)
    return Candidate(g, schedule, cost, applied)


def _run_pool(pieces, cost_fn, cfg, max_streams, per_piece_time, jobs, progress):
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
            with ctx.Pool(jobs) as pool:
                for done, r in enumerate(pool.imap_unordered(_search_piece, range(len(pieces))), 1):
                    results[r[0]] = r
                    if progress:
                        progress(done, len(pieces))
    finally:
        _WORK.clear()
    return results


# ------------------------------------------------------------- verification
def _runner(graph: Graph, schedule: Schedule | None):
    return CpuExecutor(graph, schedule if schedule and schedule.num_streams > 1 else None)


class _Trial:
    """A reference and its options, each built into an executor once: equivalence of every option
    against the reference on random inputs, then any number of interleaved timings of the
    equivalent ones (the confirmation of a final choice reuses the sessions, which on a large
    model take longer to build than to time). An option that is the reference itself (same graph,
    one stream) shares its executor. Use as a context manager: it closes the executors."""

    def __init__(self, reference: Graph, options: list[tuple[str, Graph, Schedule | None]], cfg: OptimizeConfig):
        self.cfg = cfg
        self.feeds = random_inputs(reference, cfg.seed)
        self.executors = []
        self.rejected: list[tuple] = []
        self.timed: list[tuple] = []
        try:
            ref_ex = _runner(reference, None)
            self.executors.append(ref_ex)
            expected = ref_ex.run(self.feeds)
            for label, g, s in options:
                if s is None and g.key == reference.key:
                    self.timed.append((label, g, s, ref_ex))
                    continue
                ex = _runner(g, s)
                self.executors.append(ex)
                res = compare_outputs(expected, ex.run(self.feeds), cfg.rtol, cfg.atol)
                if res.equivalent:
                    self.timed.append((label, g, s, ex))
                else:
                    self.rejected.append(
                        (label, g, s, None, f"output {res.worst.name} differs (max abs error {res.worst.max_abs:.3g})"))
        except BaseException:
            self.close()
            raise

    def time(self, budget: float | None = None, labels: tuple[str, ...] | None = None):
        """Rows ``(label, graph, schedule, median_s or None, error or None)``: the rejected options,
        then the equivalent ones (those in ``labels``, when given) timed interleaved."""
        timed = [t for t in self.timed if labels is None or t[0] in labels]
        runs = self.cfg.timing_runs
        if budget is not None and timed:
            start = time.perf_counter()
            for *_, ex in timed:
                ex.run(self.feeds)
            one_round = time.perf_counter() - start
            runs = max(5, min(runs, int(budget / max(one_round, 1e-6))))
        timings = interleaved([(lbl, (lambda ex=ex: ex.run(self.feeds))) for lbl, _, _, ex in timed], runs, 3)
        return self.rejected + [(lbl, g, s, t.median, None) for (lbl, g, s, _), t in zip(timed, timings)]

    def close(self) -> None:
        for ex in self.executors:
            ex.close()
        self.executors = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _verify_and_time(reference: Graph, options: list[tuple[str, Graph, Schedule | None]], cfg: OptimizeConfig,
                     budget: float | None = None):
    """Equivalence of each option against ``reference``, then one interleaved timing of the
    equivalent ones (see :class:`_Trial`)."""
    with _Trial(reference, options, cfg) as trial:
        return trial.time(budget)


def _pick(rows, baseline_label: str, cfg: OptimizeConfig, estimate: Callable, margin: float | None = None):
    """The best equivalent option: by measured median (it must beat the baseline by ``margin``,
    ``cfg.margin`` unless given), or by estimated cost when ``cfg.select == "estimated"``."""
    margin = cfg.margin if margin is None else margin
    ok = [r for r in rows if r[3] is not None]
    base = next(r for r in ok if r[0] == baseline_label)
    if cfg.select == "estimated":
        return min(ok, key=lambda r: (estimate(r[1], r[2]), r[0] != baseline_label))
    best = min(ok, key=lambda r: r[3])
    return best if best[3] < base[3] * (1 - margin) else base


# ----------------------------------------------------------------- optimize
def optimize(model: str | os.PathLike | Graph, progress: Callable[[str, int, int], None] | None = None, **options) -> OptimizeResult:
    """Optimize a model (a path or a :class:`~gspo.ir.Graph`); options are :class:`OptimizeConfig` fields.

    Returns:
        :class:`OptimizeResult` with the optimized graph, its schedule (``None``: one stream)
        and a report (the same as ``gspo optimize --report``).

    Raises:
        OptimizeError: the optimized model's outputs differ from the original's.
        GspoError: bad input (model, profile, options).
    """
    cfg = OptimizeConfig(**options)
    cfg.validate()
    t0 = time.perf_counter()
    original = model if isinstance(model, Graph) else load(model)
    runtime = runtime_version()
    device = device_description("cpu")
    explicit = cfg.profile is not None
    profile = load_profile(cfg.profile or "cpu", device, runtime, force=cfg.force_profile or not explicit)
    cost_model = CostModel(profile)
    cores = os.cpu_count() or 1
    max_streams = cfg.max_streams or cores
    jobs = cfg.jobs or cores
    parts = partition(original, cfg.threshold, rules=cfg.rules)
    pieces = parts.pieces
    deadline = None if cfg.time_budget is None else t0 + cfg.time_budget
    search_time = None
    if cfg.time_budget is not None:
        search_time = SEARCH_SHARE * cfg.time_budget * max(1, jobs) / max(1, len(pieces))

    def cost_fn(g, s):
        return cost_model.cost(g, s)

    show = (lambda d, t: progress("search", d, t)) if progress else None
    searched = _run_pool(pieces, cost_fn, cfg, max_streams, search_time, jobs, show)
    t_search = time.perf_counter() - t0

    allowed = {r.name for r in cfg.rules}
    chosen_graphs, piece_reports, applied = [], [], Counter()
    greedy_counts: dict[str, int] = {}
    caught = 0
    final_budget = cfg.final_timing_budget
    if cfg.time_budget is not None:
        final_budget = min(final_budget, FINAL_SHARE * cfg.time_budget / 4)
    seconds_per_option = 0.3  # first guess at building, checking and timing one option; then measured
    for k, (piece, (_, packed, expanded, generated, seconds)) in enumerate(zip(pieces, searched)):
        cands = [_rebuild(piece.graph, p) for p in packed]
        start, improving = cands[0], cands[1:]
        options = [("unmodified", piece.graph, None)]
        if cfg.use_rules:
            greedy, counts = apply_greedily(piece.graph, [r for r in GREEDY_RULES if r.name in allowed])
            if greedy.key != piece.graph.key:
                options.append(("greedy", greedy, None))
                greedy_counts = counts
        for i, c in enumerate(improving):
            options.append((f"candidate{i}", c.graph, c.schedule))
        for i, c in enumerate(improving):
            if c.schedule is not None:  # the substitutions alone, in case the streams do not pay
                options.append((f"candidate{i}-1stream", c.graph, None))
        if cfg.use_streams:
            s = assign_streams(piece.graph, max_streams=max_streams)
            if s.num_streams > 1:
                options.append(("unmodified+streams", piece.graph, s))
        options = _distinct(options)
        timing_budget = cfg.piece_timing_budget
        if deadline is not None:
            # Anytime: share what is left (less the final comparison's reserve) among the pieces
            # still to verify; drop the least promising options when it cannot hold them all.
            share = (deadline - time.perf_counter() - FINAL_SHARE * cfg.time_budget) / (len(pieces) - k)
            timing_budget = min(timing_budget, max(0.0, share) / 2)
            options = options[:max(1, int(share / seconds_per_option))]
        chosen = options[0]
        rows = []
        if len(options) > 1:
            began = time.perf_counter()
            rows = _verify_and_time(piece.graph, options, cfg, timing_budget)
            seconds_per_option = max(0.05, (time.perf_counter() - began - timing_budget) / len(options))
            caught += sum(1 for r in rows if r[4] is not None)
            chosen = _pick(rows, "unmodified", cfg, cost_fn)[:3]
        label = chosen[0]
        cand = next((c for i, c in enumerate(improving) if label.split("-")[0] == f"candidate{i}"), None)
        if cand is not None:
            applied.update(cand.applied)
        if label == "greedy":
            applied.update(greedy_counts)
        chosen_graphs.append(chosen[1])
        piece_reports.append({
            "piece": k, "ops": piece.size, "expanded": expanded, "generated": generated, "search_s": seconds,
            "estimated_unmodified_s": start.cost, "chosen": label,
            "candidates": [{"label": r[0], "measured_s": r[3], "rejected": r[4],
                            "estimated_s": next((c.cost for i, c in enumerate(improving) if r[0] == f"candidate{i}"), None),
                            "rules": list(next((c.applied for i, c in enumerate(improving)
                                                if r[0].split("-")[0] == f"candidate{i}"), ()))}
                           for r in rows],
        })
        if progress:
            progress("verify", k + 1, len(pieces))

    merged = parts.merge(chosen_graphs)
    final_options = [("optimized", merged, None)]
    streams_skipped = None
    if cfg.use_streams:
        s = assign_streams(merged, max_streams=max_streams)
        if s.num_streams > 1:
            # Measured only when the cost model does not call it clearly slower: a whole large
            # model on streams costs seconds to build and time (NASNet-A Large: ~0.8 s a run
            # against ~0.53 s on one stream), and "clearly" is beyond the parallel model's mean
            # error (about 20%, data/profiles/cpu.evaluation.json).
            est_streams, est_one = cost_model.cost(merged, s), cost_model.cost(merged)
            if est_streams <= est_one * (1 + STREAMS_SKIP_MARGIN):
                final_options.append(("optimized+streams", merged, s))
            else:
                streams_skipped = {"estimated_ms": est_streams * 1e3, "estimated_one_stream_ms": est_one * 1e3}
    if merged.key != original.key:
        final_options.insert(0, ("original", original, None))
    else:
        final_options[0] = ("original", original, None)
    whole_counts: dict[str, int] = {}
    batching = WHOLE_MODEL_RULES[0]
    # Only when something can be batched across pieces: elsewhere the pieces' greedy variants
    # already cover it, and greedy rewriting of a whole large model costs tens of seconds.
    if cfg.use_rules and batching.name in allowed and next(iter(batching.match(original)), None) is not None:
        whole, whole_counts = apply_greedily(original, [r for r in WHOLE_MODEL_RULES if r.name in allowed])
        if whole.key not in (original.key, merged.key):
            final_options.append(("greedy-whole-model", whole, None))
    with _Trial(original, final_options, cfg) as trial:
        if trial.rejected:
            raise OptimizeError(f"the optimized model differs from the original: {trial.rejected[0][4]}; nothing written")
        rows = trial.time(final_budget)
        best = _pick(rows, "original", cfg, cost_fn, cfg.final_margin)
        if best[0] != "original" and cfg.select == "measured":
            # Confirm against the original in a second timing of the same sessions: this
            # machine's speed drifts, and one lucky set of runs must not replace the input with
            # something slower.
            confirm = trial.time(final_budget, labels=("original", best[0]))
            if _pick(confirm, "original", cfg, cost_fn, cfg.final_margin)[0] == "original":
                best = next(r for r in rows if r[0] == "original")
    measured = {r[0]: r[3] for r in rows}
    if best[0] == "greedy-whole-model":  # its substitutions, not the pieces' search results
        applied = Counter(whole_counts)
    result_graph, schedule = best[1], best[2]
    if schedule is not None:
        result_graph = apply_schedule(result_graph, schedule)
    t_total = time.perf_counter() - t0
    before, after = measured["original"], measured[best[0]]
    report = {
        "model": original.name,
        "device": profile.device,
        "profile": cfg.profile or "cpu",
        "pieces": len(pieces),
        "threshold": cfg.threshold,
        "cut_weight": parts.cut_weight,
        "search_seconds": t_search,
        "total_seconds": t_total,
        "latency_before_ms": before * 1e3,
        "latency_after_ms": after * 1e3,
        "speedup": before / after,
        "estimated_before_ms": cost_model.cost(original) * 1e3,
        "estimated_after_ms": cost_model.cost(best[1], best[2]) * 1e3,
        "chosen": best[0],
        "select": cfg.select,
        "unchanged": best[0] == "original",
        "substitutions": dict(sorted(applied.items())) if best[0] != "original" else {},
        "streams": schedule.num_streams if schedule else 1,
        "syncs": len(schedule.events) if schedule else 0,
        "candidates_rejected_by_verification": caught,
        "final_candidates": [{"label": r[0], "measured_ms": r[3] * 1e3} for r in rows],
        "final_streams_skipped": streams_skipped,
        "pieces_detail": piece_reports,
        "config": {k: v for k, v in dataclasses.asdict(cfg).items() if k != "rules"},
    }
    return OptimizeResult(original, result_graph, schedule, report)
