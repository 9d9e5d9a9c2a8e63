"""int8 by NNCF on OpenVINO: quantized once by the real nncf on a tiny attention model (seconds),
its pieces left fp32 exactly float, the same bytes every time, nothing on the screen; a note
where nncf is missing."""

from __future__ import annotations

import json
import sys

import numpy as np
import onnx
import pytest

from gspo.errors import GspoError
from gspo.ir import Graph, serialize
from gspo.ir.builder import GraphBuilder
from gspo.precision import nncf_int8
from gspo.precision.nncf_int8 import MISSING, NAME, has_attention, nncf_kind
from gspo.precision.variants import kinds
from gspo.runtime import random_inputs
from gspo.runtime.quantize import activation_ranges
from gspo.streams import node_id

pytest.importorskip("nncf")


def _attention() -> Graph:
    """x -> Q, K, V projections -> Softmax(Q K^T / 4) V -> output projection -> y."""
    b = GraphBuilder("attention", seed=5)
    x = b.input("x", (1, 8, 16))
    q, k, v = (b.op("MatMul", [x, b.weight(f"w{n}", (16, 16))]) for n in "qkv")
    scores = b.op("Div", [b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 2, 1])]),
                          b.const("four", np.array(4.0, np.float32))])
    att = b.op("MatMul", [b.op("Softmax", [scores], axis=-1), v])
    return b.output(b.op("MatMul", [att, b.weight("wo", (16, 16))], out="y")).build()


def _samples(graph: Graph):
    return [random_inputs(graph, seed=s) for s in range(4)]


def _all(graph: Graph) -> frozenset[str]:
    return frozenset(node_id(n) for n in graph.nodes)


class _Probe:
    def __init__(self):
        self.seen = []

    def __call__(self, model: bytes) -> None:
        self.seen.append(model)


@pytest.fixture(scope="module")
def built():
    """The kind of the tiny model, built once with everything reduced (NNCF runs once here)."""
    g = _attention()
    probe = _Probe()
    kind = nncf_kind(g, _samples(g), probe)
    return g, kind, probe, kind.build(_all(g))


def test_attention_is_found_where_a_softmax_reads_scaled_matmul_scores():
    assert has_attention(_attention())
    b = GraphBuilder("mlp")
    x = b.input("x", (2, 8))
    assert not has_attention(b.output(b.op("Softmax", [b.op("Relu", [b.op("MatMul", [x, b.weight("w", (8, 8))])])
                                                       ])).build())


def test_nncf_quantizes_once_and_the_model_is_placed_whole_on_openvino(built):
    g, kind, probe, full = built
    assert kind.name == NAME and kind.precision == "int8" and kind.backend == "openvino" and kind.first == "nncf"
    assert kind.touches(["matmul"]) and not kind.touches(["softmax"])
    assert sum(n.op_type == "QuantizeLinear" for n in full.nodes) >= 3
    placed = json.loads(full.extras.placement)["backends"]
    assert list(placed) == ["openvino"] and set(placed["openvino"]) == {node_id(n) for n in full.nodes}
    kind.build(frozenset({"matmul"}))
    assert len(probe.seen) == 1  # probed once, with the whole model quantized
    assert sum(n.op_type == "QuantizeLinear" for n in onnx.load_from_string(probe.seen[0]).graph.node) >= 3


def test_the_pieces_left_fp32_are_exactly_the_fp32_nodes(built):
    g, kind, _, _ = built
    reduced = frozenset({"matmul_3", "y"})  # the attention's MatMuls float, the output projection int8
    back = kind.build(reduced).check()
    nodes = {node_id(n): n for n in back.nodes}
    dequantized = {v.name for n in back.nodes if n.op_type == "DequantizeLinear" for v in n.outputs}
    for n in g.nodes:
        if node_id(n) not in reduced:
            got = nodes.get(node_id(n))
            assert got is not None and got.inputs[0] == n.inputs[0] and not set(got.inputs) & dequantized
            for name, mine in zip(n.inputs, got.inputs):
                if g.is_weight(name):
                    assert np.array_equal(back.weights[mine].evaluate(back.store), g.weights[name].evaluate(g.store))
    assert set(nodes["y"].inputs) & dequantized
    everything_float = kind.build(frozenset())
    assert everything_float.key == g.key


def test_the_same_model_and_samples_give_the_same_bytes_and_nothing_on_the_screen(built, capfd):
    g, _, _, full = built
    again = nncf_kind(g, _samples(g), _Probe()).build(_all(g))
    assert serialize(again) == serialize(full)
    assert capfd.readouterr() == ("", "")  # NNCF's progress bars and log lines kept off the screen


def test_openvino_compiles_what_nncf_makes(built):
    from gspo.runtime.openvino import openvino_probe

    pytest.importorskip("openvino")
    _, _, probe, _ = built
    assert openvino_probe(probe.seen[0]) is None


def test_the_kind_comes_first_among_the_openvino_int8_kinds_with_calibration_samples():
    g = _attention()
    samples = _samples(g)
    found, notes = kinds(g, ["int8"], ["ort", "openvino"], lambda: activation_ranges(g, samples), _Probe(), samples)
    names = [k.name for k in found]
    assert NAME in names
    assert names.index(NAME) < min(i for i, k in enumerate(found) if k.backend.startswith("openvino") and k.name != NAME)
    assert not any(NAME in n for n in notes)
    without, _ = kinds(g, ["int8"], ["ort"], lambda: activation_ranges(g, samples), _Probe(), samples)
    assert NAME not in [k.name for k in without]


def test_where_nncf_is_missing_one_note_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "nncf", None)  # `import nncf` fails, find_spec finds nothing
    assert not nncf_int8.nncf_available()
    g = _attention()
    samples = _samples(g)
    found, notes = kinds(g, ["int8"], ["openvino"], lambda: activation_ranges(g, samples), _Probe(), samples)
    assert NAME not in [k.name for k in found]
    assert notes.count(MISSING) == 1 and MISSING == "int8 (NNCF): nncf is not installed: pip install 'gspo[openvino]'"
    with pytest.raises(GspoError, match="^int8 \\(NNCF\\): nncf cannot be imported"):
        nncf_kind(g, samples, _Probe()).build(_all(g))
