"""Loading and saving: bad input is a one-line error, good input round-trips."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from gspo import ir
from gspo.errors import GspoError, InputShapeError, ModelLoadError, UnsupportedModelError
from gspo.ir.onnx_io import MAX_IR_VERSION, SCHEDULE_KEY, STREAM_KEY, from_model
from gspo.outputs import OutputError
from gspo.runtime import make_session, run
from tests.helpers import branchy, onnx_model, random_array, relu_model


def _write(tmp_path, model, name="m.onnx"):
    p = tmp_path / name
    p.write_bytes(model.SerializeToString())
    return p


# ------------------------------------------------------------------ bad input
def test_missing_file(tmp_path):
    with pytest.raises(ModelLoadError, match="no such file"):
        ir.load(tmp_path / "nope.onnx")


def test_directory(tmp_path):
    with pytest.raises(ModelLoadError, match="is a directory"):
        ir.load(tmp_path)


def test_not_onnx(tmp_path):
    p = tmp_path / "x.onnx"
    p.write_text("hello, I am a text file\n")
    with pytest.raises(ModelLoadError, match="not an ONNX model"):
        ir.load(p)


def test_empty_file(tmp_path):
    p = tmp_path / "x.onnx"
    p.write_bytes(b"")
    with pytest.raises(ModelLoadError, match="not an ONNX model"):
        ir.load(p)


def test_names_that_are_not_utf8(tmp_path):
    data = bytearray(ir.serialize(branchy()))
    i = data.index(b"Relu")
    data[i] = 0xE6  # the op type's first byte, now an invalid UTF-8 lead byte
    p = tmp_path / "u.onnx"
    p.write_bytes(bytes(data))
    with pytest.raises(ModelLoadError, match="not valid UTF-8"):
        ir.load(p)


def test_truncated_protobuf(tmp_path):
    data = ir.serialize(branchy())
    p = tmp_path / "t.onnx"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match="not an ONNX model"):
        ir.load(p)


def test_model_failing_the_checker(tmp_path):
    bad = onnx_model(
        [helper.make_node("Relu", ["x"], ["y"], alpha=1.0)],  # Relu has no attribute alpha
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    with pytest.raises(ModelLoadError, match="fails the ONNX checker"):
        ir.load(_write(tmp_path, bad))


def test_unsupported_old_opset(tmp_path):
    with pytest.raises(UnsupportedModelError, match="opset 6 is not supported"):
        ir.load(_write(tmp_path, relu_model(opset=6, ir_version=3)))


def test_dynamic_dims_get_defaults_unless_pinned(tmp_path):
    p = _write(tmp_path, relu_model(shape=("batch", "seq")))
    g = ir.load(p)
    assert g.inputs[0].shape == (1, 128) and g.outputs[0].shape == (1, 128)
    assert [(d.input, d.axis, d.symbol, d.value) for d in g.extras.defaulted] == [("x", 0, "batch", 1), ("x", 1, "seq", 128)]
    g = ir.load(p, {"x": (4, 3)})
    assert g.inputs[0].shape == (4, 3) and g.outputs[0].shape == (4, 3)
    assert g.extras.defaulted == ()


def test_input_shape_naming_an_unknown_input(tmp_path):
    with pytest.raises(InputShapeError, match="'y', which is not a graph input"):
        ir.load(_write(tmp_path, relu_model()), {"y": (2, 3)})


def test_input_shape_contradicting_the_model(tmp_path):
    with pytest.raises(InputShapeError, match="fixes it at 2"):
        ir.load(_write(tmp_path, relu_model()), {"x": (5, 3)})
    with pytest.raises(InputShapeError, match="rank"):
        ir.load(_write(tmp_path, relu_model()), {"x": (2, 3, 1)})


@pytest.mark.parametrize("spec", ["x", "x=", "=1,2", "x=1,a", "x=-1,2"])
def test_bad_input_shape_syntax(spec):
    if spec == "x=":
        assert ir.parse_input_shapes([spec]) == {"x": ()}
        return
    with pytest.raises(InputShapeError, match="bad --input-shape"):
        ir.parse_input_shapes([spec])


def _external_model(tmp_path, location: str):
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    w.data_location = TensorProto.EXTERNAL
    w.ClearField("raw_data")
    w.external_data.add(key="location", value=location)
    return onnx_model(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        initializers=[w],
    )


@pytest.mark.parametrize("location", ["../secret.bin", "/etc/passwd", "sub/../../secret.bin"])
def test_external_data_outside_the_model_directory_is_refused(tmp_path, location):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.full(6, 7, np.float32).tobytes())
    models = tmp_path / "models"
    models.mkdir()
    p = _write(models, _external_model(models, location))
    with pytest.raises(ModelLoadError, match="points outside the model's directory; refused"):
        ir.load(p)


def test_external_data_inside_the_directory_loads(tmp_path):
    (tmp_path / "w.bin").write_bytes(np.full(6, 2, np.float32).tobytes())
    g = ir.load(_write(tmp_path, _external_model(tmp_path, "w.bin")))
    out = run(make_session(g), {"x": np.zeros((2, 3), np.float32)})
    np.testing.assert_array_equal(out["y"], np.full((2, 3), 2, np.float32))


def test_external_data_file_missing(tmp_path):
    with pytest.raises(ModelLoadError, match="is missing"):
        ir.load(_write(tmp_path, _external_model(tmp_path, "gone.bin")))


def test_save_refuses_to_overwrite(tmp_path):
    p = tmp_path / "out.onnx"
    p.write_bytes(b"precious")
    with pytest.raises(OutputError, match="exists; not overwritten"):
        ir.save(branchy(), p)
    assert p.read_bytes() == b"precious"
    ir.save(branchy(), p, overwrite=True)
    assert [n.op_type for n in ir.load(p).nodes] == ["Conv", "Conv", "Add", "Relu"]


# ------------------------------------------------------------- IR version
def test_new_models_get_an_ir_version_onnxruntime_reads():
    model = ir.to_model(branchy())
    assert model.ir_version <= MAX_IR_VERSION
    make_session(model.SerializeToString())


def _onnxruntime_reads(ir_version: int) -> bool:
    try:
        make_session(relu_model(ir_version=ir_version).SerializeToString())
    except GspoError:
        return False
    return True


@pytest.mark.skipif(
    _onnxruntime_reads(14), reason="this onnxruntime reads IR 14 (1.32 does; 1.31, pinned, does not)"
)
def test_onnxruntime_refusing_a_newer_ir_is_a_one_line_error():
    # the pitfall: onnx 1.23 stamps IR 14, onnxruntime 1.31 refuses anything above 13
    with pytest.raises(GspoError, match="cannot load"):
        make_session(relu_model(ir_version=14).SerializeToString())


def test_ir_14_from_onnx_123_is_clamped(tmp_path):
    m = relu_model(ir_version=14)
    g = ir.load(_write(tmp_path, m))
    saved = ir.to_model(g)
    assert saved.ir_version == MAX_IR_VERSION
    out = run(make_session(saved.SerializeToString()), {"x": -np.ones((2, 3), np.float32)})
    np.testing.assert_array_equal(out["y"], np.zeros((2, 3), np.float32))


def test_old_ir_version_is_kept(tmp_path):
    g = ir.load(_write(tmp_path, relu_model(opset=9, ir_version=3)))
    assert ir.to_model(g).ir_version == 3


# ------------------------------------------------------ round trip details
def test_stream_ids_and_schedule_go_into_metadata():
    g = branchy()
    g = g.with_nodes(tuple(n.replace(stream=i % 2) for i, n in enumerate(g.nodes)))
    schedule = {"streams": 2, "events": [[0, 1]]}
    model = ir.to_model(g, schedule)
    streams = [{p.key: p.value for p in n.metadata_props}.get(STREAM_KEY) for n in model.graph.node]
    assert streams == ["0", "1", "0", "1"]
    meta = {p.key: p.value for p in model.metadata_props}
    assert json.loads(meta[SCHEDULE_KEY]) == schedule
    back = ir.load_bytes(model.SerializeToString())
    assert [n.stream for n in back.nodes] == [0, 1, 0, 1]
    make_session(model.SerializeToString())


def test_round_trip_keeps_names_and_key():
    g = branchy()
    back = ir.load_bytes(ir.serialize(g))
    assert [n.name for n in back.nodes] == [n.name for n in g.nodes]
    assert [v.name for v in back.outputs] == [v.name for v in g.outputs]
    again = ir.load_bytes(ir.serialize(back))
    assert again.key == back.key
    assert ir.serialize(again) == ir.serialize(back)


def _if_and_custom_model():
    then_g = helper.make_graph(
        [helper.make_node("Add", ["x", "bias"], ["t"])], "then", [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Sub", ["x", "bias"], ["e"])], "else", [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])],
    )
    bias = numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "bias")
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["cond"]),
        helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g),
        helper.make_node("Relu", ["y"], ["z"]),
    ]
    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")
    return onnx_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])],
        initializers=[bias, zero],
    )


def test_if_node_is_opaque_and_round_trips_unchanged():
    m = _if_and_custom_model()
    g = ir.load_bytes(m.SerializeToString())
    if_node = next(n for n in g.nodes if n.op_type == "If")
    assert if_node.is_opaque
    assert set(if_node.implicit_inputs) == {"x", "bias"}  # captured from the outer scope
    assert set(g.consumers["bias"]) == {if_node}
    saved = ir.to_model(g)
    assert saved.graph.node[2].SerializeToString() == m.graph.node[2].SerializeToString()
    for x in (np.array([1.0, 1.0], np.float32), np.array([-3.0, 1.0], np.float32)):
        a = run(make_session(m.SerializeToString()), {"x": x})
        b = run(make_session(saved.SerializeToString()), {"x": x})
        np.testing.assert_array_equal(a["z"], b["z"])


def test_custom_domain_node_is_opaque():
    node = helper.make_node("MyOp", ["x"], ["y"], domain="com.example", alpha=1.5)
    m = onnx_model(
        [node],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    g = ir.load_bytes(m.SerializeToString())
    assert g.nodes[0].is_opaque and g.nodes[0].domain == "com.example"
    assert ir.to_model(g).graph.node[0].SerializeToString() == node.SerializeToString()


def test_weights_round_trip_bit_exact():
    w = random_array((3, 4))
    m = onnx_model(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        initializers=[numpy_helper.from_array(w, "w")],
    )
    saved = ir.to_model(ir.load_bytes(m.SerializeToString()))
    assert saved.graph.initializer[0].SerializeToString() == m.graph.initializer[0].SerializeToString()


def test_large_models_save_with_external_data(tmp_path, monkeypatch):
    monkeypatch.setattr(ir.onnx_io, "_EXTERNAL_THRESHOLD", 100)
    p = ir.save(branchy(channels=8), tmp_path / "big.onnx")
    assert (tmp_path / "big.onnx.data").exists()
    assert os.path.getsize(p) < os.path.getsize(tmp_path / "big.onnx.data")
    g = ir.load(p)
    feeds = {"x": random_array((1, 8, 8, 8))}
    np.testing.assert_array_equal(
        run(make_session(g), feeds)[g.outputs[0].name],
        run(make_session(branchy(channels=8)), feeds)[g.outputs[0].name],
    )


# ------------------------------------------------------------ bad dimensions
def _relu_declared(dim, value_info_dim=None):
    vi = [helper.make_tensor_value_info("t", TensorProto.FLOAT, [value_info_dim, 4])] if value_info_dim else []
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"]), helper.make_node("Relu", ["t"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [dim, 4])], value_info=vi)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_a_negative_dimension_is_dynamic_as_onnxruntime_reads_it(tmp_path):
    g = ir.load(_write(tmp_path, _relu_declared(-5)))
    assert g.inputs[0].shape == (1, 4) and [(d.input, d.axis) for d in g.extras.defaulted] == [("x", 0)]
    assert ir.load(_write(tmp_path, _relu_declared(-5)), {"x": (3, 4)}).inputs[0].shape == (3, 4)
    assert from_model(_relu_declared(2, value_info_dim=-3)).values["t"].shape == (2, 4)


def test_a_dimension_no_machine_holds_is_refused_naming_the_value_and_dimension(tmp_path):
    with pytest.raises(UnsupportedModelError, match=r"value 'x' of shape \[4611686018427387904, 4\].*dimension 0 "
                                                    r"is 4611686018427387904"):
        ir.load(_write(tmp_path, _relu_declared(2**62)))
