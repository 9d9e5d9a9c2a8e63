"""Execution plans: segments per stream, and the constants each computes for itself."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from gspo import ir
from gspo.runtime import CpuExecutor, make_plan, make_session, run
from gspo.streams import Schedule
from tests.helpers import onnx_model


def _resize_model():
    """``Resize(x + y, sizes=Concat(Slice(Shape(x + y), 0, 2), [16, 16]))`` with the Slice's
    bounds in Constant nodes, as the TorchScript exporter writes F.interpolate(size=...)."""
    c = lambda name, v: helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(v, np.int64)))  # noqa: E731
    nodes = [
        c("zero", [0]), c("two", [2]), c("hw", [16, 16]),
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Neg", ["y"], ["b"]),
        helper.make_node("Add", ["a", "b"], ["s"]),
        helper.make_node("Shape", ["s"], ["shape"]),
        helper.make_node("Slice", ["shape", "zero", "two"], ["nc"]),
        helper.make_node("Concat", ["nc", "hw"], ["sizes"], axis=0),
        helper.make_node("Resize", ["s", "", "", "sizes"], ["out"], mode="nearest"),
    ]
    f = TensorProto.FLOAT
    return onnx_model(nodes, [helper.make_tensor_value_info(n, f, [1, 2, 8, 8]) for n in "xy"],
                      [helper.make_tensor_value_info("out", f, [1, 2, 16, 16])])


def test_a_segment_computes_the_constants_another_stream_made():
    """The Constant nodes run on stream 0, the Resize that needs their values on stream 1: the
    segment on stream 1 gets its own copies (as inputs, onnxruntime refused to load it:
    ``Number of elements of input 'sizes' (0) must be same as rank of input 'X' (4)``)."""
    g = ir.load_bytes(_resize_model().SerializeToString())
    schedule = Schedule((("zero", "two", "hw", "a"), ("b", "s", "shape", "nc", "sizes", "out")), (("a", "s"),))
    plan = make_plan(g, schedule)
    late = next(seg for seg in plan.segments if "out" in seg.outputs)
    assert not {"zero", "two", "hw"} & set(late.inputs)
    feeds = {n: np.random.default_rng(0).standard_normal((1, 2, 8, 8)).astype(np.float32) for n in "xy"}
    with CpuExecutor(g, schedule) as ex:
        got = ex.run(feeds)["out"]
    np.testing.assert_allclose(got, run(make_session(g), feeds)["out"])


def test_a_stream_of_constants_alone_gets_no_segment():
    """A segment of Constant nodes alone made onnxruntime fail to load it (SaveInitializedTensors)."""
    g = ir.load_bytes(_resize_model().SerializeToString())
    schedule = Schedule((("zero", "two", "hw"), ("a", "b", "s", "shape", "nc", "sizes", "out")), (("hw", "nc"),))
    plan = make_plan(g, schedule)
    assert {seg.stream for seg in plan.segments} == {1} and plan.num_events == 0
    feeds = {n: np.ones((1, 2, 8, 8), np.float32) for n in "xy"}
    with CpuExecutor(g, schedule) as ex:
        np.testing.assert_allclose(ex.run(feeds)["out"], run(make_session(g), feeds)["out"])


def _implied_through_constants_model():
    """``out = Relu(x) + Cast(Constant)``: the Relu and the constants on other streams than the Add."""
    f = TensorProto.FLOAT
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Constant", [], ["c1"], value=numpy_helper.from_array(np.array([2], np.int64))),
             helper.make_node("Cast", ["c1"], ["c2"], to=f),
             helper.make_node("Add", ["a", "c2"], ["out"])]
    return ir.load_bytes(onnx_model(nodes, [helper.make_tensor_value_info("x", f, [1, 64])],
                                    [helper.make_tensor_value_info("out", f, [1, 64])]).SerializeToString())


def _waits_for_the_relu(plan) -> bool:
    relu = next(seg for seg in plan.segments if "a" in seg.outputs)
    add = next(seg for seg in plan.segments if "out" in seg.outputs)
    return bool(set(relu.signals) & set(add.waits))


def test_an_event_from_a_constant_node_still_orders_the_ops_before_it():
    """Relu then Constant on stream 0, the Add on stream 1 waiting for the Constant only (the
    Relu before it is implied): the Constant runs in no segment, but its event must stay, or
    the Add reads the Relu's output before it exists (a race: 'onnxruntime failed on stream 1')."""
    g = _implied_through_constants_model()
    schedule = Schedule((("a", "c1", "c2"), ("out",)), (("c2", "out"),))
    plan = make_plan(g, schedule)
    assert plan.num_events == 1 and _waits_for_the_relu(plan)
    feeds = {"x": np.ones((1, 64), np.float32)}
    with CpuExecutor(g, schedule) as ex:
        for _ in range(20):
            np.testing.assert_allclose(ex.run(feeds)["out"], run(make_session(g), feeds)["out"])


def test_a_run_of_constants_alone_passes_on_what_it_was_told():
    """Relu then Constant on stream 0, the Cast of that constant on stream 2 (waiting for it),
    the Add on stream 1 waiting for the Cast: the Cast's run is left empty, and the Add must
    still wait for the Relu."""
    g = _implied_through_constants_model()
    schedule = Schedule((("a", "c1"), ("out",), ("c2",)), (("c1", "c2"), ("c2", "out")))
    plan = make_plan(g, schedule)
    assert _waits_for_the_relu(plan) and {seg.stream for seg in plan.segments} == {0, 1}


def _two_matmuls():
    """``y1 = x @ w1``, ``y2 = relu(x) @ w2``: x[1, 64]."""
    rng = np.random.default_rng(0)
    w = [numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), f"w{i}") for i in (1, 2)]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["y1"]), helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y2"])]
    f = TensorProto.FLOAT
    return onnx_model(nodes, [helper.make_tensor_value_info("x", f, [1, 64])],
                      [helper.make_tensor_value_info(n, f, [1, 64]) for n in ("y1", "y2")], w)


def test_openvinos_f32_ops_among_bf16_ones_are_one_segment_that_names_the_values_kept_f32():
    from gspo.streams import Placement

    g = ir.load_bytes(_two_matmuls().SerializeToString())
    placement = Placement.of({"y1": "openvino", "r": "openvino:bf16", "y2": "openvino:bf16"})
    plan = make_plan(g, Schedule.single(g), placement)
    assert [(s.backend, s.keep_f32) for s in plan.segments] == [("openvino:bf16", ("y1",))]
    ort_between = Placement.of({"y1": "openvino", "y2": "openvino:bf16"})  # the Relu on onnxruntime
    assert [(s.backend, s.keep_f32) for s in make_plan(g, Schedule.single(g), ort_between).segments] == [
        ("openvino", ()), ("ort", ()), ("openvino:bf16", ())]
