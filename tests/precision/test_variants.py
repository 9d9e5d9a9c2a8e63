"""Static int8 on OpenVINO, in its two QDQ forms (and, with bf16 asked too, with the rest at bf16):
each compiled apart once before it is built."""

from __future__ import annotations

import json

import onnx
import pytest

from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.ir.builder import GraphBuilder
from gspo.precision.variants import OPENVINO_FORMS, kinds, openvino_static
from gspo.runtime import random_inputs
from gspo.runtime.quantize import activation_ranges
from gspo.streams import node_id


def _mlp() -> Graph:
    """x -> MatMul -> Add(bias) -> Relu -> MatMul -> y: a transformer's feed-forward in small."""
    b = GraphBuilder("mlp", seed=1)
    x = b.input("x", (4, 16))
    h = b.op("Relu", [b.op("Add", [b.op("MatMul", [x, b.weight("w1", (16, 32))]), b.weight("b1", (32,), scale=0.1)])])
    return b.output(b.op("MatMul", [h, b.weight("w2", (32, 8))], out="y")).build()


def _gemm() -> Graph:
    b = GraphBuilder("gemm", seed=4)
    x = b.input("x", (4, 16))
    return b.output(b.op("Gemm", [x, b.weight("w", (8, 16)), b.weight("b", (8,), scale=0.1)], transB=1,
                         out="y")).build()


def _ranges(graph: Graph):
    return activation_ranges(graph, [random_inputs(graph, seed=s) for s in range(4)])


def _all(graph: Graph) -> frozenset[str]:
    return frozenset(node_id(n) for n in graph.nodes)


def _ids(graph: Graph, op_type: str) -> list[str]:
    return [node_id(n) for n in graph.nodes if n.op_type == op_type]


def _dequantized(graph: Graph) -> set[str]:
    return {v.name for n in graph.nodes if n.op_type == "DequantizeLinear" for v in n.outputs}


class _Probe:
    """Stands in for OpenVINO's compile in a process of its own: records what it was given."""

    def __init__(self, refuse: str | None = None):
        self.refuse, self.seen = refuse, []

    def __call__(self, model: bytes) -> str | None:
        self.seen.append(onnx.load_from_string(model))
        return self.refuse


def test_two_forms_each_a_kind_of_its_own():
    assert [f[1] for f in OPENVINO_FORMS] == ["default", "weighted"]
    g = _mlp()
    names = {openvino_static(g, _ranges(g), form, probe=_Probe()).name for _, form, _ in OPENVINO_FORMS}
    assert len(names) == 2


def test_the_default_form_quantizes_the_bias_add_and_is_compiled_apart_once():
    g = _mlp()
    probe = _Probe()
    kind = openvino_static(g, _ranges(g), "default", probe=probe)
    assert kind.touches(_ids(g, "Add"))
    built = kind.build(_all(g))
    kind.build(frozenset(_ids(g, "MatMul")))
    assert len(probe.seen) == 1  # once, before the first build
    add = next(n for n in built.nodes if n.op_type == "Add")
    assert set(add.inputs) <= _dequantized(built)  # the bias too
    assert json.loads(built.extras.placement)  # placed whole on OpenVINO


def test_the_weighted_form_quantizes_the_ops_with_weights_and_leaves_biases_float():
    g = _mlp()
    kind = openvino_static(g, _ranges(g), "weighted", probe=_Probe())
    assert not kind.touches(_ids(g, "Add")) and not kind.touches(_ids(g, "Relu"))
    assert kind.touches(_ids(g, "MatMul")[:1])
    built = kind.build(_all(g))
    add = next(n for n in built.nodes if n.op_type == "Add")
    assert "b1" in add.inputs and "b1" not in _dequantized(built)
    assert sum(1 for n in built.nodes if n.op_type == "MatMul" and set(n.inputs) <= _dequantized(built)) == 2

    g = _gemm()
    default = openvino_static(g, _ranges(g), "default", probe=_Probe()).build(_all(g))
    weighted = openvino_static(g, _ranges(g), "weighted", probe=_Probe()).build(_all(g))
    assert next(n for n in default.nodes if n.op_type == "Gemm").inputs[2] in _dequantized(default)  # int32
    gemm = next(n for n in weighted.nodes if n.op_type == "Gemm")
    assert gemm.inputs[2] == "b" and "b" not in _dequantized(weighted) and gemm.inputs[1] in _dequantized(weighted)


def test_a_form_openvino_refuses_cannot_be_built_and_says_why():
    g = _mlp()
    probe = _Probe(refuse="OpenVINO cannot compile the model: [AddTransformation] refused")
    kind = openvino_static(g, _ranges(g), "default", probe=probe)
    for _ in range(2):
        with pytest.raises(GspoError, match="AddTransformation"):
            kind.build(_all(g))
    assert len(probe.seen) == 1


