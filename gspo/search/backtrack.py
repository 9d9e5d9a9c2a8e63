"""Cost-based backtracking search over rewrites and stream assignments (GSPO Algorithm 1).

Gaps in the paper's pseudocode, closed here: the best graph is updated when a cheaper one is
found; the candidate list that collects improving graphs is the one verified on the board;
alpha, the budgets and K are explicit settings. JOCG_P (streams) is applied to every candidate:
a graph costs the cheaper of running on one stream and running on Nimble's streams, as the cost
model estimates, and remembers which.

Notes:
    Q is a priority queue by estimated cost (ties by insertion order, so the search is
    deterministic). Popping a graph expands it with every match of every rule; a rewritten graph
    seen before (same structural key) is skipped; one within ``alpha`` times the best cost is
    pushed; one cheaper than the best becomes the best and joins the candidate list. The search
    stops on an empty queue, after ``budget`` expansions, or after ``time_budget`` seconds.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gspo.ir import Graph, GraphError
from gspo.ir.onnx_io import check_graph
from gspo.rules import DEFAULT_RULES, Rule, applicable
from gspo.streams import Schedule, assign_streams

__all__ = ["SearchConfig", "Candidate", "SearchResult", "search", "joint_cost"]

log = logging.getLogger(__name__)

CostFn = Callable[[Graph, "Schedule | None"], float]


@dataclass(frozen=True)
class SearchConfig:
    """Settings of one search (the CLI builds this).

    Attributes:
        alpha: keep exploring graphs up to ``alpha`` x the best cost (>= 1).
        budget: most graphs expanded per piece.
        time_budget: most seconds per piece (``None``: no limit).
        max_streams: stream cap for JOCG_P (``None``: no cap).
        use_rules / use_streams: the two halves of the joint search (ablations).
        keep: K, how many of the best candidates go to on-board verification.
        validate: pass every rewritten graph through onnx's checker with strict shape
            inference before it is costed (a rule's invalid output is dropped and counted).
    """

    alpha: float = 1.05
    budget: int = 40
    time_budget: float | None = None
    max_streams: int | None = 2
    use_rules: bool = True
    use_streams: bool = True
    keep: int = 3
    rules: tuple[Rule, ...] = field(default=DEFAULT_RULES, compare=False)
    validate: bool = True


@dataclass(frozen=True)
class Candidate:
    graph: Graph
    schedule: Schedule | None  # None: one stream
    cost: float
    applied: tuple[str, ...]  # rule names, in order


@dataclass(frozen=True)
class SearchResult:
    start: Candidate
    best: Candidate
    candidates: tuple[Candidate, ...]  # the K best improving graphs, then the K best one-stream ones
    expanded: int
    generated: int
    seconds: float
    invalid: int = 0
    #: Why rewritten graphs were dropped as invalid: ``"Rule: reason"`` -> count.
    invalid_reasons: tuple[tuple[str, int], ...] = ()


def _check_rewrite(before: Graph, after: Graph) -> str | None:
    """Why onnx's checker refuses the nodes a rewrite added (``None`` when it accepts them)."""
    old = {n.key for n in before.nodes}
    return check_graph(after, [i for i, n in enumerate(after.nodes) if n.key not in old])


def joint_cost(graph: Graph, cost_fn: CostFn, config: SearchConfig) -> tuple[float, Schedule | None, float]:
    """JOCG_P: the cheaper of one stream and Nimble's streams, by the cost model; also the
    one-stream cost on its own."""
    seq = cost_fn(graph, None)
    if not config.use_streams:
        return seq, None, seq
    schedule = assign_streams(graph, max_streams=config.max_streams)
    if schedule.num_streams <= 1:
        return seq, None, seq
    par = cost_fn(graph, schedule)
    return (par, schedule, seq) if par < seq else (seq, None, seq)


def search(graph: Graph, cost_fn: CostFn, config: SearchConfig = SearchConfig(), rules: Sequence[Rule] | None = None) -> SearchResult:
    """Search rewrites and stream assignments of ``graph`` for the lowest estimated cost."""
    started = time.perf_counter()
    rules = tuple(rules if rules is not None else config.rules) if config.use_rules else ()
    cost, schedule, seq = joint_cost(graph, cost_fn, config)
    start = Candidate(graph, schedule, cost, ())
    best = start
    improving: list[Candidate] = []
    # The best one-stream graphs too: when the parallel estimate is wrong (it errs optimistic on
    # CPU), verification still has the substitutions alone to choose from.
    best_seq = seq
    improving_seq: list[Candidate] = []
    seen = {graph.key}
    counter = itertools.count()
    queue: list = [(cost, next(counter), start)]
    expanded = generated = invalid = 0
    reasons: Counter[str] = Counter()
    deadline = None if config.time_budget is None else started + config.time_budget
    out_of_time = False
    while queue and expanded < config.budget and not out_of_time:
        _, _, current = heapq.heappop(queue)
        expanded += 1
        for rule in applicable(rules, current.graph):
            if out_of_time:
                break
            for match in rule.match(current.graph):
                # Anytime, also inside one expansion: on a large graph one expansion rewrites
                # and costs hundreds of matches (a minute on an unpartitioned model).
                if deadline is not None and time.perf_counter() > deadline:
                    out_of_time = True
                    break
                try:
                    rewritten = rule.apply(current.graph, match).check()
                except (GraphError, ValueError) as e:  # a rule bug: never let it through
                    log.warning("%s produced an invalid graph (%s); skipped", rule.name, e)
                    invalid += 1
                    reasons[f"{rule.name}: {e}"] += 1
                    continue
                if rewritten.key in seen:
                    continue
                seen.add(rewritten.key)
                why = _check_rewrite(current.graph, rewritten) if config.validate else None
                if why is not None:
                    log.warning("%s produced a graph onnx refuses (%s); skipped", rule.name, why)
                    invalid += 1
                    reasons[f"{rule.name}: {why}"] += 1
                    continue
                generated += 1
                c, s, c_seq = joint_cost(rewritten, cost_fn, config)
                applied = current.applied + (rule.name,)
                cand = Candidate(rewritten, s, c, applied)
                if c <= config.alpha * best.cost:
                    heapq.heappush(queue, (c, next(counter), cand))
                if c < best.cost:
                    best = cand
                    improving.append(cand)
                if s is not None and c_seq < best_seq:
                    best_seq = c_seq
                    improving_seq.append(Candidate(rewritten, None, c_seq, applied))
    if config.use_streams and not config.use_rules:
        improving.append(start)
    ranked = sorted(improving, key=lambda c: c.cost)[: config.keep]
    keys = {(c.graph.key, c.schedule is None) for c in ranked}
    ranked += [c for c in sorted(improving_seq, key=lambda c: c.cost)[: config.keep] if (c.graph.key, True) not in keys]
    return SearchResult(start, best, tuple(ranked), expanded, generated, time.perf_counter() - started, invalid,
                        tuple(sorted(reasons.items())))
