"""Types and shapes from onnxruntime for the values onnx's shape inference leaves unknown."""

from __future__ import annotations

from gspo.ir import load_bytes
from gspo.rules.merge import MergeParallelMatMuls
from gspo.runtime.types import complete_types, unknown_values
from tests.kinds import contrib_model


def test_onnxruntime_gives_the_shapes_of_contrib_outputs_and_all_after_them():
    g = load_bytes(contrib_model(hidden=16, seq=8).SerializeToString())
    unknown = unknown_values(g)
    assert {"g", "m2", "ln", "sum", "qa", "qb", "fa"} <= set(unknown)
    done = complete_types(g)
    assert unknown_values(done) == []
    assert done.value("ln").dtype == 1 and done.value("ln").shape == (1, 8, 16)
    assert done.value("sum").shape == (1, 8, 16) and done.value("m2").shape == (1, 8, 16)
    # the opaque nodes are the same nodes
    assert [n.opaque for n in done.nodes if n.is_opaque] == [n.opaque for n in g.nodes if n.is_opaque]


def test_rules_refuse_unknown_shapes_with_a_reason_and_match_once_they_are_known():
    g = load_bytes(contrib_model().SerializeToString())
    rule = MergeParallelMatMuls()
    found = list(rule.match(g, explain=True))
    assert len(found) == 1 and "'ln' is not a tensor of known type and shape" in found[0].reason
    matches = list(rule.match(complete_types(g)))
    assert [n.outputs[0].name for n in matches[0].nodes] == ["qa", "qb"]
