"""The range each integer input accepts, read off its consumers."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from gspo.ir.builder import GraphBuilder
from gspo.ir.onnx_io import from_model
from gspo.ir.ranges import DEFAULT_INT_RANGE, input_ranges

INT64 = TensorProto.INT64


def test_a_gathered_index_stays_below_the_table_size():
    b = GraphBuilder()
    ids = b.input("ids", (1, 8), INT64)
    b.output(b.op("Gather", [b.weight("table", (5, 4)), ids]))
    assert input_ranges(b.build()) == {"ids": (0, 5)}


def test_the_tightest_of_several_tables_through_value_keeping_ops():
    b = GraphBuilder()
    ids = b.input("token_type_ids", (1, 8), INT64)
    flat = b.op("Reshape", [ids, b.const("shape", np.array([8], np.int64))])
    b.output(b.op("Gather", [b.weight("types", (2, 4)), flat]))
    b.output(b.op("Gather", [b.weight("words", (100, 4)), ids]))
    cast = b.op("Cast", [ids], to=TensorProto.INT32)
    b.output(b.op("Gather", [b.weight("cols", (3, 7)), cast], axis=1))
    assert input_ranges(b.build()) == {"token_type_ids": (0, 2)}


def test_the_gathered_axis_counts():
    b = GraphBuilder()
    ids = b.input("ids", (2,), INT64)
    b.output(b.op("Gather", [b.weight("t", (100, 6)), ids], axis=-1))
    assert input_ranges(b.build()) == {"ids": (0, 6)}


def test_a_mask_read_as_a_condition_is_zero_or_one():
    b = GraphBuilder()
    m = b.input("m", (1, 8), INT64)
    cond = b.op("Cast", [m], to=TensorProto.BOOL)
    x = b.input("x", (1, 8))
    b.output(b.op("Where", [cond, x, b.op("Neg", [x])]))
    assert input_ranges(b.build()) == {"m": (0, 2)}


def test_a_mask_by_name_feeding_arithmetic_is_zero_or_one():
    b = GraphBuilder()
    m = b.input("attention_mask", (1, 8), INT64)
    b.output(b.op("Mul", [b.op("Cast", [m], to=TensorProto.FLOAT), b.input("x", (1, 8))]))
    assert input_ranges(b.build()) == {"attention_mask": (0, 2)}


def test_an_unconstrained_integer_gets_the_default_and_floats_are_left_out():
    b = GraphBuilder()
    n = b.input("n", (1,), INT64)
    b.output(b.op("Add", [n, n]))
    b.output(b.op("Relu", [b.input("x", (1, 2))]))
    assert input_ranges(b.build()) == {"n": DEFAULT_INT_RANGE}


def test_a_scalar_compared_with_a_constant_takes_it_and_ids_compared_with_padding_do_not():
    b = GraphBuilder()
    sr = b.input("sr", (), INT64)
    ids = b.input("ids", (1, 8), INT64)
    b.output(b.op("Equal", [sr, b.const("rate", np.array(16000, np.int64))]))
    b.output(b.op("Equal", [ids, b.const("pad", np.array(0, np.int64))]))
    assert input_ranges(b.build()) == {"sr": (16000, 16001), "ids": DEFAULT_INT_RANGE}


def test_a_scalar_compared_with_a_constant_node_takes_it():
    from tests.ir.control_flow import PINS, vad_model

    graph = from_model(vad_model(), PINS)  # sr == Constant(16000), the Constant node kept
    assert any(n.op_type == "Constant" for n in graph.nodes)
    assert input_ranges(graph)["sr"] == (16000, 16001)


def test_onnxruntime_fused_embedding_ids_stay_below_its_tables_and_its_mask_is_zero_or_one():
    """com.microsoft EmbedLayerNormalization (onnxruntime's fused BERT embedding) is opaque to
    gspo, but its ids index its word and segment tables: random ids beyond them made
    onnxruntime fail with 'input index out of range'."""
    from onnx import TensorProto, helper

    from gspo.ir import load_bytes
    from tests.kinds import MS, _weights

    h = 8
    ids = [helper.make_tensor_value_info(n, TensorProto.INT32, [1, 4]) for n in ("input_ids", "segment_ids", "m")]
    node = helper.make_node("EmbedLayerNormalization", ["input_ids", "segment_ids", "word", "pos", "seg", "gamma",
                                                        "beta", "m"], ["emb", "mask_index"], domain=MS)
    inits = _weights([("word", (30, h)), ("pos", (16, h)), ("seg", (2, h)), ("gamma", (h,)), ("beta", (h,))])
    g = helper.make_graph([node], "emb", ids, [helper.make_tensor_value_info("emb", TensorProto.FLOAT, [1, 4, h])],
                          initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    m.ir_version = 8
    assert input_ranges(load_bytes(m.SerializeToString())) == {"input_ids": (0, 30), "segment_ids": (0, 2),
                                                               "m": (0, 2)}
