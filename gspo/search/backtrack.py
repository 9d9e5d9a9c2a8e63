"""Cost-based backtracking search over rewrites and stream assignments (GSPO Algorithm 1).

Gaps in the paper's pseudocode, closed here: the best graph is updated when a cheaper one is
found; the candidate list that collects improving graphs is the one verified on the board;
alpha, the budgets and K are explicit settings. JOCG_P (streams) is applied to every candidate:
a graph costs the cheaper of running on one stream and running on Nimble's streams, as the cost
model estimates, and remembers which. So a rewrite that merges branches the streams would run side
by side is judged against the piece on those streams, not on one stream; and where the estimate
cannot separate a rewrite from the piece as given (within the cost model's error,
:data:`COST_ERROR`), the rewrite is kept to be measured beside it (at most K such near-ties).

Notes:
    Q is a priority queue by estimated cost (ties by insertion order, so the search is
    deterministic). Popping a graph expands it with every match of every rule; a rewritten graph
    seen before (same structural key) is skipped; one within ``alpha`` times the best cost is
    pushed; one cheaper than the best becomes the best and joins the candidate list. The search
    stops on an empty queue, after ``max_expansions`` expansions, or at its deadline. A rewrite
    that does not improve on the best but is estimated within ``1 + cost_error`` times the piece
    as given is a near-tie; the K cheapest near-ties (ties by the order they were found) join the
    candidates after the improving ones, marked ``kind="near"``.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from gspo.ir import Graph, GraphError
from gspo.ir.onnx_io import check_graph
from gspo.rules import Rule, applicable
from gspo.search.candidate import Candidate
from gspo.search.options import SearchOptions
from gspo.streams import Schedule, assign_streams
from gspo.timing import Deadline

__all__ = ["Candidate", "SearchResult", "search", "joint_cost"]

log = logging.getLogger(__name__)

CostFn = Callable[[Graph, "Schedule | None"], float]

#: The cost model's relative error the search allows for when no other is given: a rewrite
#: estimated within ``1 + COST_ERROR`` times the piece as given (on the streams it is estimated
#: cheapest on) cannot be told from it by the estimate, and is measured beside it. The shipped CPU
#: profile errs 9.8-12.3% on chains and 12.2-19.9% (mean 14.0%) on multi-branch pieces against a
#: single run of its held-out set (docs/cost-model.md); a profile does not record its own error.
COST_ERROR = 0.15


@dataclass(frozen=True)
class SearchResult:
    """What one search found: the start, the best, the candidates for verification, and counts."""
    start: Candidate
    best: Candidate
    #: The K best improving graphs, then the K best one-stream ones, then the K best near-ties.
    candidates: tuple[Candidate, ...]
    expanded: int
    generated: int
    seconds: float
    invalid: int = 0
    #: Why rewritten graphs were dropped as invalid: ``"Rule: reason"`` -> count.
    invalid_reasons: tuple[tuple[str, int], ...] = ()
    #: The time budget ended the search (with graphs still to expand).
    out_of_time: bool = False


def _check_rewrite(before: Graph, after: Graph) -> str | None:
    """Why onnx's checker refuses the nodes a rewrite added (``None`` when it accepts them)."""
    old = {n.key for n in before.nodes}
    return check_graph(after, [i for i, n in enumerate(after.nodes) if n.key not in old])


def joint_cost(graph: Graph, cost_fn: CostFn, config: SearchOptions) -> tuple[float, Schedule | None, float]:
    """JOCG_P: the cheaper of one stream and Nimble's streams (at most ``config.max_streams``;
    ``None``: no cap), by the cost model; also the one-stream cost on its own."""
    seq = cost_fn(graph, None)
    if not config.use_streams:
        return seq, None, seq
    schedule = assign_streams(graph, max_streams=config.max_streams)
    if schedule.num_streams <= 1:
        return seq, None, seq
    par = cost_fn(graph, schedule)
    return (par, schedule, seq) if par < seq else (seq, None, seq)


class _OutOfTime(Exception):
    """The search's time budget ran out (raised between two matches)."""


@dataclass
class _State:
    """What one search has found so far."""

    config: SearchOptions
    cost_fn: CostFn
    deadline: Deadline
    validate: bool  # pass every rewritten graph through onnx's checker before it is costed
    best: Candidate
    best_seq: float  # the best one-stream estimate, which can differ from ``best`` when it has streams
    near_below: float = 0.0  # a rewrite estimated at most this (and not improving) is a near-tie
    improving: list[Candidate] = field(default_factory=list)
    improving_seq: list[Candidate] = field(default_factory=list)
    near: list[tuple[float, int, Candidate]] = field(default_factory=list)  # the K cheapest near-ties so far
    queue: list = field(default_factory=list)
    seen: set = field(default_factory=set)
    counter: itertools.count = field(default_factory=itertools.count)
    expanded: int = 0
    generated: int = 0
    invalid: int = 0
    reasons: Counter[str] = field(default_factory=Counter)

    def push(self, cand: Candidate) -> None:
        heapq.heappush(self.queue, (cand.estimate, next(self.counter), cand))

    def keep_near(self, cand: Candidate) -> None:
        """Keep ``cand`` among the K cheapest near-ties (ties: the one found first)."""
        if self.config.keep > 0:
            self.near.append((cand.estimate, next(self.counter), cand))
            self.near = sorted(self.near, key=lambda e: e[:2])[: self.config.keep]

    def drop(self, rule: Rule, why: object, what: str) -> None:
        """Count a rewrite a rule got wrong; it is never costed."""
        log.warning("%s produced %s (%s); skipped", rule.name, what, why)
        self.invalid += 1
        self.reasons[f"{rule.name}: {why}"] += 1


