"""Rules that undo each other bring the graph back to a key already seen (no search loop)."""

from __future__ import annotations

import numpy as np

from gspo.ir.builder import GraphBuilder
from gspo.rules.merge import MergeParallelConvs, MergeParallelMatMuls
from gspo.rules.move import (
    PullThroughConcat,
    PullThroughSplit,
    PushThroughConcat,
    PushThroughSplit,
    RemoveSplitConcat,
)
from gspo.rules.split import SplitConv, SplitMatMul
from tests.rules.util import apply_first


def _alternate(graph, rules, rounds=4):
    seen = [graph.key]
    for i in range(rounds * len(rules)):
        graph = apply_first(rules[i % len(rules)], graph)
        if graph.key in seen:
            return graph, seen
        seen.append(graph.key)
    raise AssertionError(f"no key repeated after {len(seen)} steps")


def test_split_merge_and_identity_return_to_the_original():
    b = GraphBuilder()
    x = b.input("x", (1, 3, 6, 6))
    y = b.op("Conv", [x, b.weight("w", (6, 3, 3, 3)), b.weight("b", (6,))], kernel_shape=[3, 3], pads=[1] * 4)
    g = b.output(b.op("Relu", [y])).build()
    back, seen = _alternate(g, [SplitConv(), MergeParallelConvs(), RemoveSplitConcat()])
    assert back.key == g.key and len(seen) == 3


def test_split_merge_matmul_returns_to_the_original():
    b = GraphBuilder()
    x = b.input("x", (2, 4))
    g = b.output(b.op("Tanh", [b.op("MatMul", [x, b.weight("w", (4, 6))])])).build()
    back, _ = _alternate(g, [SplitMatMul(), MergeParallelMatMuls(), RemoveSplitConcat()])
    assert back.key == g.key


def test_push_pull_through_concat_cycles():
    b = GraphBuilder()
    parts = [b.op("Neg", [b.input(f"x{i}", (2, 3))]) for i in range(2)]
    g = b.output(b.op("Sigmoid", [b.op("Relu", [b.op("Concat", parts, axis=1)])])).build()
    back, seen = _alternate(g, [PushThroughConcat(), PullThroughConcat()])
    assert len(seen) == 3 and back.key == seen[1]  # the second push gives back the first one's graph


def test_push_pull_through_split_cycles():
    b = GraphBuilder()
    y = b.op("Relu", [b.input("x", (2, 4))])
    pieces = b.op("Split", [y, b.const("s", np.array([1, 3]))], n_outputs=2, axis=1)
    g = b.output(*[b.op("Neg", [p]) for p in pieces]).build()
    back, seen = _alternate(g, [PushThroughSplit(), PullThroughSplit()])
    assert len(seen) == 3 and back.key == seen[1]  # the second push gives back the first one's graph


def test_splitting_a_merged_matmul_and_merging_back_keeps_the_graph_valid():
    """Content-derived names must not collide: the re-merged node would recreate the name the
    Concat still produces (a bug the search found)."""
    b = GraphBuilder()
    x = b.input("x", (2, 4))
    g = b.output(*[b.op("Tanh", [b.op("MatMul", [x, b.weight("w", (4, 3))])]) for _ in range(2)]).build()
    merged = apply_first(MergeParallelMatMuls(), g)
    halves = apply_first(SplitMatMul(), merged)
    again = apply_first(MergeParallelMatMuls(), halves)
    again.check()
    back = apply_first(RemoveSplitConcat(), again)
    back.check()
