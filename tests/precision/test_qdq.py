"""Quantize once, judge by stripping: the QDQ graph with chosen nodes back in float computes
exactly the fp32 nodes there, prunes what nobody reads, and quantizes what quantizing with those
nodes excluded quantizes (the differences its docstring names aside)."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.ir.builder import GraphBuilder
from gspo.ir.weights import Literal
from gspo.precision.qdq import keep_float
from gspo.runtime import random_inputs
from gspo.runtime.quantize import WEIGHTED_OP_TYPES, activation_ranges, quantize_static
from gspo.runtime.session import SessionConfig, make_session, run
from gspo.streams import node_id

#: The weighted form OpenVINO's static kind quantizes (biases float, outputs only where read).
WEIGHTED = dict(op_types=WEIGHTED_OP_TYPES, quantize_bias=False, quantize_outputs=False)


def _cnn() -> Graph:
    """Conv -> Relu (fused by onnxruntime) -> Conv, a residual Add -> Relu -> MaxPool -> Gemm."""
    b = GraphBuilder("cnn", seed=1)
    x = b.input("x", (1, 3, 8, 8))
    r = b.op("Relu", [b.op("Conv", [x, b.weight("w1", (4, 3, 3, 3)), b.weight("b1", (4,), scale=0.1)],
                           pads=[1, 1, 1, 1])])
    c2 = b.op("Conv", [r, b.weight("w2", (4, 4, 3, 3)), b.weight("b2", (4,), scale=0.1)], pads=[1, 1, 1, 1])
    p = b.op("MaxPool", [b.op("Relu", [b.op("Add", [c2, r])])], kernel_shape=[2, 2], strides=[2, 2])
    return b.output(b.op("Gemm", [b.op("Flatten", [p]), b.weight("wg", (5, 64)), b.weight("bg", (5,), scale=0.1)],
                         transB=1, out="y")).build()


def _transformer() -> Graph:
    """LayerNorm -> Q, K, V projections (MatMul + bias Add) -> Softmax(Q K^T * s) V -> MatMul, residual."""
    b = GraphBuilder("attention", seed=2)
    x = b.input("x", (1, 6, 16))
    ln = b.op("LayerNormalization", [x, b.weight("g", (16,)), b.weight("be", (16,), scale=0.1)], axis=-1)
    q, k, v = (b.op("Add", [b.op("MatMul", [ln, b.weight(f"w{n}", (16, 16))]), b.weight(f"b{n}", (16,), scale=0.1)])
               for n in "qkv")
    scores = b.op("Mul", [b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 2, 1])]),
                          b.const("scale", np.array(0.25, np.float32))])
    att = b.op("MatMul", [b.op("Softmax", [scores], axis=-1), v])
    return b.output(b.op("Add", [b.op("MatMul", [att, b.weight("wo", (16, 16))]), x], out="y")).build()


def _data(graph: Graph):
    feeds = [random_inputs(graph, seed=s) for s in range(4)]
    return feeds, activation_ranges(graph, feeds)


def _ids(graph: Graph) -> list[str]:
    return [node_id(n) for n in graph.nodes]


def _outputs(graph: Graph, feeds) -> dict[str, np.ndarray]:
    return run(make_session(graph, SessionConfig()), feeds)


def _quantized_tensors(graph: Graph) -> set[str]:
    """The float tensors a QuantizeLinear reads (a graph output's by its own name)."""
    return {n.inputs[0].removesuffix("_QuantizeLinear_Input") for n in graph.nodes if n.op_type == "QuantizeLinear"}


def _array(graph: Graph, name: str) -> np.ndarray:
    return graph.weights[name].evaluate(graph.store)


MODELS = [(_cnn, {}), (_cnn, WEIGHTED), (_transformer, {}), (_transformer, WEIGHTED)]


@pytest.mark.parametrize("make, form", MODELS)
def test_every_node_kept_float_is_the_fp32_graph_bit_for_bit(make, form):
    g = make()
    feeds, ranges = _data(g)
    q = quantize_static(g, ranges, **form)
    assert any(n.op_type == "QuantizeLinear" for n in q.nodes)
    back = keep_float(q, g, _ids(g)).check()
    assert not any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in back.nodes)
    for f in feeds:
        want, got = _outputs(g, f), _outputs(back, f)
        assert all(np.array_equal(want[k], got[k]) for k in want)
    assert back.key == g.key


def _check_float(back: Graph, base: Graph, ids) -> None:
    """Each node of ``ids`` is ``base``'s own in ``back``, its weights ``base``'s values; nothing
    in ``back`` is unread."""
    nodes = {node_id(n): n for n in back.nodes}
    for i in ids:
        n, want = nodes[i], base.producers[i][0]
        assert n.op_type == want.op_type and n.attrs == want.attrs and n.outputs == want.outputs
        for got, name in zip(n.inputs, want.inputs):
            if base.is_weight(name):
                assert np.array_equal(_array(back, got), _array(base, name)), (i, name)
            else:
                assert got == name, (i, got, name)  # the float value, not a dequantized one
    read = {i for n in back.nodes for i in n.reads()} | set(back.output_names())
    assert all(any(v.name in read for v in n.outputs) for n in back.nodes)
    assert set(back.weights) <= read


