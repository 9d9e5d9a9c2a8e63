"""A model placed on ``openvino:bf16`` runs on a CPU without bf16 instructions: at f32, said once.

The CPU's lack of bf16 is injected (OpenVINO's capability list without ``BF16``), so these tests
hold on every CPU; on one with bf16 they also show that f32 was pinned (at bf16 the outputs would
be 1e-7 off or more, see tests/runtime/test_openvino.py)."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from click.testing import CliRunner

import gspo
from gspo import ir
from gspo.cli import cli
from gspo.runtime import backends, make_session, run
from gspo.streams import Placement
from tests.helpers import one_line_error
from tests.runtime.test_plan import _two_matmuls

pytest.importorskip("openvino")

#: y1's MatMul on OpenVINO at f32, the Relu and y2's MatMul at bf16: one segment on openvino:bf16
#: with y1 kept at f32 (what a precision search writes when it sends a piece back to f32).
_MIXED = {"y1": "openvino", "r": "openvino:bf16", "y2": "openvino:bf16"}
_WARNING = ("this CPU has no bf16 instructions: the ops placed on openvino:bf16 run at f32 "
            "(exact, within the model's stated budget)")


@pytest.fixture
def no_bf16(monkeypatch):
    """This CPU as OpenVINO would describe one without bf16 instructions; no warning said yet."""
    from gspo.runtime import openvino

    monkeypatch.setattr(openvino, "cpu_capabilities", lambda: ["WINOGRAD", "FP32", "INT8", "BIN", "EXPORT_IMPORT"])
    monkeypatch.setattr(backends, "_told_f32", set())


@pytest.fixture
def placed(tmp_path):
    """A model placed on openvino:bf16 (and openvino), its inputs, and onnxruntime's outputs."""
    g = ir.load_bytes(_two_matmuls().SerializeToString())
    path = ir.save(g, tmp_path / "placed.onnx", placement=Placement.of(_MIXED).to_json())
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)}
    np.savez(tmp_path / "in.npz", **feeds)
    return path, feeds, run(make_session(g), feeds)


def _nmse(got, want) -> float:
    return float(np.sum((got.astype(np.float64) - want) ** 2) / np.sum(want.astype(np.float64) ** 2))


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "bf16" in r.getMessage()]


def test_the_search_still_refuses_bf16_on_a_cpu_without_it(no_bf16):
    from gspo.precision.variants import kinds
    from tests.helpers import branchy

    ok, why = backends.backend_status("openvino:bf16")
    assert not ok and why == "this CPU has no bf16 instructions (OpenVINO would run f32)"
    found, notes = kinds(branchy(), ["bf16"], ["ort", "openvino"], dict)
    assert found == [] and notes == ["bf16: this CPU has no bf16 instructions (OpenVINO would run f32)"]


def test_a_bf16_placement_runs_at_f32_through_the_inference_session_and_says_so_once(no_bf16, placed, caplog):
    path, feeds, want = placed
    with caplog.at_level(logging.WARNING):
        for _ in range(2):  # a second session in the same process: nothing more said
            with gspo.InferenceSession(path) as sess:
                got = dict(zip(["y1", "y2"], sess.run(None, feeds)))
            for name in ("y1", "y2"):
                assert _nmse(got[name], want[name]) < 1e-10, name
    assert _warnings(caplog) == [_WARNING]


def test_gspo_run_and_bench_run_a_bf16_placement_at_f32_with_one_warning(no_bf16, placed, tmp_path, caplog,
                                                                          monkeypatch):
    path, _, want = placed
    with caplog.at_level(logging.WARNING):
        done = CliRunner().invoke(cli, ["run", str(path), "--inputs", str(tmp_path / "in.npz"),
                                        "-o", str(tmp_path / "out.npz")], catch_exceptions=False)
        assert done.exit_code == 0, done.output
        assert "ops on openvino:bf16" in done.output
        out = np.load(tmp_path / "out.npz")
        for name in ("y1", "y2"):
            assert _nmse(out[name], want[name]) < 1e-10, name
        # two models, two stream settings: four executors, one process, still one warning
        done = CliRunner().invoke(cli, ["bench", str(path), str(path), "--streams", "1,auto", "--runs", "1",
                                        "--warmup", "0"], catch_exceptions=False)
        assert done.exit_code == 0, done.output
    assert _warnings(caplog) == [_WARNING]
    # without OpenVINO at all: one clear line, as before
    monkeypatch.setattr(backends, "openvino_status", lambda: (False, "OpenVINO is not installed: pip install x"))
    line = one_line_error(CliRunner().invoke(cli, ["run", str(path)], catch_exceptions=False))
    assert line == "gspo: error: backend 'openvino:bf16' cannot run here: OpenVINO is not installed: pip install x", line
