"""Reduced floats as graphs (:mod:`gspo.precision.floats`): the Casts sit exactly where a value
crosses between the reduced and the fp32 part, weights are stored reduced without being
computed, the model's interface keeps its types, the ops kept fp32 stay so, the opset is raised
for bf16 only where every op reads the same, and the result is a valid ONNX model; the torch
kinds (fp16, bf16, TF32). Running such graphs is tested in
tests/runtime/torchrt/test_reduced_dtypes.py."""

from __future__ import annotations

import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto

from gspo import ir
from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.ir.builder import GraphBuilder
from gspo.ir.weights import CastW, Weight
from gspo.precision.floats import (
    TF32_KEY,
    float_kernels,
    raised_opset,
    reduced_floats,
    torch_kinds,
    wants_tf32,
    with_tf32,
)
from gspo.streams import node_id
from gspo.zoo import MODELS, build
from tests.helpers import random_dag_graph

F, F16, BF16, I64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.INT64
ELEM = {"fp16": F16, "bf16": BF16}


def mlp() -> Graph:
    """x -> MatMul(w1) -> Add(b1) -> Relu -> MatMul(w2) -> Softmax -> y, and the Relu as ``h``."""
    b = GraphBuilder("mlp", seed=1)
    x = b.input("x", (4, 16))
    a = b.op("Add", [b.op("MatMul", [x, b.weight("w1", (16, 32))], out="m1"), b.weight("b1", (32,))], out="a1")
    h = b.op("Relu", [a], out="h")
    m2 = b.op("MatMul", [h, b.weight("w2", (32, 8))], out="m2")
    return b.output(b.op("Softmax", [m2], out="y"), h).build()


def ids(graph: Graph, *op_types: str) -> set[str]:
    return {node_id(n) for n in graph.nodes if not op_types or n.op_type in op_types}


def casts(graph: Graph) -> list[tuple[str, str, int]]:
    """Each Cast as (what it reads, what it writes, to)."""
    return [(n.inputs[0], n.outputs[0].name, n.attr("to")) for n in graph.nodes if n.op_type == "Cast"]


def check_boundaries(before: Graph, after: Graph, reduced: set[str], elem: int) -> None:
    """The invariants of a reduced graph: the interface as before; every original node there
    once, reading and writing its float values in the reduced type exactly when it is reduced;
    a Cast only where a value crosses between the two parts, one per value and type."""
    assert [(v.name, v.dtype, v.shape) for v in after.inputs] == [(v.name, v.dtype, v.shape) for v in before.inputs]
    assert [(v.name, v.dtype, v.shape) for v in after.outputs] == [(v.name, v.dtype, v.shape) for v in before.outputs]
    new_casts = [n for n in after.nodes if n.op_type == "Cast" and n not in before.nodes]
    assert len(after.nodes) == len(before.nodes) + len(new_casts)
    for cast in new_casts:
        src, dst = after.values[cast.inputs[0]], cast.outputs[0]
        assert {src.dtype, dst.dtype} == {F, elem}, (src, dst)
        assert dst.name in after.consumers or dst.name in after.output_names(), f"{dst.name} read by nothing"
    assert len({(n.inputs[0], n.attr("to")) for n in new_casts}) == len(new_casts), "a crossing cast twice"
    originals = [n for n in after.nodes if n not in new_casts]
    for old, new in zip(before.nodes, originals):
        assert old.op_type == new.op_type
        side = elem if node_id(old) in reduced else F
        for name_old, name_new in zip(old.inputs, new.inputs):
            if name_old and before.values[name_old].dtype == F and old.op_type not in ("Shape", "Size"):
                assert after.values[name_new].dtype == side, (old.op_type, name_old, name_new)
        for v_old, v_new in zip(old.outputs, new.outputs):
            if v_old.dtype == F:
                assert v_new.dtype == side and v_new.shape == v_old.shape


def valid(graph: Graph) -> Graph:
    """``graph`` saved, checked by onnx (full, strict shape inference) and loaded back."""
    data = ir.serialize(graph)
    onnx.checker.check_model(onnx.load_from_string(data), full_check=True)
    back = ir.load_bytes(data)
    assert ir.serialize(back) == data
    return back


# ---------------------------------------------------------------------- the boundaries
def test_a_partly_reduced_graph_has_casts_exactly_at_its_boundaries():
    g = mlp()
    r = reduced_floats(g, {"m1", "a1", "h"}, "bf16")
    check_boundaries(g, r, {"m1", "a1", "h"}, BF16)
    # x in, h out to the graph (renamed inside, cast back to its name) and on to the fp32 MatMul
    assert sorted(casts(r)) == sorted([("x", "x.bf16", BF16), ("h.bf16", "h", F)])
    assert [n.inputs[0] for n in r.nodes if n.op_type == "MatMul"] == ["x.bf16", "h"]
    assert r.values["h.bf16"].dtype == BF16 and r.values["h"].dtype == F
    valid(r)