@pytest.mark.parametrize("make, form", MODELS)
def test_the_nodes_kept_float_read_the_float_values_and_weights_and_nothing_unread_is_left(make, form):
    g = make()
    _, ranges = _data(g)
    q = quantize_static(g, ranges, **form)
    for ids in itertools.combinations(_ids(g), 2):
        _check_float(keep_float(q, g, ids).check(), g, ids)


def test_a_conv_kept_float_brings_back_the_relu_onnxruntime_fused_into_it():
    g = _cnn()
    _, ranges = _data(g)
    q = quantize_static(g, ranges)
    assert "relu" not in {node_id(n) for n in q.nodes if n.op_type == "Relu"}  # fused: the Conv writes "relu"
    back = keep_float(q, g, ["conv"])
    _check_float(back, g, ["conv", "relu"])
    reader = keep_float(q, g, ["conv_1"])  # reads the Relu's output: the Relu float, the first Conv quantized
    _check_float(reader, g, ["conv_1", "relu"])
    conv = reader.producers["conv"][0]
    assert conv.op_type == "Conv" and conv.inputs[0] != "x"


@pytest.mark.parametrize("make, form", MODELS)
def test_stripping_quantizes_what_excluding_quantizes(make, form):
    """Every tensor quantizing with the nodes excluded quantizes, stripping quantizes; where it
    quantizes more (a pass-through op or a reduced op left reading a dequantized value, see
    :mod:`gspo.precision.qdq`), the nodes kept float still read float values."""
    g = make()
    feeds, ranges = _data(g)
    full = quantize_static(g, ranges, **form)
    same = 0
    for ids in [*itertools.combinations(_ids(g), 1), *itertools.combinations(_ids(g), 2)]:
        try:
            excluded = quantize_static(g, ranges, exclude=ids, **form)
        except GspoError:  # everything quantizable excluded
            continue
        stripped = keep_float(full, g, ids).check()
        assert _quantized_tensors(excluded) <= _quantized_tensors(stripped), ids
        if _quantized_tensors(excluded) == _quantized_tensors(stripped) and "softmax" not in ids:
            same += 1
            want, got = _outputs(excluded, feeds[0]), _outputs(stripped, feeds[0])
            assert all(np.array_equal(want[k], got[k]) for k in want), ids
    assert same > 5


def test_a_quantized_graph_holding_another_tensor_under_a_weight_name_gives_the_float_node_the_fp32_one():
    """onnxruntime names a dequantized bias after the float one; NNCF's SmoothQuant rescales
    weights (here a LayerNorm's scale, read by a quantized node too)."""
    g = _cnn()
    _, ranges = _data(g)
    q = quantize_static(g, ranges)
    assert q.producers["b1"][0].op_type == "DequantizeLinear"
    back = keep_float(q, g, ["conv"])
    _check_float(back, g, ["conv", "relu"])
    assert "b1" in back.weights  # under its own name, once its DequantizeLinear is gone

    b = GraphBuilder("shared", seed=3)
    x = b.input("x", (2, 8))
    s = b.weight("s", (8,))
    twice = b.op("Mul", [b.op("Mul", [b.op("MatMul", [x, b.weight("w1", (8, 8))]), s]), s])
    g = b.output(b.op("MatMul", [twice, b.weight("w2", (8, 4))], out="y")).build()
    _, ranges = _data(g)
    q = quantize_static(g, ranges, **WEIGHTED)  # the Muls stay float, reading "s"
    q = dataclasses.replace(q, weights={**q.weights, "s": Literal.from_array(2 * _array(g, "s"))})
    back = keep_float(q, g, ["mul"]).check()
    _check_float(back, g, ["mul"])
    assert np.array_equal(_array(back, "s"), 2 * _array(g, "s"))  # the quantized graph's own, still read
    assert back.producers["mul_1"][0].inputs[1] == "s"


def test_a_value_the_quantized_graph_no_longer_computes_brings_its_producer_back():
    """NNCF drops Casts it finds redundant: a float node reading one gets it back."""
    b = GraphBuilder("cast", seed=3)
    x = b.input("x", (2, 8))
    c = b.op("Cast", [x], to=1)
    g = b.output(b.op("MatMul", [b.op("MatMul", [c, b.weight("w1", (8, 8))]), b.weight("w2", (8, 4))],
                      out="y")).build()
    _, ranges = _data(g)
    q = quantize_static(g, ranges)
    cast = q.producers["cast"][0]
    q = q.with_nodes([n.replace(inputs=tuple("x" if i == "cast" else i for i in n.inputs))
                      for n in q.nodes if n is not cast])
    back = keep_float(q, g, ["matmul"]).check()
    _check_float(back, g, ["matmul", "cast"])


def test_an_unknown_id_is_refused_in_one_line():
    g = _cnn()
    _, ranges = _data(g)
    with pytest.raises(GspoError, match="cannot keep .*'nope'.* not the id of a node"):
        keep_float(quantize_static(g, ranges), g, ["nope"])
