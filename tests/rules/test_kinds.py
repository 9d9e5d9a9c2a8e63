"""What rules may touch in the kinds of models users bring: QDQ groups stay whole, half
precision stays half precision."""

from __future__ import annotations

from collections import Counter

import onnx
import pytest
from onnx import TensorProto

from gspo.ir import load_bytes, to_model
from gspo.ir.onnx_io import check_graph
from gspo.rules import DEFAULT_RULES, GREEDY_RULES, apply_greedily
from gspo.rules.base import QDQ_OPS
from gspo.rules.cse import MergeDuplicates
from gspo.runtime import verify
from tests.kinds import half_mlp_model, half_model, qdq_model


def _groups(graph) -> Counter:
    """Each non-QDQ op with the op types that feed it and read it: what a QDQ group is."""
    out = Counter()
    for n in graph.nodes:
        if n.op_type in QDQ_OPS:
            continue
        feeds = tuple(sorted(graph.producers[i][0].op_type for i in n.inputs if i in graph.producers))
        reads = tuple(sorted(c.op_type for v in n.outputs for c in graph.consumers.get(v.name, ())))
        out[(n.op_type, feeds, reads)] += 1
    return out


def test_no_rule_separates_a_dequantize_from_its_op_or_an_op_from_its_quantize():
    """Common-subexpression elimination merged the two identical DequantizeLinear nodes of one
    input, leaving one DQ feeding two Convs (onnxruntime splits them again to fuse each group)."""
    g = load_bytes(qdq_model().SerializeToString(), plain=True)
    fails = [m for m in MergeDuplicates().match(g, explain=True) if "QDQ" in getattr(m, "reason", "")]
    assert fails and "DequantizeLinear belongs to a QDQ group" in fails[0].reason
    for rule in DEFAULT_RULES:
        assert not list(rule.match(g)), rule.name
    h, counts = apply_greedily(g, GREEDY_RULES)
    assert counts == {} and h.key == g.key
    assert _groups(h)[("Conv", ("DequantizeLinear",) * 3, ("QuantizeLinear",))] == 2


def test_float16_stays_float16_through_the_rules_and_computes_the_same():
    g = load_bytes(half_model(TensorProto.FLOAT16).SerializeToString(), plain=True)
    h, counts = apply_greedily(g, GREEDY_RULES)
    assert sum(counts.values()) >= 2  # the Mul folded, the Convs merged
    assert {v.dtype for n in h.nodes for v in n.outputs} == {TensorProto.FLOAT16}
    assert {w.dtype for w in h.weights.values()} == {TensorProto.FLOAT16}
    assert verify(g, h).equivalent


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT16, TensorProto.BFLOAT16])
def test_half_precision_rewrites_keep_their_type_under_onnx_strict_checks(dtype):
    """onnxruntime's CPU provider runs no bfloat16 MatMul: the rewritten graph's types are
    checked by onnx's strict shape and type inference, and every weight saved in its type."""
    g = load_bytes(half_mlp_model(dtype).SerializeToString(), plain=True)
    h, counts = apply_greedily(g, GREEDY_RULES)
    assert counts  # MatMul + Add became a Gemm
    assert {v.dtype for n in h.nodes for v in n.outputs} == {dtype}
    assert check_graph(h) is None
    saved = to_model(h)
    assert {t.data_type for t in saved.graph.initializer} == {dtype}
    onnx.checker.check_model(saved, full_check=True)
