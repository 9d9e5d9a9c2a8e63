"""gspo.runtime.verify runs a model the way gspo runs it: its saved placement and schedule followed.

OpenVINO is replaced by a stand-in (onnxruntime underneath, optionally off by a factor) that
records the precision each piece was compiled at, so these tests need neither OpenVINO nor a
CPU of a kind."""

from __future__ import annotations

import numpy as np
import pytest

from gspo import ir
from gspo.errors import GspoError
from gspo.runtime import backends, make_session, verify
from gspo.streams import Placement, assign_streams
from tests.helpers import branchy
from tests.runtime.test_plan import _two_matmuls


class FakeOpenVino:
    """``load_openvino``'s stand-in: onnxruntime's outputs times ``factor``; the precisions asked."""

    def __init__(self, factor: float = 1.0):
        self.factor, self.precisions = factor, []

    def __call__(self, model, threads, precision="f32", keep_f32=()):
        self.precisions.append(precision)
        session, factor = make_session(model), self.factor

        class Runner:
            def run(self, names, feeds):
                return [np.asarray(v * factor, dtype=v.dtype) for v in session.run(names, feeds)]

        return Runner()


def fake_openvino(monkeypatch, factor: float = 1.0, bf16: bool = True, installed: bool = True) -> FakeOpenVino:
    """Put a :class:`FakeOpenVino` in place of OpenVINO, on a CPU with or without bf16."""
    fake = FakeOpenVino(factor)
    monkeypatch.setattr(backends, "load_openvino", fake)
    monkeypatch.setattr(backends, "openvino_status", lambda: (True, "OpenVINO (stand-in) CPU") if installed
                        else (False, "OpenVINO is not installed: pip install 'gspo[openvino]' (the openvino package)"))
    monkeypatch.setattr(backends, "bf16_missing", lambda: None if bf16 else "this CPU has no bf16 instructions")
    monkeypatch.setattr(backends, "_told_f32", set())
    return fake


def _placed(where: dict | None = None):
    """The two-MatMul model, and the same placed as ``where`` says (default: all on openvino)."""
    g = ir.load_bytes(_two_matmuls().SerializeToString())
    placement = Placement.of(where) if where else Placement.whole(g, "openvino")
    return g, ir.load_bytes(ir.serialize(g, placement=placement.to_json()))


def test_the_candidate_runs_on_the_backends_it_was_placed_on(monkeypatch):
    """A placed model whose OpenVINO pieces compute 1% off: verify sees it (on onnxruntime alone, as
    before, it was 'equivalent')."""
    fake = fake_openvino(monkeypatch, factor=1.01)
    g, placed = _placed()
    res = verify(g, placed)
    assert not res.equivalent and fake.precisions == ["f32"]
    assert res.ran == ("on onnxruntime", "as saved: 3 ops on openvino")


def test_a_bf16_placement_is_verified_at_the_precision_it_runs_at_here(monkeypatch):
    fake = fake_openvino(monkeypatch)
    g, placed = _placed({"y1": "openvino", "r": "openvino:bf16", "y2": "openvino:bf16"})
    assert verify(g, placed).ran[1] == "as saved: 1 ops on openvino, 2 ops on openvino:bf16"
    assert fake.precisions == ["bf16"]
    fake = fake_openvino(monkeypatch, bf16=False)
    res = verify(placed, placed)
    assert res.equivalent and fake.precisions == ["f32", "f32"]
    assert res.ran == ("as saved: 1 ops on openvino, 2 ops on openvino:bf16 (at f32 here)",) * 2


def test_a_saved_schedule_is_followed():
    g = branchy(channels=4, size=8)
    schedule = assign_streams(g, max_streams=2)
    assert schedule.num_streams == 2
    res = verify(g, ir.load_bytes(ir.serialize(g, schedule=schedule.to_json())))
    assert res.equivalent and res.ran == ("on onnxruntime", "as saved: onnxruntime on 2 streams")


def test_a_placed_model_that_cannot_run_here_is_one_line_naming_which(monkeypatch):
    fake_openvino(monkeypatch, installed=False)
    g, placed = _placed()
    with pytest.raises(GspoError) as e:
        verify(g, placed)
    assert str(e.value) == ("the second model cannot run here as saved: backend 'openvino' cannot run here: OpenVINO "
                            "is not installed: pip install 'gspo[openvino]' (the openvino package)")
