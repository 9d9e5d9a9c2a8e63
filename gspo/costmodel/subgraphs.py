"""Subgraphs cut from the zoo models: the held-out evaluation set, and a disjoint calibration set.

Every full zoo model is partitioned at thresholds 8, 16, 32 and 64; a piece is *sequential*
when its stream assignment has width 1 and *parallel* otherwise. The evaluation takes ``count``
pieces spread over the models (:func:`held_out_subgraphs`). Calibration may use other pieces
of the same models (:func:`calibration_pieces`): never one picked for evaluation, and never one
with the same structure as any picked one (NASNet repeats its cells, so the same piece occurs
under different names), so the held-out set stays unseen by the fit.
"""

from __future__ import annotations

from functools import lru_cache

from gspo.ir import Graph
from gspo.partition import partition
from gspo.streams import assign_streams
from gspo.zoo import MODELS, build

__all__ = ["THRESHOLDS", "held_out_subgraphs", "calibration_pieces", "zoo_piece", "shape_signature"]

THRESHOLDS = (8, 16, 32, 64)


@lru_cache(maxsize=1)
def _pools(size: str) -> tuple[dict[str, list[tuple[str, Graph]]], dict[str, list[tuple[str, Graph]]]]:
    """Per model, ``(label, graph)`` of every usable piece: (sequential pools, parallel pools)."""
    seq: dict[str, list] = {}
    par: dict[str, list] = {}
    for name in MODELS:
        g = build(name, size)
        for t in THRESHOLDS:
            for k, piece in enumerate(partition(g, t).pieces):
                pg = piece.graph
                if not pg.outputs or len(pg.nodes) < 2:
                    continue
                pools = par if assign_streams(pg).num_streams >= 2 else seq
                pools.setdefault(name, []).append((f"{name}/T{t}/piece{k}", pg))
    return seq, par


def _round_robin(pools: dict[str, list], count: int) -> list:
    """Take the middle piece of each model's remaining pool in turn until ``count`` are taken."""
    pools_left = [list(v) for v in pools.values() if v]
    chosen, i = [], 0
    while len(chosen) < count and pools_left:
        pool = pools_left[i % len(pools_left)]
        chosen.append(pool.pop(len(pool) // 2))
        i += 1
        pools_left = [p for p in pools_left if p]
    return chosen


def held_out_subgraphs(count: int = 100, parallel: bool = False, size: str = "full") -> list[tuple[str, Graph]]:
    """``(label, graph)`` pieces of the zoo models, spread over models and thresholds."""
    return _round_robin(_pools(size)[int(parallel)], count)


def shape_signature(graph: Graph) -> tuple:
    """The structure of ``graph`` without its names: op, attributes and input/output shapes per node."""
    values = graph.values
    return tuple(
        (n.op_type, n.domain, tuple((a.name, repr(a.value)) for a in n.attrs),
         tuple(values[i].shape if i in values else None for i in n.inputs),
         tuple(v.shape for v in n.outputs))
        for n in graph.nodes
    )


#: How many held-out pieces of each kind the calibration set must avoid (the evaluation's default).
HELD_OUT = 100


def calibration_pieces(count: int, parallel: bool, size: str = "full") -> list[tuple[str, Graph]]:
    """``count`` pieces for fitting, disjoint (by label and by structure) from the held-out set
    of ``HELD_OUT`` pieces of either kind."""
    held = [piece for kind in (False, True) for piece in held_out_subgraphs(HELD_OUT, kind, size)]
    held_labels = {lbl for lbl, _ in held}
    forbidden = {shape_signature(g) for _, g in held}
    pools: dict[str, list] = {}
    seen: set = set()
    for name, pieces in _pools(size)[int(parallel)].items():
        for lbl, g in pieces:
            sig = shape_signature(g)
            if lbl in held_labels or sig in forbidden or sig in seen:
                continue
            seen.add(sig)
            pools.setdefault(name, []).append((lbl, g))
    return _round_robin(pools, count)


def zoo_piece(label: str, size: str = "full") -> Graph:
    """The piece called ``label`` (``model/T<t>/piece<k>``)."""
    name = label.split("/", 1)[0]
    for pools in _pools(size):
        for lbl, g in pools.get(name, ()):
            if lbl == label:
                return g
    raise KeyError(label)