def test_a_value_crossing_both_ways_is_cast_once_per_direction():
    g = mlp()
    r = reduced_floats(g, {"m1", "m2"}, "fp16")
    check_boundaries(g, r, {"m1", "m2"}, F16)
    assert sorted(casts(r)) == sorted([("x", "x.fp16", F16), ("m1", "m1.fp32", F), ("h", "h.fp16", F16),
                                       ("m2", "m2.fp32", F)])
    valid(r)


@st.composite
def dag_and_subset(draw):
    g = random_dag_graph(draw, st, max_nodes=14)
    chosen = draw(st.sets(st.sampled_from(sorted(ids(g)))))
    return g, chosen, draw(st.sampled_from(["fp16", "bf16"]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dag_and_subset())
def test_random_graphs_reduced_anywhere_keep_the_invariants_and_stay_valid(case):
    g, chosen, dtype = case
    r = reduced_floats(g, chosen, dtype)
    check_boundaries(g, r, chosen, ELEM[dtype])
    if chosen:
        valid(r)
    else:
        assert r is g


def test_every_zoo_model_wholly_reduced_has_casts_only_at_the_interface_and_the_kept_ops():
    for name in MODELS:
        g = build(name, "tiny")
        r = reduced_floats(g, ids(g), "bf16")
        kept = {node_id(n) for n in g.nodes if n.op_type in ("Softmax", "LayerNormalization")}
        check_boundaries(g, r, ids(g) - kept, BF16)
        valid(r)


# ---------------------------------------------------------------------- weights, types, kept ops
def test_weights_are_stored_reduced_as_expressions_computed_only_at_save(monkeypatch):
    g = mlp()

    def refuse(self, store):
        raise AssertionError("a weight was computed")

    with monkeypatch.context() as m:
        m.setattr(Weight, "evaluate", refuse)
        for cls in {type(w) for w in g.weights.values()} | {CastW}:
            m.setattr(cls, "evaluate", refuse)
        r = reduced_floats(g, {"m1", "a1", "h"}, "bf16")
    assert isinstance(r.weights["w1"], CastW) and r.weights["w1"].base is g.weights["w1"]
    assert r.weights["w1"].dtype == BF16 and r.weights["w1"].shape == (16, 32)
    assert r.weights["w2"] is g.weights["w2"]  # read by the fp32 MatMul only
    saved = onnx.load_from_string(ir.serialize(r))
    w1 = next(t for t in saved.graph.initializer if t.name == "w1")
    assert w1.data_type == BF16 and tuple(w1.dims) == (16, 32)


def test_a_cast_weight_rounds_to_nearest_even_and_is_keyed_by_its_type():
    import ml_dtypes
    import numpy as np

    from gspo.ir.weights import Literal, WeightStore

    base = Literal.from_array(np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, 65520.0, 1e-3], np.float32))
    bf16, fp16 = CastW(base, BF16), CastW(base, F16)
    assert bf16.key != fp16.key and bf16.key == CastW(base, BF16).key and bf16.shape == base.shape
    got = bf16.evaluate(WeightStore())
    assert got.dtype == ml_dtypes.bfloat16
    assert got.astype(np.float32).tolist()[:3] == [1.0, 1.0, 1 + 4 * 2**-8]  # ties to even
    assert np.isinf(fp16.evaluate(WeightStore())[3])  # past fp16's largest value


def test_a_weight_read_by_both_parts_is_kept_and_a_reduced_copy_added():
    b = GraphBuilder("shared", seed=2)
    x = b.input("x", (2, 8))
    w = b.weight("w", (8, 8))
    first = b.op("MatMul", [x, w], out="first")
    g = b.output(b.op("MatMul", [first, w], out="second")).build()
    r = reduced_floats(g, {"first"}, "bf16")
    assert r.weights["w"] is g.weights["w"]
    assert isinstance(r.weights["w.bf16"], CastW) and r.weights["w.bf16"].base is g.weights["w"]
    assert [n.inputs for n in r.nodes if n.op_type == "MatMul"] == [("x.bf16", "w.bf16"), ("first.fp32", "w")]
    assert all(n.inputs[0] not in r.weights for n in r.nodes if n.op_type == "Cast")  # no Cast on a weight
    valid(r)


