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


def _reshaped_by_its_own_shape(data_dependent: bool) -> bytes:
    """The contrib model's output reshaped by a shape computed from it (Shape -> Reshape), as
    an unfused attention block of onnxruntime's transformer optimizer does; or, with
    ``data_dependent``, what NonZero finds in it (a shape that changes with the values)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    m = contrib_model(hidden=16, seq=8)
    g = m.graph
    y = "ln"  # a contrib output: onnx knows nothing of it
    g.initializer.extend([numpy_helper.from_array(np.array(i, np.int64), f"i{i}") for i in (0, 1)])
    g.initializer.append(numpy_helper.from_array(np.array([0], np.int64), "axes"))
    g.initializer.append(numpy_helper.from_array(np.array([4, 4], np.int64), "heads"))
    g.node.append(helper.make_node("Shape", [y], ["shape"]))
    for i in (0, 1):  # batch and sequence read off the shape, heads of 4 appended
        g.node.append(helper.make_node("Gather", ["shape", f"i{i}"], [f"d{i}"]))
        g.node.append(helper.make_node("Unsqueeze", [f"d{i}", "axes"], [f"u{i}"]))
    g.node.append(helper.make_node("Concat", ["u0", "u1", "heads"], ["split_shape"], axis=0))
    g.node.append(helper.make_node("Reshape", [y, "split_shape"], ["again"]))
    g.node.append(helper.make_node("Relu", ["again"], ["out"]))
    if data_dependent:
        g.node.append(helper.make_node("NonZero", ["out"], ["nz"]))
        g.node.append(helper.make_node("Neg", ["nz"], ["nn"]))
        g.output.append(helper.make_tensor_value_info("nn", TensorProto.INT64, [3, "n"]))
    g.output.append(helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 8, 4, 4]))
    return m.SerializeToString()


def test_shapes_onnxruntime_cannot_infer_come_from_one_run_unless_they_depend_on_values():
    g = complete_types(load_bytes(_reshaped_by_its_own_shape(False)))
    assert unknown_values(g) == []
    assert g.value("again").shape == (1, 8, 4, 4) and g.value("out").dtype == 1
    g = complete_types(load_bytes(_reshaped_by_its_own_shape(True)))
    assert g.value("again").shape == (1, 8, 4, 4)
    assert set(unknown_values(g)) == {"nz", "nn"}  # NonZero's count differs from run to run