def _bf16_here():
    from gspo.runtime.backends import backend_status

    ok, why = backend_status("openvino:bf16")
    if not ok:
        pytest.skip(f"bf16 on OpenVINO cannot run here: {why}")


def test_with_bf16_asked_too_int8_on_openvino_comes_again_with_the_rest_at_bf16_each_form_probed_once():
    _bf16_here()
    g = _mlp()
    probe = _Probe()
    found, notes = kinds(g, ["bf16", "int8"], ["ort", "openvino"], lambda: _ranges(g), probe=probe)
    rest_bf16 = [k for k in found if k.rest == "bf16"]
    assert sorted(k.name for k in rest_bf16) == sorted(f"{name}, the rest at bf16" for name, _, _ in OPENVINO_FORMS)
    assert all(k.precision == "int8" and k.backend == "openvino:bf16" for k in rest_bf16)
    for k in found:
        built = k.build(_all(g))
        if k in rest_bf16:
            where = json.loads(built.extras.placement)
            assert "openvino:bf16" in json.dumps(where) and '"openvino"' not in json.dumps(where)
    qdq = [m for m in probe.seen if not any(p.op_type == "MatMulNBits" for p in m.graph.node)]  # not weight-only
    assert len(qdq) == len(OPENVINO_FORMS)  # each form's model compiled apart once, not once per kind

    only_int8, _ = kinds(g, ["int8"], ["ort", "openvino"], lambda: _ranges(g), probe=_Probe())
    assert only_int8 and all(k.rest == "fp32" for k in only_int8)


@pytest.mark.parametrize("flags, says", [(frozenset({"avx2", "fma"}), True),
                                         (frozenset({"avx2", "avx512f", "avx512_vnni"}), False)])
def test_int8_says_once_when_the_cpu_lacks_vnni(monkeypatch, flags, says):
    """The CPU's flags are injected: the note depends on them, not on the machine running the test."""
    from gspo.runtime import cpu_features

    monkeypatch.setattr(cpu_features, "cpu_flags", lambda: flags)
    monkeypatch.setattr(cpu_features.platform, "machine", lambda: "x86_64")
    g = _mlp()
    _, notes = kinds(g, ["int8"], ["ort"], lambda: _ranges(g))
    vnni = [n for n in notes if "VNNI" in n]
    assert len(vnni) == (1 if says else 0), notes
    assert all(n.startswith("int8: this CPU has no VNNI") and "7 bits (reduce_range)" in n for n in vnni)


def _counting(monkeypatch):
    """onnxruntime's static quantization, its calls counted."""
    from gspo.runtime import quantize

    calls = []
    real = quantize.quantize_static

    def counted(*args, **kwargs):
        calls.append(kwargs.get("exclude", ()))
        return real(*args, **kwargs)

    monkeypatch.setattr(quantize, "quantize_static", counted)
    return calls


def test_the_static_kinds_quantize_once_and_strip_at_each_build(monkeypatch):
    """Three judgments of each static kind (the kinds of one OpenVINO form sharing theirs): one
    quantization each, the whole model, and the pieces left fp32 in float in the builds."""
    calls = _counting(monkeypatch)
    g = _mlp()
    probe = _Probe()
    found, _ = kinds(g, ["int8"], ["ort", "openvino"], lambda: _ranges(g), probe=probe)
    static = [k for k in found if k.first == "quantize"]
    assert len(static) == 1 + len(OPENVINO_FORMS)
    matmuls = _ids(g, "MatMul")
    for k in static:
        for reduced in (_all(g), frozenset(matmuls[:1]), frozenset(matmuls[1:])):
            built = k.build(reduced)
            for n in built.nodes:
                if n.op_type == "MatMul":  # quantized where reduced, float where not
                    assert (node_id(n).removesuffix("_QuantizeLinear_Input") in reduced) == bool(set(n.inputs) & _dequantized(built)), (k.name, reduced)
    assert calls == [()] * len(static)  # never with an exclusion
    assert len(probe.seen) == len(OPENVINO_FORMS)


def test_a_static_kind_whose_quantization_fails_says_so_at_every_build_without_quantizing_again(monkeypatch):
    from gspo.runtime import quantize

    calls = []

    def fails(*args, **kwargs):
        calls.append(1)
        raise GspoError("onnxruntime cannot quantize the model: broken")

    monkeypatch.setattr(quantize, "quantize_static", fails)
    g = _mlp()
    found, _ = kinds(g, ["int8"], ["ort"], lambda: _ranges(g))
    static = next(k for k in found if k.first == "quantize")
    for _ in range(2):
        with pytest.raises(GspoError, match="broken"):
            static.build(_all(g))
    assert calls == [1]
