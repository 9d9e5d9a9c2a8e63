"""The pieces searched in a process pool (forked: each worker gets the work before the fork)."""

from __future__ import annotations

import dataclasses
import multiprocessing
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gspo.ir import Graph
from gspo.search.backtrack import Candidate, SearchConfig, search
from gspo.streams import Schedule

__all__ = ["Found", "PieceSearch", "search_pieces"]


@dataclass(frozen=True)
class Found:
    """One graph a search reached, as a search process sends it back: the piece's nodes and
    weights after the rewrites (the rest of the graph is the piece's own), its schedule, its
    estimated cost and the rules applied."""

    nodes: tuple
    weights: dict
    retired_weights: dict
    schedule: Schedule | None
    cost: float
    applied: tuple[str, ...]

    @classmethod
    def of(cls, c: Candidate) -> Found:
        g = c.graph
        return cls(g.nodes, dict(g.weights), dict(g.retired_weights), c.schedule, c.cost, c.applied)

    def candidate(self, piece: Graph) -> Candidate:
        """The candidate on ``piece``'s graph."""
        g = dataclasses.replace(piece, nodes=self.nodes, weights=self.weights, retired_weights=self.retired_weights)
        return Candidate(g, self.schedule, self.cost, self.applied)


@dataclass(frozen=True)
class PieceSearch:
    """What the search of one piece found: the piece as given first, then the candidates for
    verification; the counts of the search and why rewritten graphs were dropped."""

    index: int
    found: tuple[Found, ...]
    expanded: int
    generated: int
    seconds: float
    invalid_reasons: tuple[tuple[str, int], ...]
    out_of_time: bool

    @property
    def unmodified_cost(self) -> float:
        """The estimated cost of the piece as given."""
        return self.found[0].cost

    def candidates(self, piece: Graph) -> list[Candidate]:
        """Every graph found, on ``piece``'s graph (the piece as given first)."""
        return [f.candidate(piece) for f in self.found]


@dataclass(frozen=True)
class _Work:
    """What every search of one call shares."""

    pieces: Sequence
    cost_fn: Callable
    search: SearchConfig
    deadline: float | None  # a time.perf_counter() value (the same clock in the forked workers)


_work: _Work | None = None  # a forked worker's work, set by its initializer


def _remember(work: _Work) -> None:
    """A search process leaves interrupts to the parent (which ends the pool), dies silently
    when the pool ends it, and keeps the work it was forked with."""
    global _work
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _work = work


def _search_piece(index: int, work: _Work | None = None) -> PieceSearch:
    work = work or _work
    scfg = work.search
    if work.deadline is not None:  # a piece started late gets what is left of the search's share
        left = max(0.0, work.deadline - time.perf_counter())
        scfg = dataclasses.replace(scfg, time_budget=left if scfg.time_budget is None else min(scfg.time_budget, left))
    result = search(work.pieces[index].graph, work.cost_fn, scfg)
    return PieceSearch(index, tuple(Found.of(c) for c in (result.start, *result.candidates)), result.expanded,
                       result.generated, result.seconds, result.invalid_reasons, result.out_of_time)


def search_pieces(pieces, cost_fn, cfg, per_piece_time, progress, deadline: float | None = None) -> list[PieceSearch]:
    """Search every piece (in a process pool when ``cfg.jobs`` > 1; streams capped at
    ``cfg.max_streams``: ``cfg`` is resolved, :func:`~gspo.search.optimize.resolved`); results in
    piece order. Each search takes ``per_piece_time`` seconds at most, and ends by ``deadline`` (a
    :func:`time.perf_counter` value; the same clock in the forked workers)."""
    jobs = cfg.jobs
    scfg = SearchConfig(alpha=cfg.alpha, budget=cfg.budget, time_budget=per_piece_time, max_streams=cfg.max_streams,
                        use_rules=cfg.use_rules, use_streams=cfg.use_streams, keep=cfg.keep, rules=cfg.rules)
    work = _Work(pieces, cost_fn, scfg, deadline)
    results: list[PieceSearch | None] = [None] * len(pieces)
    if jobs <= 1 or len(pieces) <= 1:
        for i in range(len(pieces)):
            results[i] = _search_piece(i, work)
            if progress:
                progress(i + 1, len(pieces))
        return results
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(jobs, initializer=_remember, initargs=(work,)) as pool:
        for done, r in enumerate(pool.imap_unordered(_search_piece, range(len(pieces))), 1):
            results[r.index] = r
            if progress:
                progress(done, len(pieces))
    return results
