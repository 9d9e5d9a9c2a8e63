"""Nimble's stream assignment (Kwon et al. 2020) with a stream cap, and minimal sync events.

Notes:
    1. Transitive reduction (minimum equivalent graph, MEG) of the op DAG.
    2. Maximum matching of the MEG's bipartite graph (networkx Hopcroft-Karp): a minimum path
       cover, where every matched edge is a dependency that needs no sync.
    3. That matching is augmented (augmenting paths over the transitive closure) to a maximum
       matching of the closure's bipartite graph: a minimum *chain* cover, whose size is the
       DAG's maximum antichain width (Dilworth), so the fewest streams that keep every pair of
       independent ops on different streams. Augmenting keeps most MEG edges matched. On a
       very large graph augmenting stops after :data:`AUGMENT_WORK`, leaving a valid cover
       with a few chains more than the minimum.
    4. ``max_streams`` merges the lightest chains (by FLOPs) until the cap holds.
    5. Events: ops are visited in topological order with vector clocks per stream; a
       cross-stream dependency gets an event only if the clocks do not already imply it, and
       events at one op that others imply are dropped, so no event is redundant.

Example:
    >>> from gspo.ir.builder import GraphBuilder
    >>> b = GraphBuilder()
    >>> x = b.input("x", (1, 4))
    >>> y = b.op("Add", [b.op("Relu", [x]), b.op("Sigmoid", [x])])
    >>> s = assign_streams(b.output(y).build())
    >>> s.num_streams, s.events
    (2, (('sigmoid', 'add'),))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import networkx as nx

from gspo.ir import Graph, node_features
from gspo.ir.dag import dependencies, reachability
from gspo.streams.schedule import Schedule, node_id

__all__ = ["assign_streams", "chain_cover", "make_events"]


#: Closure edges the augmenting paths may look at in one chain cover. Augmenting is cubic in the
#: graph's size at worst (a 1,500-op NASNet-A Large export: minutes); past this much work the
#: remaining chains stay as they are: a valid cover with a few more chains than the minimum
#: (streams beyond the cap merge anyway). Counted, not timed, so the result is deterministic.
AUGMENT_WORK = 3_000_000


def _bits(x: int):
    while x:
        low = x & -x
        yield low.bit_length() - 1
        x ^= low


def chain_cover(deps: Sequence[Sequence[int]], reach: Sequence[int]) -> list[list[int]]:
    """A minimum chain cover of the DAG (ops by index, each chain in topological order)."""
    n = len(deps)
    children: list[list[int]] = [[] for _ in range(n)]
    for v, ds in enumerate(deps):
        for u in ds:
            children[u].append(v)
    # Integer labels (u for "u's output", n + v for "v's input"): string hashing is randomized
    # per process, and labels that hash differently would change networkx's matching.
    bip = nx.Graph()
    left = list(range(n))
    bip.add_nodes_from(left)
    bip.add_nodes_from(range(n, 2 * n))
    for u in range(n):
        covered = 0
        for w in children[u]:
            covered |= reach[w]
        for v in sorted(children[u]):
            if not (covered >> v) & 1:
                bip.add_edge(u, n + v)
    matching = nx.bipartite.hopcroft_karp_matching(bip, top_nodes=left)
    nxt: list[int | None] = [None] * n
    prv: list[int | None] = [None] * n
    for u, v in matching.items():
        if u < n:
            nxt[u], prv[v - n] = v - n, u
    work = [AUGMENT_WORK]
    for u in range(n):
        if nxt[u] is None and work[0] > 0:
            _augment(u, reach, nxt, prv, work)
    chains = []
    for u in range(n):
        if prv[u] is None:
            chain = [u]
            while nxt[chain[-1]] is not None:
                chain.append(nxt[chain[-1]])
            chains.append(chain)
    return chains


def _augment(start: int, reach: Sequence[int], nxt: list, prv: list, work: list[int]) -> bool:
    """One augmenting path from free left vertex ``start`` over closure edges (iterative DFS),
    spending ``work[0]`` (closure edges looked at); none found when it runs out."""
    visited: set[int] = set()
    stack = [(start, _candidates(start, reach, prv, work))]
    path: list[tuple[int, int]] = []
    while stack and work[0] > 0:
        u, it = stack[-1]
        advanced = False
        for v in it:
            if v in visited:
                continue
            visited.add(v)
            if prv[v] is None:
                path.append((u, v))
                for a, b in path:
                    nxt[a], prv[b] = b, a
                return True
            path.append((u, v))
            stack.append((prv[v], _candidates(prv[v], reach, prv, work)))
            advanced = True
            break
        if not advanced:
            stack.pop()
            if path:
                path.pop()
    return False


def _candidates(u: int, reach: Sequence[int], prv: list, work: list[int]):
    """Successors of ``u``: free chain starts first (joining two chains breaks none), nearest
    first; then matched ones (re-routing through them breaks a link)."""
    succ = list(_bits(reach[u]))
    work[0] -= len(succ) + 1
    return iter([v for v in succ if prv[v] is None] + [v for v in succ if prv[v] is not None])


def _cap(chains: list[list[int]], weight: Sequence[float], cap: int) -> list[list[int]]:
    chains = [list(c) for c in chains]
    while len(chains) > cap:
        order = sorted(range(len(chains)), key=lambda i: (sum(weight[v] for v in chains[i]), chains[i][0]))
        a, b = sorted(order[:2])
        chains[a] = sorted(chains[a] + chains[b])
        del chains[b]
    return chains


def make_events(deps: Sequence[Sequence[int]], streams: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """Irredundant sync events ``(after, before)`` for ops already placed on ``streams``.

    An op waits on a dependency of another stream unless its stream's clock, or another
    dependency it waits on, already implies it. Only the latest dependency of each other
    stream can be needed (the earlier ones are implied by it), so the work per op is the
    number of streams it reads from, squared, not its number of dependencies.
    """
    n = len(deps)
    k = len(streams)
    stream = [0] * n
    pos = [0] * n
    for s, ops in enumerate(streams):
        for p, v in enumerate(ops):
            stream[v], pos[v] = s, p
    clock = [[-1] * k for _ in range(k)]
    done: list[list[int]] = [[] for _ in range(n)]
    events: list[tuple[int, int]] = []
    for v in range(n):
        s = stream[v]
        known = clock[s]
        need = [u for u in deps[v] if stream[u] != s and known[stream[u]] < pos[u]]
        latest: dict[int, int] = {}
        for u in need:
            if stream[u] not in latest or pos[u] > pos[latest[stream[u]]]:
                latest[stream[u]] = u
        cands = list(latest.values())
        chosen = [u for u in cands if not any(w != u and done[w][stream[u]] >= pos[u] for w in cands)]
        cover = {u: sum(1 for w in need if done[u][stream[w]] >= pos[w]) for u in chosen}
        chosen.sort(key=lambda u: (-cover[u], -pos[u], u))
        for u in chosen:
            clock[s] = [max(a, b) for a, b in zip(clock[s], done[u])]
            events.append((u, v))
        clock[s][s] = pos[v]
        done[v] = list(clock[s])
    return events


def assign_streams(
    graph: Graph,
    max_streams: int | None = None,
    weight: Callable | None = None,
) -> Schedule:
    """Nimble stream assignment of ``graph``'s ops.

    Args:
        graph: the graph (nodes in topological order).
        max_streams: cap on the number of streams (the lightest chains merge); ``None`` = none.
        weight: ``weight(graph, node) -> float`` used to pick the chains to merge
            (default: FLOPs + 1).

    Returns:
        A :class:`Schedule` with streams ordered by their first op.
    """
    n = len(graph.nodes)
    if n == 0:
        return Schedule(())
    if max_streams is not None and max_streams < 1:
        raise ValueError("max_streams must be at least 1")
    deps = dependencies(graph)
    chains = chain_cover(deps, reachability(graph))
    if max_streams is not None and len(chains) > max_streams:
        w = [(weight(graph, nd) if weight else node_features(graph, nd).flops + 1.0) for nd in graph.nodes]
        chains = _cap(chains, w, max_streams)
    chains = sorted((sorted(c) for c in chains), key=lambda c: c[0])
    ids = [node_id(nd) for nd in graph.nodes]
    events = make_events(deps, chains)
    return Schedule(tuple(tuple(ids[v] for v in c) for c in chains), tuple((ids[a], ids[b]) for a, b in events))