def test_what_an_opaque_node_reads_keeps_its_name_and_type():
    """A Binarizer (ai.onnx.ml, kept as bytes that name its input) reads a reduced MatMul's output."""
    from onnx import helper

    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Binarizer", ["m"], ["b"], domain="ai.onnx.ml", threshold=0.5),
             helper.make_node("Relu", ["m"], ["y"])]
    w = helper.make_tensor("w", F, [3, 3], [0.5] * 9)
    graph = helper.make_graph(nodes, "opaque", [helper.make_tensor_value_info("x", F, [2, 3])],
                              [helper.make_tensor_value_info("b", F, [2, 3]), helper.make_tensor_value_info("y", F, [2, 3])],
                              initializer=[w], value_info=[helper.make_tensor_value_info("m", F, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    g = ir.load_bytes(model.SerializeToString())
    r = reduced_floats(g, ids(g), "bf16")
    check_boundaries(g, r, {"m", "y"}, BF16)
    assert r.values["m"].dtype == F and r.values["m.bf16"].dtype == BF16
    assert ("m.bf16", "m", F) in casts(r) and next(n for n in r.nodes if n.op_type == "Relu").inputs == ("m.bf16",)
    saved = onnx.load_from_string(ir.serialize(r))
    assert next(n for n in saved.graph.node if n.op_type == "Binarizer").input == ["m"]


def test_integer_and_boolean_values_are_untouched_and_shape_reads_any_type():
    b = GraphBuilder("ints", seed=3)
    ids_ = b.input("ids", (1, 4), dtype=I64)
    e = b.op("Gather", [b.weight("table", (10, 8)), ids_], out="e")
    s = b.op("Shape", [e], out="s")
    r = b.op("Relu", [e], out="r")
    big = b.op("Greater", [r, b.weight("t", (8,))], out="big")
    g = b.output(b.op("Neg", [r], out="y"), big, s).build()
    red = reduced_floats(g, ids(g), "bf16")
    check_boundaries(g, red, ids(g) - {"big", "s"}, BF16)
    node = {node_id(n): n for n in red.nodes}
    assert node["s"].inputs == ("e",) and red.values["s"].dtype == I64  # no Cast before Shape
    assert red.values["big"].dtype == TensorProto.BOOL
    assert node["big"].inputs == ("r.fp32", "t")  # a comparison reads exactly: the reduced value cast back
    assert red.values["ids"].dtype == I64 and node["e"].inputs[1] == "ids"
    valid(red)


def test_ops_that_sum_over_an_axis_stay_fp32_and_fp16_keeps_exp():
    b = GraphBuilder("kept", seed=4)
    x = b.input("x", (2, 8))
    n = b.op("LayerNormalization", [x, b.weight("g", (8,)), b.weight("b", (8,))], axis=-1, out="n")
    e = b.op("Exp", [b.op("MatMul", [n, b.weight("w", (8, 8))], out="m")], out="e")
    g = b.output(b.op("Softmax", [e], out="y")).build()
    for dtype, kept in (("bf16", {"n", "y"}), ("fp16", {"n", "e", "y"})):
        r = reduced_floats(g, ids(g), dtype)
        check_boundaries(g, r, ids(g) - kept, ELEM[dtype])
        assert r.values["n"].dtype == F and r.values["y"].dtype == F
        valid(r)


def test_an_op_whose_output_type_an_attribute_fixes_stays_fp32():
    b = GraphBuilder("typed", seed=5)
    x = b.input("x", (2, 3), dtype=I64)
    c = b.op("Cast", [x], to=F, out="c")
    g = b.output(b.op("Relu", [c], out="y")).build()
    r = reduced_floats(g, ids(g), "bf16")
    assert r.values["c"].dtype == F and r.nodes[0].attr("to") == F
    check_boundaries(g, r, {"y"}, BF16)


def test_bad_dtypes_are_refused_in_one_line_and_nothing_asked_is_the_graph_itself():
    g = mlp()
    for bad in ("fp32", "int8", TensorProto.DOUBLE):
        with pytest.raises(GspoError, match="reduced floats are fp16 or bf16"):
            reduced_floats(g, ids(g), bad)
    assert reduced_floats(g, set(), "bf16") is g
    assert reduced_floats(g, {"no such node"}, "bf16") is g
    assert reduced_floats(g, ids(g), BF16).key == reduced_floats(g, ids(g), "bf16").key


def test_the_schedule_and_placement_are_dropped():
    import dataclasses

    g = mlp()
    g = dataclasses.replace(g, extras=dataclasses.replace(g.extras, schedule="{}", placement="{}"))
    r = reduced_floats(g, {"m1"}, "bf16")
    assert r.extras.schedule == "" and r.extras.placement == ""


# ---------------------------------------------------------------------- the opset
def conv(opset: int = 17, reduce_mean: bool = False) -> Graph:
    b = GraphBuilder("conv", opset=opset, seed=6)
    x = b.input("x", (1, 3, 8, 8))
    y = b.op("MaxPool", [b.op("Conv", [x, b.weight("w", (4, 3, 3, 3))], out="c")], kernel_shape=[2, 2], out="p")
    if reduce_mean:
        y = b.op("ReduceMean", [y], axes=[2, 3], out="r")
    return b.output(y).build()


def test_bf16_of_a_conv_raises_the_opset_to_22_and_fp16_does_not():
    g = conv()
    r = reduced_floats(g, ids(g), "bf16")
    assert r.opset == 22 and r.values["c"].dtype == BF16 and r.values["p.bf16"].dtype == BF16
    valid(r)
    assert reduced_floats(g, ids(g), "fp16").opset == 17
    mm = mlp()
    assert reduced_floats(mm, ids(mm), "bf16").opset == 17  # MatMul takes bfloat16 from opset 13


def test_a_loaded_models_ir_version_is_raised_with_the_opset():
    import dataclasses

    g = conv()
    for ir_version, opset, saved_ir in ((8, 22, 10), (11, 22, 11), (3, 17, None)):
        old = dataclasses.replace(g, extras=dataclasses.replace(g.extras, ir_version=ir_version))
        r = reduced_floats(old, ids(g), "bf16")
        assert r.opset == opset
        if saved_ir:
            assert onnx.load_from_string(ir.serialize(r)).ir_version == saved_ir
        else:
            assert r is old  # before IR 4 the opset is left as it is (Conv takes no bfloat16 at 17)


def test_the_opset_is_not_raised_where_an_op_would_read_its_node_otherwise():
    g = conv(reduce_mean=True)  # ReduceMean's axes become an input at opset 18
    assert raised_opset(g, g.nodes, BF16) == 17
    r = reduced_floats(g, ids(g), "bf16")
    assert r is g  # Conv and MaxPool take no bfloat16 at 17, ReduceMean is kept fp32
    assert float_kernels(g, "bf16") == frozenset() and float_kernels(g, "fp16") == {"c"}


# ---------------------------------------------------------------------- TF32 and the kinds
def test_tf32_is_a_mark_in_the_metadata_that_survives_a_save():
    g = mlp()
    assert not wants_tf32(g)
    marked = with_tf32(g)
    assert wants_tf32(marked) and marked.nodes == g.nodes and (TF32_KEY, "tf32") in marked.extras.metadata
    assert wants_tf32(ir.load_bytes(ir.serialize(marked)))
    assert not wants_tf32(with_tf32(marked, False))


def test_torch_kinds_touch_the_pieces_with_float_products_and_build_reduced_floats():
    g = mlp()
    kinds, notes = torch_kinds(g, ["fp32", "fp16", "bf16", "tf32", "int8", "bf16"], refused=())
    assert [(k.name, k.precision, k.backend) for k in kinds] == [
        ("fp16 on torch", "fp16", "torch"), ("bf16 on torch", "bf16", "torch"), ("tf32 on torch", "tf32", "torch")]
    assert notes == []
    fp16, bf16, tf32 = kinds
    for kind in (fp16, bf16):
        assert kind.touches({"m1", "a1"}) and kind.touches({"m2"}) and not kind.touches({"a1", "h", "y"})
        assert kind.build(frozenset({"m1", "a1"})).key == reduced_floats(g, {"m1", "a1"}, kind.precision).key
        assert kind.build(frozenset()) is g
    # TF32 is one switch: one piece, the first product's, decides it
    assert tf32.touches({"m1"}) and not tf32.touches({"m2", "h"})
    assert wants_tf32(tf32.build(frozenset({"m1", "a1"}))) and not wants_tf32(tf32.build(frozenset({"m2"})))
    assert tf32.build(frozenset(ids(g))).nodes == g.nodes


def test_the_nodes_the_torch_runtime_refuses_stay_fp32_in_the_kinds():
    g = mlp()
    kinds, _ = torch_kinds(g, ["bf16"], refused={"m1", "h"})
    bf16 = kinds[0]
    assert not bf16.touches({"m1"}) and bf16.touches({"m2"})
    r = bf16.build(frozenset(ids(g)))
    assert r.key == reduced_floats(g, ids(g) - {"m1", "h"}, "bf16").key
    assert r.values["m1"].dtype == F and r.values["h"].dtype == F and r.values["a1"].dtype == BF16


def test_a_graph_without_float_products_gets_a_note_per_precision():
    b = GraphBuilder("relu")
    g = b.output(b.op("Relu", [b.input("x", (2, 2))], out="y")).build()
    kinds, notes = torch_kinds(g, ["fp16", "bf16", "tf32"], refused=())
    assert kinds == [] and len(notes) == 3
    assert notes[1] == "bf16: no float32 MatMul, Gemm or Conv the torch runtime could run at bf16"
    assert torch_kinds(conv(reduce_mean=True), ["bf16"], refused=())[1][0].startswith("bf16: no float32")
