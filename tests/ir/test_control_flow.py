"""Control flow through load, pinning and the front end: If branches and Loop bodies stay valid."""

from __future__ import annotations

import onnx
import pytest

from gspo import ir
from gspo.ir.subgraph import extract
from gspo.runtime import compare_outputs, make_session, run
from gspo.runtime.session import load_refusal
from tests.ir.control_flow import PINS, feeds, simple_if_model, streaming_vad_model, vad_model

MODELS = {"if": vad_model, "loop": streaming_vad_model}


def _write(tmp_path, model) -> str:
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return str(path)


def _declared_dims(data: bytes) -> dict[str, list]:
    m = onnx.ModelProto.FromString(data)
    return {vi.name: [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
            for vi in m.graph.input}


@pytest.mark.parametrize("kind", sorted(MODELS))
@pytest.mark.parametrize("plain", [False, True])
def test_a_pinned_model_onnxruntime_refuses_keeps_its_declared_inputs_and_computes_the_same(tmp_path, kind, plain):
    path = _write(tmp_path, MODELS[kind]())
    graph = ir.load(path, PINS, plain=plain, refusal=load_refusal)
    assert "inferencing failed" in graph.extras.static_refused
    assert {v.name: v.shape for v in graph.inputs} == {**PINS, "sr": ()}  # the pins hold inside gspo
    data = ir.serialize(graph)
    assert load_refusal(data) is None
    assert _declared_dims(data) == {"input": [None, None], "state": [2, None, 16], "sr": []}
    want = run(make_session(open(path, "rb").read()), feeds())
    assert compare_outputs(want, run(make_session(data), feeds())).equivalent


def test_without_the_check_the_pins_are_written_and_onnxruntime_refuses_them(tmp_path):
    graph = ir.load(_write(tmp_path, vad_model()), PINS)
    assert graph.extras.static_refused == ""
    assert "inferencing failed" in load_refusal(ir.serialize(graph))


def test_a_model_onnxruntime_accepts_pinned_stays_pinned(tmp_path):
    graph = ir.load(_write(tmp_path, simple_if_model()), {"x": (2, 4)}, refusal=load_refusal)
    assert graph.extras.static_refused == ""
    assert _declared_dims(ir.serialize(graph)) == {"x": [2, 4], "flag": []}


def test_a_piece_keeps_the_declared_inputs_of_a_refused_model(tmp_path):
    graph = ir.load(_write(tmp_path, vad_model()), PINS, refusal=load_refusal)
    piece, _ = extract(graph, range(len(graph.nodes)))
    assert piece.extras.static_refused and load_refusal(ir.serialize(piece)) is None


def test_a_folded_model_the_runtime_refuses_too_is_kept_unfolded(tmp_path, monkeypatch):
    from gspo.ir import frontend

    def broken_fold(model, label="<model>"):
        out = onnx.ModelProto()
        out.CopyFrom(model)
        out.graph.node[1].op_type = "NotAnOp"  # the Equal on the sample rate
        return out

    monkeypatch.setattr(frontend, "fold", broken_fold)
    graph = ir.load(_write(tmp_path, vad_model()), PINS, plain=True, refusal=load_refusal)
    assert graph.extras.static_refused and "NotAnOp" not in [n.op_type for n in graph.nodes]
    assert load_refusal(ir.serialize(graph)) is None


def test_a_model_the_runtime_refuses_as_declared_too_keeps_its_pins_and_no_note(tmp_path):
    model = simple_if_model()
    branch_op = model.graph.node[0].attribute[0].g.node[0]
    branch_op.op_type, branch_op.domain = "Foo", "custom.test"  # no kernel: refused whatever the shapes
    model.opset_import.add(domain="custom.test", version=1)
    graph = ir.load(_write(tmp_path, model), {"x": (2, 4)}, refusal=load_refusal)
    assert graph.extras.static_refused == ""
    assert _declared_dims(ir.serialize(graph)) == {"x": [2, 4], "flag": []}
