"""gspo convert and gspo optimize on models with control flow, and convert's check of what it writes."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from gspo import ir
from gspo.cli import cli
from gspo.runtime import compare_outputs, make_session, run
from gspo.runtime.session import load_refusal
from tests.helpers import one_line_error, relu_model
from tests.ir.control_flow import PINS, feeds, streaming_vad_model, vad_model

MODELS = {"if": vad_model, "loop": streaming_vad_model}
PIN_ARGS = [a for name, dims in PINS.items() for a in ("--input-shape", f"{name}={','.join(map(str, dims))}")]


def gspo(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _write(tmp_path, model, name="m.onnx"):
    path = tmp_path / name
    path.write_bytes(model.SerializeToString())
    return path


def _same_as_given(given, written) -> bool:
    data = written.read_bytes()
    assert load_refusal(data) is None
    return compare_outputs(run(make_session(given.read_bytes()), feeds()), run(make_session(data), feeds())).equivalent


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_convert_pinned_control_flow_writes_a_model_onnxruntime_loads(tmp_path, kind):
    given, out = _write(tmp_path, MODELS[kind]()), tmp_path / "static.onnx"
    np.savez(tmp_path / "feeds.npz", **feeds())
    result = gspo("convert", given, "-o", out, *PIN_ARGS, "--inputs", tmp_path / "feeds.npz")
    assert result.exit_code == 0, result.output
    assert "kept as the model declares them" in result.output and "wrote" in result.output
    assert _same_as_given(given, out)


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_optimize_pinned_control_flow_with_inputs_is_equivalent(tmp_path, kind):
    given, out = _write(tmp_path, MODELS[kind]()), tmp_path / "fast.onnx"
    np.savez(tmp_path / "feeds.npz", **feeds())
    result = gspo("optimize", given, "-o", out, *PIN_ARGS, "--inputs", tmp_path / "feeds.npz",
                  "--backends", "ort", "--time-budget", 10)
    assert result.exit_code == 0, result.output
    assert _same_as_given(given, out)


def test_convert_uses_a_valid_sample_rate_when_drawing_inputs(tmp_path):
    """``sr`` is compared with 16000: random inputs take that value (others fail to run)."""
    given, out = _write(tmp_path, vad_model()), tmp_path / "static.onnx"
    result = gspo("convert", given, "-o", out, *PIN_ARGS)
    assert result.exit_code == 0, result.output
    assert _same_as_given(given, out)


def test_convert_says_when_the_model_as_given_fails_on_its_inputs(tmp_path):
    given, out = _write(tmp_path, vad_model()), tmp_path / "static.onnx"
    line = one_line_error(gspo("convert", given, "-o", out, "--input-shape", "input=1,48",
                               "--input-shape", "state=2,1,16"))
    assert "fails on random inputs" in line and "--inputs" in line and not out.exists()


def test_convert_writes_nothing_onnxruntime_refuses_or_that_differs(tmp_path, monkeypatch):
    given, out = _write(tmp_path, relu_model()), tmp_path / "out.onnx"
    other = relu_model().SerializeToString()
    monkeypatch.setattr(ir, "serialize", lambda graph: other.replace(b"Relu", b"Tanh"))
    result = gspo("convert", given, "-o", out)
    assert result.exit_code == 1 and "differs from the model as given" in result.output and not out.exists()
    monkeypatch.setattr(ir, "serialize", lambda graph: other.replace(b"Relu", b"Nope"))
    result = gspo("convert", given, "-o", out)
    assert result.exit_code == 1 and "does not run" in result.output and not out.exists()


def test_convert_says_when_onnxruntime_cannot_load_the_model_as_given(tmp_path):
    model = relu_model()
    model.graph.node[0].op_type, model.graph.node[0].domain = "Foo", "custom.test"
    model.opset_import.add(domain="custom.test", version=1)
    line = one_line_error(gspo("convert", _write(tmp_path, model), "-o", tmp_path / "out.onnx"))
    assert "cannot check the converted model: onnxruntime cannot load the model" in line
    assert not (tmp_path / "out.onnx").exists()
