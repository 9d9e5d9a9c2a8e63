"""The widest antichain: exact (against a matching on the transitive closure) and near-linear."""

from __future__ import annotations

import random

import networkx as nx
import pytest

from gspo.ir import dag
from gspo.ir.builder import GraphBuilder
from tests.helpers import python_calls


def _closure_width(graph, counts=lambda n: True) -> int:
    """Dilworth by Hopcroft-Karp on the transitive closure (quadratic: small graphs only)."""
    reach = dag.reachability(graph)
    chosen = [i for i, n in enumerate(graph.nodes) if counts(n)]
    bip = nx.Graph()
    bip.add_nodes_from(chosen)
    bip.add_nodes_from(-1 - i for i in chosen)
    for i in chosen:
        bip.add_edges_from((i, -1 - j) for j in chosen if reach[i] >> j & 1)
    return len(chosen) - len(nx.bipartite.hopcroft_karp_matching(bip, top_nodes=chosen)) // 2


def _random_dag(seed: int, size: int):
    rng = random.Random(seed)
    b = GraphBuilder(f"r{seed}", seed=seed)
    values = [b.input("x", (1, 4))]
    for _ in range(size):
        op = rng.choice(["Relu", "Add", "Mul"])
        if op == "Relu":
            values.append(b.op("Relu", [rng.choice(values[-6:])]))
        else:
            values.append(b.op(op, [rng.choice(values), rng.choice(values[-3:])]))
    return b.output(values[-1]).build()


def _chain(n: int):
    b = GraphBuilder("chain")
    y = b.input("x", (1, 4))
    for _ in range(n):
        y = b.op("Add", [y, y])
    return b.output(y).build()


def _wide(n: int):
    b = GraphBuilder("wide")
    x = b.input("x", (1, 4))
    return b.output(b.op("Concat", [b.op("Relu", [x]) for _ in range(n)], axis=1)).build()


@pytest.mark.parametrize("seed", range(40))
def test_the_same_width_as_the_closure_matching_on_random_dags(seed):
    graph = _random_dag(seed, 10 + seed)
    assert dag.max_antichain_width(graph) == _closure_width(graph)
    only_relu = lambda n: n.op_type == "Relu"  # noqa: E731 - uncounted nodes are passed through
    assert dag.max_antichain_width(graph, only_relu) == _closure_width(graph, only_relu)


def test_a_chain_of_5000_adds_and_3000_parallel_ops_cost_a_few_calls_per_op():
    """Near-linear, counted rather than timed: neither needs an augmenting path (each walks the
    whole graph), so the work is a few Python calls per op (a quadratic one: millions)."""
    for graph, width in ((_chain(5000), 1), (_wide(3000), 3000)):
        found, calls = python_calls(dag.max_antichain_width, graph)
        assert found == width
        assert calls <= 10 * len(graph.nodes), (graph.name, calls)
