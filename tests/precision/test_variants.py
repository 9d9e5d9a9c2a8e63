"""Static int8 on OpenVINO: the QDQ form OpenVINO compiles, decided once by compiling it apart."""

from __future__ import annotations

import json

import onnx
import pytest

from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.ir.builder import GraphBuilder
from gspo.precision.variants import openvino_static
from gspo.runtime import random_inputs
from gspo.runtime.quantize import activation_ranges
from gspo.streams import node_id


def _mlp() -> Graph:
    """x -> MatMul -> Add(bias) -> Relu -> MatMul -> y: a transformer's feed-forward in small."""
    b = GraphBuilder("mlp", seed=1)
    x = b.input("x", (4, 16))
    h = b.op("Relu", [b.op("Add", [b.op("MatMul", [x, b.weight("w1", (16, 32))]), b.weight("b1", (32,), scale=0.1)])])
    return b.output(b.op("MatMul", [h, b.weight("w2", (32, 8))], out="y")).build()


def _ranges(graph: Graph):
    return activation_ranges(graph, [random_inputs(graph, seed=s) for s in range(4)])


def _quantized_adds(model: bytes) -> int:
    """Add nodes whose inputs are all dequantized, its constant bias too (what OpenVINO refused
    on DistilBERT: an Add of the bias' DequantizeLinear and the MatMul's)."""
    proto = onnx.load_from_string(model)
    dq = {o for n in proto.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    return sum(1 for n in proto.graph.node if n.op_type == "Add" and set(n.input) <= dq)


class _Probe:
    """Stands in for OpenVINO's compile in a process of its own: refuses a quantized Add if told."""

    def __init__(self, refuse_add: bool, refuse_all: bool = False):
        self.refuse_add, self.refuse_all, self.seen = refuse_add, refuse_all, []

    def __call__(self, model: bytes) -> str | None:
        self.seen.append(_quantized_adds(model))
        if self.refuse_all or (self.refuse_add and self.seen[-1]):
            return "OpenVINO cannot compile the model: [AddTransformation] refused"
        return None


def _ids(graph: Graph, op_type: str) -> list[str]:
    return [node_id(n) for n in graph.nodes if n.op_type == op_type]


def test_the_default_form_is_kept_where_openvino_compiles_it():
    g = _mlp()
    probe = _Probe(refuse_add=False)
    kind = openvino_static(g, _ranges(g), probe=probe)
    assert kind.touches(_ids(g, "Add"))  # the bias Add is quantized in the default form
    built = kind.build(frozenset(node_id(n) for n in g.nodes))
    assert probe.seen == [1]  # compiled once, with the quantized Add
    assert json.loads(built.extras.placement)  # placed whole on OpenVINO
    assert {n.op_type for n in built.nodes} >= {"QuantizeLinear", "DequantizeLinear"}


def test_a_refused_default_form_falls_back_to_the_ops_with_weights():
    g = _mlp()
    probe = _Probe(refuse_add=True)
    kind = openvino_static(g, _ranges(g), probe=probe)
    assert not kind.touches(_ids(g, "Add")) and not kind.touches(_ids(g, "Relu"))
    assert kind.touches(_ids(g, "MatMul")[:1])
    built = kind.build(frozenset(node_id(n) for n in g.nodes))
    kind.touches(_ids(g, "MatMul"))
    assert probe.seen == [1, 0]  # the default form refused, the weighted one compiled; decided once
    assert sum(1 for n in built.nodes if n.op_type == "DequantizeLinear") >= 2
    assert "b1" in next(n for n in built.nodes if n.op_type == "Add").inputs  # the bias stays float


def test_both_forms_refused_the_kind_cannot_be_built_and_says_why():
    g = _mlp()
    probe = _Probe(refuse_add=True, refuse_all=True)
    kind = openvino_static(g, _ranges(g), probe=probe)
    assert kind.touches(_ids(g, "Add"))  # the fit goes on to build it, and reports the reason
    with pytest.raises(GspoError, match="AddTransformation"):
        kind.build(frozenset(node_id(n) for n in g.nodes))
    assert len(probe.seen) == 2
