"""Which steps of a converted program read values back to the host
(:mod:`gspo.runtime.torchrt.probe`, :attr:`Program.needs_host`): decided by what conversion
folded and what the data decides, not by the shapes onnx's inference declared."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from onnx import TensorProto  # noqa: E402

from gspo import ir  # noqa: E402
from gspo.ir import Graph, Node, Value  # noqa: E402
from gspo.runtime import make_session, run  # noqa: E402
from gspo.runtime.torchrt.convert import convert  # noqa: E402
from tests.runtime.torchrt.test_convert import count_calls, literal, rand  # noqa: E402

F, I64 = TensorProto.FLOAT, TensorProto.INT64
CPU = torch.device("cpu")
AXIS0 = (ir.Attr("axis", 2, 0),)


def folded_expand() -> Graph:
    """``y = Relu(Expand(x, Concat([2], Shape(x))))`` with every shape after ``x`` left open, as
    onnx's inference leaves them when it does not propagate values: conversion folds the target."""
    x = Value("x", F, (3, 4))
    nodes = (Node("Shape", ("x",), (Value("s", I64, None),), name="shape"),
             Node("Concat", ("two", "s"), (Value("target", I64, None),), AXIS0, name="concat"),
             Node("Expand", ("x", "target"), (Value("e", F, None),), name="expand"),
             Node("Relu", ("e",), (Value("y", F, None),), name="relu"))
    return Graph(inputs=(x,), outputs=(nodes[-1].outputs[0],), nodes=nodes,
                 weights={"two": literal(np.array([2], np.int64))}).check()


def range_of_data(declared: tuple | None) -> Graph:
    """``y = Range(0, n, 1)``: its length is the value of input ``n`` (``declared``: the shape
    the graph declares for ``y``)."""
    n = Value("n", I64, ())
    node = Node("Range", ("zero", "n", "one"), (Value("y", I64, declared),), name="range")
    return Graph(inputs=(n,), outputs=node.outputs, nodes=(node,),
                 weights={"zero": literal(np.array(0, np.int64)), "one": literal(np.array(1, np.int64))}).check()


def open_input() -> Graph:
    x = Value("x", F, ("N", 4))
    node = Node("Relu", ("x",), (Value("y", F, ("N", 4)),), name="relu")
    return Graph(inputs=(x,), outputs=node.outputs, nodes=(node,), weights={}).check()


def test_an_expand_to_a_folded_shape_reads_nothing_though_onnx_left_its_shapes_open():
    g = folded_expand()
    program = convert(g, CPU)
    assert not program.fallbacks and program.steps == 2, "Shape and Concat are folded: Expand and Relu run"
    assert program.host_reads == [] and not program.needs_host, "the program can be captured in a CUDA graph"
    x = rand(3, 4)
    out = program.run({"x": x})["y"]
    np.testing.assert_array_equal(out, np.broadcast_to(np.maximum(x, 0), (2, 3, 4)))
    np.testing.assert_array_equal(out, run(make_session(g), {"x": x})["y"])


@pytest.mark.parametrize("declared", [None, (5,)], ids=["open", "declared static"])
def test_a_range_whose_limit_is_data_reads_it_back(declared):
    program = convert(range_of_data(declared), CPU)
    assert not program.fallbacks and program.needs_host
    assert len(program.host_reads) == 1 and program.host_reads[0].startswith("Range 'range': a value of the data")
    np.testing.assert_array_equal(program.run({"n": np.array(5, np.int64)})["y"], np.arange(5))


def test_reads_after_a_read_are_found_where_the_declared_shapes_allow():
    """A NonZero (its output's shape is its count) whose output shape the graph declares, then
    a Range whose limit is data: both named, in order."""
    x, n = Value("x", F, (4,)), Value("n", I64, ())
    nodes = (Node("NonZero", ("x",), (Value("nz", I64, (1, 2)),), name="nonzero"),
             Node("Range", ("zero", "n", "one"), (Value("r", I64, None),), name="range"))
    g = Graph(inputs=(x, n), outputs=(nodes[0].outputs[0], nodes[1].outputs[0]), nodes=nodes,
              weights={"zero": literal(np.array(0, np.int64)), "one": literal(np.array(1, np.int64))}).check()
    reads = convert(g, CPU).host_reads
    assert [r.split(":")[0] for r in reads] == ["NonZero 'nonzero'", "Range 'range'"]


def test_an_input_of_open_shape_is_a_host_read():
    program = convert(open_input(), CPU)
    assert program.needs_host and "input 'x'" in program.host_reads[0]


def test_the_probe_runs_once(monkeypatch):
    counts = count_calls(monkeypatch, "Expand", "Relu")
    program = convert(folded_expand(), CPU)
    assert not program.needs_host and not program.needs_host and program.host_reads == []
    assert counts == {"Expand": 1, "Relu": 1}, "one run of the steps on fake tensors, whatever is asked"


def range_of_a_shape(first: str = "Relu") -> Graph:
    """``y = Range(0, Shape(first(x))[-1], 1)``, every shape after ``x`` left open: ``Relu``'s
    shape follows from ``x``'s (conversion folds the limit), ``NonZero``'s from its data."""
    x = Value("x", F, (2, 3))
    nodes = (Node(first, ("x",), (Value("r", I64 if first == "NonZero" else F, None),), name="first"),
             Node("Shape", ("r",), (Value("s", I64, None),), name="shape"),
             Node("Gather", ("s", "last"), (Value("d", I64, None),), AXIS0, name="gather"),
             Node("Range", ("zero", "d", "one"), (Value("y", I64, None),), name="range"))
    return Graph(inputs=(x,), outputs=(nodes[-1].outputs[0],), nodes=nodes,
                 weights={"zero": literal(np.array(0, np.int64)), "one": literal(np.array(1, np.int64)),
                          "last": literal(np.array(-1, np.int64))}).check()


def test_the_shape_of_a_value_onnx_left_open_is_folded_once_the_inputs_shapes_are_fixed():
    """As in a BERT exported by torchscript: a Range whose limit is the Shape of a LayerNorm's output."""
    g = range_of_a_shape("Relu")
    program = convert(g, CPU)
    assert program.host_reads == [] and not program.needs_host
    x = rand(2, 3)
    np.testing.assert_array_equal(program.run({"x": x})["y"], np.arange(3))
    np.testing.assert_array_equal(program.run({"x": x})["y"], run(make_session(g), {"x": x})["y"])


def test_the_shape_of_a_value_the_data_decides_is_not_folded():
    program = convert(range_of_a_shape("NonZero"), CPU)
    assert [r.split(":")[0] for r in program.host_reads] == ["NonZero 'first'"]
    for x, count in ((np.array([[1, 0, 2], [0, 0, 3]], np.float32), 3), (np.ones((2, 3), np.float32), 6)):
        np.testing.assert_array_equal(program.run({"x": x})["y"], np.arange(count))
