"""Rewrites judged with the schedule they leave, per piece (gspo/search/backtrack.py, pieces.py):
a rewrite that merges branches must beat the piece on the streams that run those branches side by
side, which is measured right after the piece as given; and a rewrite the cost model cannot tell
from the piece as given (within its error) is measured, not decided by the estimate, at most K
of them. Estimates and timings are scripted."""

from __future__ import annotations

import numpy as np

from gspo.ir.builder import GraphBuilder
from gspo.partition import partition
from gspo.rules.merge import MergeParallelMatMuls
from gspo.search import SearchOptions, search
from gspo.search.backtrack import COST_ERROR
from gspo.search.budget import RunLog, Timebox
from gspo.search.config import OptimizeConfig
from gspo.search.device import CpuDevice
from gspo.search.driver import resolved
from gspo.search.pieces import Boundary, _optimize_pieces
from gspo.search.pool import search_pieces
from gspo.search.strategies import Strategies
from tests.search.fakes import FakeClock, ScriptedTimings

#: The piece as given, estimated on one stream and on Nimble's streams (cheaper: the search judges
#: every rewrite against the piece on streams).
ONE_STREAM, ON_STREAMS = 1.0, 0.8


class MergePairs(MergeParallelMatMuls):
    """MergeParallelMatMuls under a name of its own: the search's rule here, and no greedy
    variant's (so each option of a piece is a search result or the piece as given)."""


def pairs_graph(pairs: int):
    """``pairs`` independent pairs of MatMuls, each pair reading one input (two branches that
    MergeParallelMatMuls merges into one MatMul and a Split)."""
    b = GraphBuilder("pairs", seed=0)
    outs = []
    for i in range(pairs):
        x = b.input(f"x{i}", (1, 8))
        left = b.op("Relu", [b.op("MatMul", [x, b.weight(f"a{i}", (8, 8))])])
        right = b.op("Relu", [b.op("MatMul", [x, b.weight(f"c{i}", (8, 8))])])
        outs.append(b.op("Add", [left, right]))
    return b.output(*outs).build()


def merged_pairs(graph) -> frozenset[int]:
    """The pairs of :func:`pairs_graph` merged in ``graph`` (one MatMul reads their input)."""
    readers = [n.inputs[0] for n in graph.nodes if n.op_type == "MatMul"]
    return frozenset(int(x[1:]) for x in set(readers) if readers.count(x) == 1)


class ScriptedCost:
    """Estimates by which pairs are merged: the piece as given :data:`ONE_STREAM` on one stream
    and :data:`ON_STREAMS` on streams; a rewrite ``rewrites[merged pairs]`` on one stream (10x on
    streams: merged, it is estimated cheapest on one)."""

    def __init__(self, rewrites: dict[frozenset[int], float]):
        self.rewrites = rewrites

    def cost(self, graph, schedule=None):
        merged = merged_pairs(graph)
        streams = schedule is not None and schedule.num_streams > 1
        if not merged:
            return ON_STREAMS if streams else ONE_STREAM
        return self.rewrites[merged] * (10.0 if streams else 1.0)


def _pieces(pairs: int, rewrites, script, seconds: float | None = None, keep: int = 3):
    """The one piece of :func:`pairs_graph` searched with :class:`ScriptedCost`, its options
    verified and timed with ``script`` (every option not named: 0.9 s a round, slower than the
    piece on streams at 0.8 s, faster than the piece as given at 1.0 s) in a time budget of
    ``seconds``: the choice, the labels timed, and the work the budget skipped."""
    g = pairs_graph(pairs)
    cfg = resolved(OptimizeConfig.of(jobs=1, rules=(MergePairs(),), keep=keep, max_streams=2,
                                     timing_runs=5))
    cost, clock, log = ScriptedCost(rewrites), FakeClock(), []
    parts = partition(g, 64, rules=cfg.search.rules)
    assert len(parts.pieces) == 1
    searched = search_pieces(parts.pieces, cost.cost, cfg, None, None)
    timings = ScriptedTimings({"unmodified": (ONE_STREAM,) * 30, "unmodified+streams": (ON_STREAMS,) * 30, **script},
                              piece_s=0.9)
    tools = Strategies(cost_model=cost, measure=timings, clock=clock, device=CpuDevice())
    rng = np.random.default_rng(0)
    boundary = Boundary([{v.name: rng.standard_normal(v.shape).astype(np.float32) for v in g.inputs}])
    chosen, _ = _optimize_pieces(parts, searched, boundary, cfg, tools, Timebox.of(seconds, clock=clock, run=RunLog(log)), None)
    assert len(timings.pieces) == 1  # one timing of the piece's options
    return chosen[0], timings.pieces[0], [s.what for s in log]


