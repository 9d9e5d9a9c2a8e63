"""One balanced minimum vertex cut of a DAG, as a minimum s-t cut on a flow network.

Notes:
    Each op ``v`` is split into ``v_in -> v_out`` with capacity ``W(v)``. Data edges
    ``u_out -> v_in`` and ``v_out -> v_in`` are infinite, so an op is either before the cut (S),
    after it (T), or *cut* (``v_in`` in S, ``v_out`` in T): every path from S to T passes
    through a cut op. Infinite reverse edges ``v_in -> u_in`` make the earlier side closed under
    predecessors, so the two pieces form a DAG. The source feeds the first ``ceil(f n)`` ops in
    topological order and the last ``ceil(f n)`` feed the sink, so each side keeps at least a
    fraction ``f`` of the ops. The cut value is the summed weight of the cut ops; networkx's
    Boykov-Kolmogorov solver (Boykov & Kolmogorov 2004) finds it.

Example:
    >>> import networkx as nx
    >>> deps = [[], [0], [1], [2]]          # a chain of four ops
    >>> cut = min_vertex_cut(deps, [5.0, 1.0, 7.0, 3.0], [0, 1, 2, 3], balance=0.25)
    >>> cut.value, cut.cut, cut.before, cut.after
    (1.0, (1,), (0, 1), (2, 3))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import networkx as nx
from networkx.algorithms.flow import boykov_kolmogorov

__all__ = ["Cut", "min_vertex_cut"]


@dataclass(frozen=True)
class Cut:
    """``before`` (cut ops included) and ``after``, as op indices; ``value`` = weight of ``cut``."""

    value: float
    cut: tuple[int, ...]
    before: tuple[int, ...]
    after: tuple[int, ...]


def min_vertex_cut(
    deps: Sequence[Sequence[int]],
    weights: Sequence[float],
    ops: Sequence[int],
    balance: float = 0.25,
    cut_fn: Callable = boykov_kolmogorov,
) -> Cut:
    """Cut the ops ``ops`` (a topologically ordered subset) into a DAG-ordered pair of pieces.

    Args:
        deps: for every op of the whole graph, the ops it reads from.
        weights: W of every op of the whole graph.
        ops: the ops to cut, in topological order (at least 2).
        balance: fraction of ``ops`` each side keeps at least (0 < balance <= 0.5).
        cut_fn: a networkx flow function (``boykov_kolmogorov`` by default).
    """
    if len(ops) < 2:
        raise ValueError("need at least two ops to cut")
    if not 0 < balance <= 0.5:
        raise ValueError("balance must be in (0, 0.5]")
    members = set(ops)
    k = max(1, min(math.ceil(balance * len(ops)), len(ops) // 2))
    # Integer labels: 2v = v_in, 2v + 1 = v_out, -1 = source, -2 = sink (string labels hash
    # differently in every process, which could change which of several minimum cuts is found).
    source, sink = -1, -2
    net = nx.DiGraph()
    for v in ops:
        net.add_edge(2 * v, 2 * v + 1, capacity=weights[v])
        net.add_edge(2 * v + 1, 2 * v)
        for u in deps[v]:
            if u in members:
                net.add_edge(2 * u + 1, 2 * v)
                net.add_edge(2 * v, 2 * u)
    for v in ops[:k]:
        net.add_edge(source, 2 * v)
    for v in ops[-k:]:
        net.add_edge(2 * v, sink)
    value, (side_s, _) = nx.minimum_cut(net, source, sink, flow_func=cut_fn)
    cut = tuple(v for v in ops if 2 * v in side_s and 2 * v + 1 not in side_s)
    before = tuple(v for v in ops if 2 * v in side_s)
    after = tuple(v for v in ops if 2 * v not in side_s)
    return Cut(float(value), cut, before, after)
