"""The front end: exporters' shape arithmetic and Constant weights made plain, dynamic
dimensions given stated defaults, and kept dynamic where the graph allows it."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gspo import ir
from gspo.ir import frontend, pinning
from gspo.ir.protos import is_understood
from gspo.rules.fold import FoldBatchNorm
from gspo.runtime import make_session, run
from tests.helpers import onnx_model
from tests.kinds import contrib_model

F = TensorProto.FLOAT


def _const(name, array):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(array), name + "_v"))


def shape_arithmetic_model():
    """``Reshape(x, Concat(Slice(Shape(x), 0, 1), ConstantOfShape([1], -1)))`` behind a Relu, batch
    dynamic: an exporter's flatten, whose shape plain ONNX shape inference cannot work out (it
    does not propagate ConstantOfShape's value)."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Shape", ["r"], ["s"]),
        _const("zero", np.array([0], np.int64)),
        _const("one", np.array([1], np.int64)),
        helper.make_node("Slice", ["s", "zero", "one"], ["b1"]),
        helper.make_node("ConstantOfShape", ["one"], ["m1"], value=numpy_helper.from_array(np.array([-1], np.int64))),
        helper.make_node("Concat", ["b1", "m1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["r", "shape"], ["flat"]),
        helper.make_node("Neg", ["flat"], ["y"]),
    ]
    return onnx_model(nodes, [helper.make_tensor_value_info("x", F, ["batch", 3, 4, 4])],
                      [helper.make_tensor_value_info("y", F, ["batch", 48])])


def _write(tmp_path, model, name="m.onnx"):
    p = tmp_path / name
    p.write_bytes(model.SerializeToString())
    return p


def test_shape_arithmetic_becomes_static_and_the_graph_stays_dynamic(tmp_path):
    p = _write(tmp_path, shape_arithmetic_model())
    plain = ir.load(p, plain=True)
    assert all(v.is_static for n in plain.nodes for v in n.outputs)
    assert [d.value for d in plain.extras.defaulted] == [1]
    assert plain.extras.dynamic_io  # the folded graph still computes its shapes from x
    dynamic = make_session(ir.serialize(plain, keep_dynamic=True))
    out = run(dynamic, {"x": np.ones((3, 3, 4, 4), np.float32)})  # batch 3 runs too
    assert out["y"].shape == (3, 48)


def test_without_the_front_end_the_reshape_has_no_static_shape(tmp_path):
    g = ir.load(_write(tmp_path, shape_arithmetic_model()))
    flat = g.values["flat"]
    assert not flat.is_static  # what made optimize stop before: "input 'flat' has no static shape"


def test_arithmetic_on_a_pinned_dimension_is_folded_into_constants(tmp_path):
    """When only pinning gives static shapes, the folded graph is specialised to the pins."""
    m = shape_arithmetic_model()
    # the extent comes out of a Range over the dynamic dimension: needs the value of `b`
    m.graph.node.extend([
        _const("zero_s", np.array(0, np.int64)),
        _const("one_s", np.array(1, np.int64)),
        helper.make_node("Gather", ["s", "zero_s"], ["b"], axis=0),
        helper.make_node("Range", ["zero_s", "b", "one_s"], ["idx"]),
        helper.make_node("Cast", ["idx"], ["idxf"], to=F),
        helper.make_node("ReduceSum", ["idxf"], ["total"], keepdims=0),
    ])
    m.graph.output.append(helper.make_tensor_value_info("total", F, []))
    plain = ir.load(_write(tmp_path, m), plain=True)
    assert all(v.is_static for n in plain.nodes for v in n.outputs)
    assert not plain.extras.dynamic_io  # the output will be fixed at the defaults


def test_weights_in_constant_nodes_become_initializers_that_rules_see(tmp_path):
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    stats = [np.ones(4, np.float32), np.zeros(4, np.float32), np.zeros(4, np.float32), np.ones(4, np.float32)]
    nodes = [_const("w", w)] + [_const(n, v) for n, v in zip(("g", "b", "m", "v"), stats)] + [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["y"]),
    ]
    model = onnx_model(nodes, [helper.make_tensor_value_info("x", F, [1, 3, 8, 8])],
                       [helper.make_tensor_value_info("y", F, [1, 4, 8, 8])])
    p = _write(tmp_path, model)
    assert not list(FoldBatchNorm().match(ir.load(p)))
    plain = ir.load(p, plain=True)
    assert [n.op_type for n in plain.nodes] == ["Conv", "BatchNormalization"]
    assert len(list(FoldBatchNorm().match(plain))) == 1