def _rewrite(state: _State, current: Candidate, rule: Rule, match) -> Graph | None:
    """``rule`` applied at ``match``: the new graph, or ``None`` when seen before or invalid."""
    try:
        rewritten = rule.apply(current.graph, match).check()
    except (GraphError, ValueError) as e:  # a rule bug: never let it through
        state.drop(rule, e, "an invalid graph")
        return None
    if rewritten.key in state.seen:
        return None
    state.seen.add(rewritten.key)
    why = _check_rewrite(current.graph, rewritten) if state.validate else None
    if why is not None:
        state.drop(rule, why, "a graph onnx refuses")
        return None
    return rewritten


def _consider(state: _State, current: Candidate, rule: Rule, rewritten: Graph) -> None:
    """Cost a new graph; queue it within alpha of the best, keep it when it improves, or as a
    near-tie when the estimate cannot tell it from the piece as given."""
    state.generated += 1
    c, s, c_seq = joint_cost(rewritten, state.cost_fn, state.config)
    cand = Candidate(rewritten, s, current.rules + (rule.name,), c)
    if c <= state.config.alpha * state.best.estimate:
        state.push(cand)
    if c < state.best.estimate:
        state.best = cand
        state.improving.append(cand)
    elif c <= state.near_below:
        state.keep_near(replace(cand, kind="near"))
    # The best one-stream graphs too: when the parallel estimate is wrong (it errs optimistic on
    # CPU), verification still has the substitutions alone to choose from.
    if s is not None and c_seq < state.best_seq:
        state.best_seq = c_seq
        state.improving_seq.append(Candidate(rewritten, None, cand.rules, c_seq))


def _expand(state: _State, current: Candidate, rules: Sequence[Rule]) -> None:
    """Every match of every rule on ``current``; raises ``_OutOfTime`` between two matches
    (on a large graph one expansion rewrites and costs hundreds of matches)."""
    for rule in applicable(rules, current.graph):
        for match in rule.match(current.graph):
            if state.deadline.expired():
                raise _OutOfTime
            rewritten = _rewrite(state, current, rule, match)
            if rewritten is not None:
                _consider(state, current, rule, rewritten)


def _ranked(state: _State, start: Candidate) -> tuple[Candidate, ...]:
    """The K best improving graphs, then the K best one-stream ones, then the K best near-ties,
    each not already among those before it."""
    config = state.config
    improving = state.improving + ([start] if config.use_streams and not config.use_rules else [])
    ranked = sorted(improving, key=lambda c: c.estimate)[: config.keep]
    keys = {(c.graph.key, c.schedule is None) for c in ranked}
    ranked += [c for c in sorted(state.improving_seq, key=lambda c: c.estimate)[: config.keep]
               if (c.graph.key, True) not in keys]
    keys |= {(c.graph.key, c.schedule is None) for c in ranked}
    ranked += [c for _, _, c in state.near if (c.graph.key, c.schedule is None) not in keys]
    return tuple(ranked)


def search(graph: Graph, cost_fn: CostFn, config: SearchOptions | None = None, rules: Sequence[Rule] | None = None,
           deadline: Deadline | None = None, *, validate: bool = True, cost_error: float = COST_ERROR) -> SearchResult:
    """Search rewrites and stream assignments of ``graph`` for the lowest estimated cost, until
    ``deadline`` (``None``: no deadline).

    Args:
        graph: the piece to search.
        cost_fn: the estimated cost of a graph on a schedule (``None``: one stream).
        config: ``optimize``'s search settings (``None``: the defaults, which cap no streams):
            alpha, ``max_expansions``, the stream cap, the two halves of the joint search, K
            (``keep``) and the rules.
        rules: the rules instead of ``config.rules``.
        deadline: when the search stops (between two matches).
        validate: pass every rewritten graph through onnx's checker with strict shape
            inference before it is costed (a rule's invalid output is dropped and counted).
        cost_error: the cost model's relative error (:data:`COST_ERROR`): up to ``keep``
            rewrites estimated within ``1 + cost_error`` times the piece as given, that do not
            improve on the best, are near-ties, kept to be measured (0: none).
    """
    config = config if config is not None else SearchOptions()
    deadline = deadline if deadline is not None else Deadline(None)
    started = deadline.now()
    rules = tuple(rules if rules is not None else config.rules) if config.use_rules else ()
    cost, schedule, seq = joint_cost(graph, cost_fn, config)
    start = Candidate(graph, schedule, (), cost)
    state = _State(config, cost_fn, deadline, validate, best=start, best_seq=seq, seen={graph.key},
                   near_below=(1 + cost_error) * cost if cost_error > 0 else -math.inf)
    state.push(start)
    out_of_time = False
    try:
        while state.queue and state.expanded < config.max_expansions:
            _, _, current = heapq.heappop(state.queue)
            state.expanded += 1
            _expand(state, current, rules)
    except _OutOfTime:
        out_of_time = True
    return SearchResult(start, state.best, _ranked(state, start), state.expanded, state.generated,
                        deadline.now() - started, state.invalid, tuple(sorted(state.reasons.items())), out_of_time)
