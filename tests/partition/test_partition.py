"""Partition invariants (in the style of networkx's validate_cuts) and optimality."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gspo.errors import GspoError
from gspo.ir.dag import dependencies
from gspo.partition import Partition, min_vertex_cut, op_weights, partition
from gspo.zoo import MODELS, build
from tests.helpers import random_dag_graph


def validate(p: Partition) -> None:
    """Every op in exactly one piece, no piece above T, cut weight = sum over cut ops, pieces
    in DAG order, and the merge of the unmodified pieces is the original graph."""
    g = p.graph
    owner = {}
    for k, piece in enumerate(p.pieces):
        assert piece.size <= p.threshold
        for i in piece.ops:
            assert i not in owner, f"op {i} in two pieces"
            owner[i] = k
        piece.graph.check()
    assert sorted(owner) == list(range(len(g.nodes)))
    assert math.isclose(p.cut_weight, sum(p.weights[i] for i in p.cut_ops))
    deps = dependencies(g)
    for i, ds in enumerate(deps):
        for d in ds:
            assert owner[d] <= owner[i], f"op {i} (piece {owner[i]}) reads op {d} of a later piece"
    for piece in p.pieces:
        produced_here = {v.name for n in piece.graph.nodes for v in n.outputs}
        for name in piece.virtual_inputs:
            assert name not in produced_here and name in g.values
    assert p.merge() == g


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("threshold", [4, 16, 64])
def test_zoo_partitions_are_valid(name, threshold):
    validate(partition(build(name, "tiny"), threshold))


@st.composite
def random_dags(draw, max_nodes=30):
    return random_dag_graph(draw, st, max_nodes)


@settings(max_examples=80, deadline=None)
@given(random_dags(), st.integers(2, 12), st.sampled_from([0.1, 0.25, 0.5]))
def test_random_dag_partitions_are_valid(g, threshold, balance):
    validate(partition(g, threshold, balance))


def brute_force(deps, weights, ops, balance):
    """Minimum over every assignment of ops to before / cut / after that the flow model allows."""
    k = max(1, min(math.ceil(balance * len(ops)), len(ops) // 2))
    first, last = set(ops[:k]), set(ops[-k:])
    best = math.inf
    for labels in itertools.product("SCT", repeat=len(ops)):
        lab = dict(zip(ops, labels))
        if any(lab[v] == "T" for v in first) or any(lab[v] != "T" for v in last):
            continue
        ok = all(
            not (lab[u] == "S" and lab[v] == "T") and not (lab[v] != "T" and lab[u] == "T")
            for v in ops for u in deps[v]
        )
        if ok:
            best = min(best, sum(weights[v] for v in ops if lab[v] == "C"))
    return best


@settings(max_examples=60, deadline=None)
@given(random_dags(max_nodes=8), st.sampled_from([0.25, 0.5]))
def test_cut_weight_is_the_brute_force_minimum(g, balance):
    if len(g.nodes) < 2:
        return
    deps, weights = dependencies(g), op_weights(g)
    ops = list(range(len(g.nodes)))
    cut = min_vertex_cut(deps, weights, ops, balance)
    assert math.isclose(cut.value, brute_force(deps, weights, ops, balance), rel_tol=1e-9)
    assert math.isclose(cut.value, sum(weights[v] for v in cut.cut))


def test_nasnet_large_pieces_stay_below_the_threshold():
    p = partition(build("nasnet_large", "full"), 64)
    assert max(piece.size for piece in p.pieces) <= 64 and len(p.pieces) > 10
    assert p.merge() == p.graph


def test_small_graphs_come_back_as_one_piece_and_bad_thresholds_fail():
    g = build("squeezenet", "tiny")
    p = partition(g, threshold=len(g.nodes))
    assert len(p.pieces) == 1 and p.cuts == () and p.pieces[0].virtual_inputs == ()
    assert p.pieces[0].graph.nodes == g.nodes
    with pytest.raises(GspoError, match="at least 2"):
        partition(g, threshold=1)
    with pytest.raises(GspoError, match="balance"):
        partition(g, threshold=8, balance=0.7)


def test_virtual_inputs_keep_merge_sites_at_a_piece_head():
    """BERT's Q/K/V MatMuls read one value; after cutting before them they still share it."""
    from gspo.rules.merge import MergeParallelMatMuls

    g = build("bert", "tiny")
    p = partition(g, threshold=24)
    sites = sum(len(list(MergeParallelMatMuls().match(piece.graph))) for piece in p.pieces)
    assert sites == len(list(MergeParallelMatMuls().match(g))) == 2


def test_optimized_pieces_merge_back():
    from gspo.rules import apply_greedily, fold
    from gspo.runtime import verify
    from gspo.runtime.verify import Tolerance

    g = build("inception_v3", "tiny")
    p = partition(g, 32)
    optimized = [apply_greedily(piece.graph, fold.RULES)[0] for piece in p.pieces]
    merged = p.merge(optimized)
    assert len(merged.nodes) < len(g.nodes)
    assert verify(g, merged, Tolerance(rtol=1e-4, atol=1e-5)).equivalent
    bad = list(optimized)
    bad[0] = dataclasses.replace(bad[0], outputs=bad[0].outputs[:-1])
    with pytest.raises(GspoError, match="changed its inputs or outputs"):
        p.merge(bad)


def test_merged_pieces_keep_an_output_that_is_not_a_tensor():
    """ZipMap's sequence of maps: the merged graph rebuilt its outputs from name, element type
    and shape, and the saved model declared it a tensor of element type 0."""
    from gspo.ir import load_bytes, to_model
    from tests.kinds import zipmap_model

    model = zipmap_model()
    g = load_bytes(model.SerializeToString())
    parts = partition(g, 2)
    merged = parts.merge([p.graph for p in parts.pieces])
    assert to_model(merged).graph.output[1].type == model.graph.output[1].type
