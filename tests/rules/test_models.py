"""Rules on real graphs: merge sites exist where the paper says, and greedy merging is exact."""

from __future__ import annotations

from functools import cache

import onnx
import pytest
from onnx import TensorProto, helper

from gspo import ir
from gspo.rules import DEFAULT_RULES, MERGE_RULES, WHOLE_MODEL_RULES, apply_greedily, cse, fold
from gspo.rules import GREEDY_RULES as GREEDY
from gspo.runtime import verify
from gspo.runtime.verify import Tolerance
from gspo.zoo import MODELS, build
from tests.ir.conformance import DATA


@cache
def _full(name):
    return build(name, "full")


def merge_sites(graph) -> dict[str, int]:
    return {r.name: n for r in MERGE_RULES if (n := sum(1 for _ in r.match(graph)))}


def test_merge_sites_in_the_papers_models():
    assert merge_sites(_full("inception_v3")).get("MergeParallelConvs", 0) >= 10  # inception blocks
    # 5 inputs and 5 states, each read by 8 gate MatMuls; 8 gates x 5 steps of x@Wx + h@Wh
    # and 8 input weights shared by the 5 steps (the state weights too, but the steps depend on each other)
    assert merge_sites(_full("nasrnn")) == {"MergeParallelMatMuls": 10, "MergeMatMulsIntoAdd": 40, "BatchSharedWeightMatMuls": 8}
    assert merge_sites(_full("bert")) == {"MergeParallelMatMuls": 12}  # Q/K/V in each of 12 layers
    folded, _ = apply_greedily(_full("nasnet_mobile"), fold.RULES + cse.RULES)
    assert merge_sites(folded).get("MergeConvsIntoAdd", 0) >= 20


@pytest.mark.parametrize("name", sorted(MODELS))
def test_greedy_merging_keeps_full_zoo_models_equivalent(name):
    g = _full(name)
    h, counts = apply_greedily(g, GREEDY)
    assert counts, f"{name}: nothing applied"
    saved = ir.load_bytes(ir.serialize(h))
    res = verify(g, saved, Tolerance(rtol=1e-3, atol=1e-4), runs=1)
    assert res.equivalent, (counts, [(d.name, d.max_abs) for d in res.outputs])


def test_whole_model_greedy_nasrnn_adds_each_step_once():
    """Batched input projections split by step first line up with each step's recurrent
    projection: one Add of [1, 4096] per step instead of eight of [1, 512]."""
    g = _full("nasrnn")
    h, counts = apply_greedily(g, WHOLE_MODEL_RULES)
    assert counts["BatchSharedWeightMatMuls"] == 8
    assert counts["SwapNestedSplits"] == 1 and counts["MergeBinaryOfSplits"] == 5
    assert sum(n.op_type == "MatMul" for n in h.nodes) == 6  # one batched, one per step
    assert sum(n.op_type == "Add" for n in h.nodes) == 20  # the cell's own 3 per step, plus 1
    res = verify(g, ir.load_bytes(ir.serialize(h)), Tolerance(rtol=1e-3, atol=1e-4), runs=1)
    assert res.equivalent, counts


@pytest.mark.parametrize("path", sorted((DATA / "light").glob("light_*.onnx")), ids=lambda p: p.stem)
def test_greedy_merging_keeps_onnx_model_zoo_graphs_equivalent(path):
    g = ir.load(path)
    h, counts = apply_greedily(g, GREEDY)
    res = verify(g, ir.load_bytes(ir.serialize(h)), Tolerance(rtol=1e-3, atol=1e-4), runs=1)
    assert res.equivalent, counts


def test_rules_never_touch_opaque_nodes():
    nodes = [
        helper.make_node("MyConv", ["x", "w"], ["a"], domain="com.example"),
        helper.make_node("MyConv", ["x", "w"], ["b"], domain="com.example"),
        helper.make_node("MyRelu", ["a"], ["c"], domain="com.example"),
        helper.make_node("MyAdd", ["c", "b"], ["y"], domain="com.example"),
    ]
    g = helper.make_graph(
        nodes, "opaque",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])],
        initializer=[onnx.numpy_helper.from_array(__import__("numpy").ones((2, 2, 1, 1), "float32"), "w")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    graph = ir.load_bytes(m.SerializeToString())
    assert all(n.is_opaque for n in graph.nodes)
    for rule in DEFAULT_RULES:
        assert list(rule.match(graph)) == [], rule.name
    same, counts = apply_greedily(graph, DEFAULT_RULES[:13])
    assert counts == {} and same.key == graph.key
