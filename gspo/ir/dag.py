"""DAG measures of a graph: dependency edges, depth, and maximum antichain width.

Notes:
    The width (the largest set of ops no two of which depend on each other) is the maximum
    logical concurrency Nimble's stream assignment preserves. By Dilworth's theorem it equals
    ``n - M``, where ``M`` is a maximum matching of the bipartite graph with an edge
    ``u_out -> v_in`` whenever ``v`` is reachable from ``u`` (Fulkerson 1956). Reachability is
    kept as Python-int bitsets; the matching is networkx's Hopcroft-Karp, ``O(E sqrt(V))``.

Example:
    >>> from gspo.ir.builder import GraphBuilder
    >>> b = GraphBuilder()
    >>> x = b.input("x", (1, 4))
    >>> y = b.op("Add", [b.op("Relu", [x]), b.op("Sigmoid", [x])])
    >>> g = b.output(y).build()
    >>> depth(g), max_antichain_width(g)
    (2, 2)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import networkx as nx

from gspo.ir.graph import Graph, Node

__all__ = ["dependencies", "reachability", "depth", "max_antichain_width"]


def dependencies(graph: Graph) -> list[list[int]]:
    """For each node (by index in ``graph.nodes``), the indices of the nodes it reads from."""
    index = {}
    for i, n in enumerate(graph.nodes):
        for v in n.outputs:
            if v.name:
                index[v.name] = i
    return [sorted({index[x] for x in n.reads() if x in index}) for n in graph.nodes]


def reachability(graph: Graph) -> list[int]:
    """``reach[i]`` is a bitset of every node that (transitively) depends on node ``i``."""
    deps = dependencies(graph)
    users: list[list[int]] = [[] for _ in deps]
    for i, ds in enumerate(deps):
        for d in ds:
            users[d].append(i)
    reach = [0] * len(deps)
    for i in reversed(range(len(deps))):
        bits = 0
        for u in users[i]:
            bits |= (1 << u) | reach[u]
        reach[i] = bits
    return reach


def depth(graph: Graph, counts: Callable[[Node], bool] = lambda n: True) -> int:
    """Number of counted nodes on the longest dependency path."""
    deps = dependencies(graph)
    level = [0] * len(deps)
    for i, n in enumerate(graph.nodes):
        level[i] = max((level[d] for d in deps[i]), default=0) + (1 if counts(n) else 0)
    return max(level, default=0)


def max_antichain_width(graph: Graph, counts: Callable[[Node], bool] = lambda n: True) -> int:
    """Largest number of counted nodes no two of which depend on each other."""
    reach = reachability(graph)
    chosen: Sequence[int] = [i for i, n in enumerate(graph.nodes) if counts(n)]
    if not chosen:
        return 0
    mask = 0
    for i in chosen:
        mask |= 1 << i
    n = len(graph.nodes)
    bip = nx.Graph()
    left = list(chosen)
    bip.add_nodes_from(left)
    bip.add_nodes_from(n + i for i in chosen)
    for i in chosen:
        bits = reach[i] & mask
        while bits:
            low = bits & -bits
            bip.add_edge(i, n + low.bit_length() - 1)
            bits ^= low
    matching = nx.bipartite.hopcroft_karp_matching(bip, top_nodes=left)
    return len(chosen) - len(matching) // 2