def test_small_constant_of_shape_is_folded_into_pads(tmp_path):
    """NASNet-style exports build Pad's pads with ConstantOfShape and Concat."""
    nodes = [
        _const("n", np.array([4], np.int64)),
        helper.make_node("ConstantOfShape", ["n"], ["zeros"], value=numpy_helper.from_array(np.array([0], np.int64))),
        _const("hw", np.array([1, 1, 1, 1], np.int64)),
        helper.make_node("Concat", ["zeros", "hw"], ["pads"], axis=0),
        helper.make_node("Pad", ["x", "pads"], ["y"]),
    ]
    model = onnx_model(nodes, [helper.make_tensor_value_info("x", F, [1, 2, 4, 4])],
                       [helper.make_tensor_value_info("y", F, [1, 2, 6, 6])])
    plain = ir.load(_write(tmp_path, model), plain=True)
    assert [n.op_type for n in plain.nodes] == ["Pad"]
    assert plain.values["y"].shape == (1, 2, 6, 6)
    np.testing.assert_array_equal(plain.weights[plain.nodes[0].inputs[1]].evaluate(plain.store),
                                  [0, 0, 0, 0, 1, 1, 1, 1])


def test_unknown_ops_pass_through_untouched(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("MyOp", ["r"], ["y"], domain="my.domain", alpha=2.0)]
    model = onnx_model(nodes, [helper.make_tensor_value_info("x", F, [1, 4])],
                       [helper.make_tensor_value_info("y", F, [1, 4])])
    model.opset_import.append(helper.make_opsetid("my.domain", 1))
    plain = ir.load(_write(tmp_path, model), plain=True)
    custom = [n for n in plain.nodes if n.op_type == "MyOp"]
    assert len(custom) == 1 and custom[0].is_opaque
    assert onnx.NodeProto.FromString(custom[0].opaque).attribute[0].f == 2.0


def test_defaults_follow_the_symbol_and_say_how_to_pin():
    vis = [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "sequence"]),
           helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "sequence"]),
           helper.make_tensor_value_info("image", F, ["n", 3, "h", "w"])]
    pins, defaulted = pinning.default_pins(vis, {"image": (2, 3, 32, 32)})
    assert pins == {"ids": (1, 128), "mask": (1, 128)}
    assert {(d.symbol, d.value) for d in defaulted} == {("batch", 1), ("sequence", 128)}
    line = pinning.describe_defaults(defaulted, pins)
    assert line.startswith("dynamic dimensions set to their defaults (batch=1, sequence=128)")
    assert "--input-shape ids=1,128 --input-shape mask=1,128" in line


def test_a_folding_failure_keeps_the_model_as_given(monkeypatch):
    import onnxscript.optimizer as oo

    def broken(*a, **k):
        raise RuntimeError("folding exploded")

    monkeypatch.setattr(oo, "fold_constants_ir", broken)
    model = shape_arithmetic_model()
    assert frontend.fold(model) is model


@pytest.mark.parametrize("name", ["squeezenet", "inception_v3"])
def test_zoo_models_keep_their_operators(name, tmp_path):
    """Plain models (the zoo's) come out of the front end with the same compute (inference
    Dropout, an identity, goes), in the same order."""
    from gspo.zoo import build

    g = build(name, "tiny")
    p = tmp_path / "z.onnx"
    ir.save(g, p)
    assert [n.op_type for n in ir.load(p, plain=True).nodes] == [n.op_type for n in g.nodes if n.op_type != "Dropout"]


def _if_model():
    """``If(sum(x) > 0, Relu(x), Neg(x))``, no node named, its branches' nodes neither."""
    def branch(op, out):
        return helper.make_graph([helper.make_node(op, ["x"], [out])], op.lower(), [],
                                 [helper.make_tensor_value_info(out, F, [2])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), helper.make_node("Greater", ["s", "z"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=branch("Relu", "t"), else_branch=branch("Neg", "e"))]
    return onnx_model(nodes, [helper.make_tensor_value_info("x", F, [2])], [helper.make_tensor_value_info("y", F, [2])],
                      [numpy_helper.from_array(np.zeros((), np.float32), "z")])


@pytest.mark.parametrize("kind", ["contrib", "if"])
def test_the_front_end_saves_opaque_nodes_as_they_were(tmp_path, kind):
    """onnx-ir's clean-up named every unnamed node (``node_1``), also inside an If's branches,
    named the optional outputs SkipLayerNormalization leaves out (``""`` became ``v``) and sorted
    an If's attributes: the saved optimized model's contrib nodes differed from the source's.
    An opaque node is kept as its NodeProto, so it is saved byte for byte as it was."""
    model = contrib_model() if kind == "contrib" else _if_model()
    plain = ir.load(_write(tmp_path, model), plain=True)
    saved = onnx.load(str(ir.save(plain, tmp_path / "out.onnx")))

    def opaque(m):
        return [n.SerializeToString() for n in m.graph.node if not is_understood(n)]

    assert len(opaque(model)) == (3 if kind == "contrib" else 1)
    assert opaque(saved) == opaque(model)
