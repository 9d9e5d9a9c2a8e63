"""The pieces searched in a process pool (forked; each worker reads the work set before the fork)."""

from __future__ import annotations

import dataclasses
import multiprocessing
import signal
import time

from gspo.ir import Graph
from gspo.search.backtrack import Candidate, SearchConfig, search

_WORK: dict = {}  # set before the fork; read-only in the workers


def _search_piece(index: int):
    piece, cost_fn, cfg, per_piece_time = _WORK["pieces"][index], _WORK["cost_fn"], _WORK["cfg"], _WORK["time"]
    if _WORK["deadline"] is not None:  # a piece started late gets what is left of the search's share
        left = max(0.0, _WORK["deadline"] - time.perf_counter())
        per_piece_time = left if per_piece_time is None else min(per_piece_time, left)
    scfg = SearchConfig(cfg.alpha, cfg.budget, per_piece_time, _WORK["max_streams"], cfg.use_rules, cfg.use_streams,
                        cfg.keep, cfg.rules)
    result = search(piece.graph, cost_fn, scfg)
    cands = [(c.graph.nodes, dict(c.graph.weights), dict(c.graph.retired_weights), c.schedule, c.cost, c.applied)
             for c in (result.start, *result.candidates)]
    return index, cands, result.expanded, result.generated, result.seconds, result.invalid_reasons, result.out_of_time


def rebuild(template: Graph, packed) -> Candidate:
    """A candidate from what a search process sent back (nodes and weights on the piece's graph)."""
    nodes, weights, retired, schedule, cost, applied = packed
    g = dataclasses.replace(template, nodes=nodes, weights=weights, retired_weights=retired)
    return Candidate(g, schedule, cost, applied)


def _quiet_worker() -> None:
    """A search process leaves interrupts to the parent (which ends the pool) and dies silently
    when the pool ends it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def search_pieces(pieces, cost_fn, cfg, max_streams, per_piece_time, jobs, progress, deadline: float | None = None):
    """Search every piece (in a process pool when ``jobs`` > 1); results in piece order. Each
    search takes ``per_piece_time`` seconds at most, and ends by ``deadline`` (a
    :func:`time.perf_counter` value; the same clock in the forked workers)."""
    _WORK.update(pieces=pieces, cost_fn=cost_fn, cfg=cfg, max_streams=max_streams, time=per_piece_time,
                 deadline=deadline)
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