def test_a_merge_rated_better_than_the_piece_on_streams_but_measured_slower_loses_to_it():
    """The merge of both pairs is rated 5% better than the piece on streams and measures 0.9 s
    against its 0.8 s. The time budget holds three of the piece's five options: the piece on
    streams is among them (right after the piece as given), the merge too, and the piece on
    streams is chosen; the options dropped are the least promising, and the budget says so."""
    rewrites = {frozenset({0}): 0.78, frozenset({1}): 0.79, frozenset({0, 1}): 0.95 * ON_STREAMS}
    chosen, timed, skipped = _pieces(2, rewrites, {}, seconds=1.0)
    assert timed == ("unmodified", "unmodified+streams", "candidate0")
    assert chosen.label == "unmodified+streams" and chosen.schedule is not None and chosen.rules == ()
    assert skipped == ["verifying 2 of the pieces' options"]
    # with the time for every option, the merge and the rest are measured, and still lose
    chosen, timed, skipped = _pieces(2, rewrites, {}, seconds=None)
    assert timed == ("unmodified", "unmodified+streams", "candidate0", "candidate1", "near0")
    assert chosen.label == "unmodified+streams" and skipped == []


def test_a_rewrite_rated_within_the_error_of_the_piece_on_streams_is_measured_and_wins_when_faster():
    """The only rewrite is rated 5% worse than the piece on streams and measures twice as fast:
    within the cost model's error, it is measured (``near0``) and chosen. Rated beyond the error,
    the search drops it unmeasured, as before."""
    chosen, timed, _ = _pieces(1, {frozenset({0}): 1.05 * ON_STREAMS}, {"near0": (0.5,) * 30})
    assert timed == ("unmodified", "unmodified+streams", "near0")
    assert chosen.label == "near0" and chosen.rules == ("MergePairs",) and chosen.schedule is None
    chosen, timed, _ = _pieces(1, {frozenset({0}): (1 + COST_ERROR + 0.05) * ON_STREAMS}, {"near0": (0.5,) * 30})
    assert timed == ("unmodified", "unmodified+streams") and chosen.label == "unmodified+streams"


def _subsets(n: int):
    """Every non-empty subset of ``range(n)``, ranked: rated within the error of the piece on
    streams, none better than it, the cheapest the first in this order."""
    subsets = [frozenset(i for i in range(n) if k >> i & 1) for k in range(1, 2 ** n)]
    return {s: ON_STREAMS * (1.01 + 0.01 * rank) for rank, s in enumerate(subsets)}


def test_the_near_ties_measured_per_piece_are_the_k_cheapest():
    """Three pairs make seven rewrites, all within the error of the piece on streams and none
    better: the search keeps the K cheapest, and they alone are measured with the piece."""
    rewrites = _subsets(3)
    cheapest = sorted(rewrites, key=rewrites.get)
    result = search(pairs_graph(3), ScriptedCost(rewrites).cost,
                    SearchOptions(rules=(MergePairs(),), keep=2, max_streams=2))
    assert result.generated >= 4 and result.best is result.start
    assert [merged_pairs(c.graph) for c in result.candidates] == cheapest[:2]
    assert all(c.kind == "near" for c in result.candidates)
    chosen, timed, _ = _pieces(3, rewrites, {}, keep=2)
    assert timed == ("unmodified", "unmodified+streams", "near0", "near1") and chosen.label == "unmodified+streams"
    no_error = search(pairs_graph(3), ScriptedCost(rewrites).cost,
                      SearchOptions(rules=(MergePairs(),), keep=2, max_streams=2), cost_error=0.0)
    assert no_error.candidates == ()
