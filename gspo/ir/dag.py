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

from collections.abc import Callable

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
    """Largest number of counted nodes no two of which depend on each other.

    By Dilworth's theorem, the fewest dependency paths that together pass through every counted
    node. Computed as a minimum flow on the DAG itself (each counted node must carry at least one
    unit; paths may start and end anywhere), without the transitive closure: a greedy cover, then
    augmenting paths from the sink to the source that merge or shorten paths. Linear in the
    graph's size per augmentation; chains and wide layers need none.
    """
    deps = dependencies(graph)
    lower = [1 if counts(n) else 0 for n in graph.nodes]
    if not any(lower):
        return 0
    flow = _greedy_cover(deps, lower)
    users: list[list[int]] = [[] for _ in deps]
    for i, ds in enumerate(deps):
        for d in ds:
            users[d].append(i)
    while _reduce_once(deps, users, lower, flow):
        pass
    return sum(flow["start"])


#: Ancestors the greedy cover looks through for a path to extend, per node (bounds its cost).
GREEDY_SEARCH = 64


def _greedy_cover(deps: list[list[int]], lower: list[int]) -> dict:
    """Paths covering every counted node: each extends a path ending at a near ancestor, or starts."""
    n = len(deps)
    flow = {"start": [0] * n, "end": [0] * n, "node": [0] * n, "edge": {}}
    for v in range(n):  # graph order is topological
        if not lower[v]:
            continue
        parent, queue, found = {v: None}, [v], None
        while queue and found is None and len(parent) < GREEDY_SEARCH:
            x = queue.pop(0)
            for d in deps[x]:
                if d not in parent:
                    parent[d] = x
                    if flow["end"][d]:
                        found = d
                        break
                    queue.append(d)
        if found is None:
            flow["start"][v] += 1
        else:
            flow["end"][found] -= 1
            x = found
            while parent[x] is not None:
                flow["edge"][(x, parent[x])] = flow["edge"].get((x, parent[x]), 0) + 1
                x = parent[x]
                if x != v:
                    flow["node"][x] += 1
        flow["node"][v] += 1
        flow["end"][v] += 1
    return flow


def _reduce_once(deps, users, lower, flow) -> bool:
    """One augmenting path from the sink to the source in the residual graph; False if none.

    Nodes: ("in", i), ("out", i), "s", "t". Every arc has unbounded capacity forward; backward,
    an arc carries back its flow above its lower bound (1 on a counted node's own arc).
    """
    edge, node = flow["edge"], flow["node"]
    parent: dict = {"t": None}
    queue = [("out", i) for i, e in enumerate(flow["end"]) if e > 0]
    for q in queue:
        parent[q] = "t"
    k = 0
    while k < len(queue) and "s" not in parent:
        kind, i = queue[k]
        k += 1
        if kind == "out":
            nxt = [("in", u) for u in users[i]] + ([("in", i)] if node[i] > lower[i] else [])
        else:
            nxt = [("out", i)] + [("out", d) for d in deps[i] if edge.get((d, i), 0) > 0]
            if flow["start"][i] > 0:
                parent["s"] = (kind, i)
                break
        for m in nxt:
            if m not in parent:
                parent[m] = (kind, i)
                queue.append(m)
    if "s" not in parent:
        return False
    _augment(parent, flow, deps)
    return True


def _augment(parent: dict, flow: dict, deps) -> None:
    """Move one unit along the path found (from the sink to the source)."""
    edge, node = flow["edge"], flow["node"]
    x = "s"
    while x != "t":
        prev = parent[x]
        if x == "s":
            flow["start"][prev[1]] -= 1
        elif prev == "t":
            flow["end"][x[1]] -= 1
        elif prev[0] == "out" and x[0] == "in" and x[1] == prev[1]:
            node[x[1]] -= 1  # backward on the node's own arc
        elif prev[0] == "out" and x[0] == "in":
            edge[(prev[1], x[1])] = edge.get((prev[1], x[1]), 0) + 1  # forward on a dependency
        elif prev[0] == "in" and x[0] == "out" and x[1] == prev[1]:
            node[x[1]] += 1  # forward on the node's own arc
        else:
            edge[(x[1], prev[1])] -= 1  # backward on a dependency
        x = prev
