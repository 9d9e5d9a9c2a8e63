"""Weight-only int8 and int4 (MatMulNBits): only the reduced pieces' weights compressed, every
other node exact; on OpenVINO, probed once before the first build; the notes where none is made."""

from __future__ import annotations

import numpy as np
import pytest

from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.ir.builder import GraphBuilder
from gspo.precision.weights import (
    WEIGHT_BOUND_ROWS,
    compress_weights,
    weight_bound,
    weight_kind,
    weight_kinds,
    weight_matmuls,
)
from gspo.runtime import random_inputs
from gspo.runtime.executor import make_executor
from gspo.streams import Placement, node_id
from tests.precision.test_variants import _Probe


def _decoder(rows: int = 1) -> Graph:
    """x -> MatMul(w1) -> Add(b) -> Relu -> MatMul(w2) -> y, and a MatMul of two activations."""
    b = GraphBuilder("decode", seed=3)
    x = b.input("x", (rows, 64))
    h = b.op("Relu", [b.op("Add", [b.op("MatMul", [x, b.weight("w1", (64, 64))], out="up"),
                                   b.weight("b1", (64,), scale=0.1)])])
    y = b.op("MatMul", [h, b.weight("w2", (64, 32))], out="down")
    return b.output(b.op("MatMul", [b.op("Transpose", [x]), y], out="y")).build()


def _shared() -> Graph:
    """Two MatMuls reading one weight."""
    b = GraphBuilder("tied", seed=5)
    x = b.input("x", (1, 32))
    w = b.weight("w", (32, 32))
    return b.output(b.op("MatMul", [b.op("MatMul", [x, w], out="a"), w], out="y")).build()


def _outputs(graph: Graph, sample) -> dict[str, np.ndarray]:
    ex = make_executor(graph, None, "cpu")
    try:
        return ex.run(sample)
    finally:
        ex.close()


def test_only_matmuls_with_a_constant_float_weight_are_touched():
    assert weight_matmuls(_decoder()) == {"up", "down"}  # not the MatMul of two activations


@pytest.mark.parametrize("bits", [8, 4])
def test_only_the_reduced_weights_are_compressed_and_the_rest_is_exact(bits):
    g = _decoder()
    q = compress_weights(g, bits, {"up", "Relu_0", "y"})  # ids of other ops are ignored
    ops = [n.op_type for n in q.nodes]
    assert ops.count("MatMulNBits") == 1 and ops.count("MatMul") == 2
    packed = next(n for n in q.nodes if n.op_type == "MatMulNBits")
    assert packed.inputs[1] == f"w1_Q{bits}" and "w1" not in q.weights and "w2" in q.weights
    assert np.array_equal(q.weights["w2"].evaluate(q.store), g.weights["w2"].evaluate(g.store))  # untouched
    s = random_inputs(g, seed=1)
    exact, reduced = _outputs(g, s)["y"], _outputs(q, s)["y"]
    nmse = float(((reduced - exact) ** 2).mean() / (exact ** 2).mean())
    assert 0 < nmse < (1e-2 if bits == 8 else 2e-1)


def test_an_unreduced_model_is_not_changed_and_nothing_to_compress_is_one_clear_error():
    g = _decoder()
    with pytest.raises(GspoError, match="nothing to compress"):
        compress_weights(g, 8, {"y"})


def test_a_weight_two_matmuls_read_is_compressed_for_the_reduced_one_alone():
    g = _shared()
    q = compress_weights(g, 8, {"a"})
    assert [n.op_type for n in q.nodes] == ["MatMulNBits", "MatMul"]
    assert "w" in q.weights  # the other MatMul still reads the float weight
    s = random_inputs(g, seed=2)
    assert np.allclose(_outputs(q, s)["y"], _outputs(g, s)["y"], rtol=0.1, atol=0.1)


def test_weight_bound_is_a_few_rows_at_a_time():
    assert weight_bound(_decoder(1), {"up"})
    assert not weight_bound(_decoder(WEIGHT_BOUND_ROWS + 1), {"up"})


def test_the_openvino_kind_is_probed_once_with_every_weight_compressed_and_placed_whole():
    g = _decoder()
    probe = _Probe()
    kind = weight_kind(g, "int8", "openvino", probe=probe)
    assert kind.name == "int8 weights on openvino" and kind.precision == "int8" and kind.backend == "openvino"
    assert kind.touches(["up"]) and not kind.touches(["y", "Relu_0"])
    built = kind.build(frozenset({"down"}))
    kind.build(frozenset({"up"}))
    assert len(probe.seen) == 1
    assert sum(p.op_type == "MatMulNBits" for p in probe.seen[0].graph.node) == 2
    where = Placement.from_json(built.extras.placement).backend_of()
    assert set(where.values()) == {"openvino"} and set(where) == {node_id(n) for n in built.nodes}


def test_a_model_openvino_refuses_drops_the_kind_with_its_reason():
    kind = weight_kind(_decoder(), "int4", "openvino", probe=_Probe("OpenVINO cannot compile the model: no"))
    with pytest.raises(GspoError, match="OpenVINO cannot compile the model: no"):
        kind.build(frozenset({"up"}))


def test_int8_brings_weight_only_kinds_on_each_backend_and_int4_only_where_weight_bound():
    found, notes = weight_kinds(_decoder(), ("int8", "int4"), ("ort", "openvino"), probe=_Probe())
    assert [k.name for k in found] == ["int8 weights on onnxruntime", "int8 weights on openvino",
                                       "int4 weights on onnxruntime", "int4 weights on openvino"]
    assert notes == []
    found, notes = weight_kinds(_decoder(WEIGHT_BOUND_ROWS * 2), ("int4",), ("ort",))
    assert found == [] and len(notes) == 1 and notes[0].startswith("int4: weight-only; no MatMul of the model is "
                                                                   "weight-bound")


def test_a_model_without_a_constant_weight_matmul_says_so_per_precision():
    b = GraphBuilder("conv", seed=1)
    x = b.input("x", (1, 3, 8, 8))
    g = b.output(b.op("Conv", [x, b.weight("w", (4, 3, 3, 3))], out="y")).build()
    found, notes = weight_kinds(g, ("int8", "int4"), ("ort",))
    assert found == [] and [n.split(":")[0] for n in notes] == ["int8 weights", "int4 weights"]
    assert weight_kinds(g, ("bf16",), ("ort",)) == ([], [])


def _gemms(trans_b: int) -> Graph:
    """x -> Gemm(w1, b1) -> Relu -> Gemm(w2, no bias) -> y, as GPT-2's projections export; ``trans_b``
    on both; and a Gemm with alpha 2, not a plain product."""
    b = GraphBuilder("gemms", seed=4)
    x = b.input("x", (1, 64))
    w1 = b.weight("w1", (64, 64))
    w2 = b.weight("w2", (32, 64) if trans_b else (64, 32))
    h = b.op("Relu", [b.op("Gemm", [x, w1, b.weight("b1", (64,), scale=0.1)], out="up", transB=trans_b)])
    y = b.op("Gemm", [h, w2], out="down", transB=trans_b)
    return b.output(b.op("Gemm", [y, b.weight("w3", (32, 8))], out="y", alpha=2.0)).build()


@pytest.mark.parametrize("trans_b", [0, 1])
def test_plain_gemms_are_compressed_as_matmuls_close_to_fp32(trans_b):
    g = _gemms(trans_b)
    assert weight_matmuls(g) == {"up", "down"}  # not the Gemm with alpha 2
    q = compress_weights(g, 8, {"up", "down", "y"})
    ops = [n.op_type for n in q.nodes]
    assert ops.count("MatMulNBits") == 2 and ops.count("Gemm") == 1 and ops.count("Add") == 1  # the bias, apart
    s = random_inputs(g, seed=1)
    exact, reduced = _outputs(g, s)["y"], _outputs(q, s)["y"]
    nmse = float(((reduced - exact) ** 2).mean() / (exact ** 2).mean())
    assert 0 < nmse < 1e-2


def test_a_reduced_gemm_left_out_keeps_its_gemm_and_weight():
    g = _gemms(1)
    q = compress_weights(g, 8, {"down"})
    assert [n.op_type for n in q.nodes].count("Gemm") == 2 and "w1" in q.weights
    assert np.array_equal(q.weights["w1"].evaluate(q.store), g.weights["w1"].evaluate(g.store))
