"""Reduced precision is opt-in and never silent: its options are checked together, before any work."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from gspo import ir
from gspo.cli import cli
from gspo.errors import GspoError
from gspo.runtime.backends import backend_status, check_backends, load_runner
from gspo.search.config import check_options
from tests.helpers import branchy, one_line_error


def gspo(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def model(tmp_path):
    return ir.save(branchy(), tmp_path / "m.onnx")


@pytest.mark.parametrize("options, message", [
    ({"precision": "int8"}, "--precision needs an accuracy budget: give --max-error"),
    ({"precision": ("bf16",), "max_error": None}, "--precision needs an accuracy budget"),
    ({"max_error": "nmse=1e-3"}, "--max-error applies to reduced precision"),
    ({"precision": "fp32", "calibration": "c.npz"}, "--calibration applies to reduced precision"),
    ({"precision": "int2", "max_error": "nmse=1e-3"},
         "--precision takes fp32, bf16, int8, int4, fp16, tf32 (unknown: int2)"),
    ({"precision": "int8", "max_error": "nmse=1e-3", "device": "cuda", "cuda_runtime": "ort"},
     "--precision with --device cuda runs on the torch runtime (fp16, bf16, tf32): give --cuda-runtime torch"),
])
def test_the_precision_options_are_checked_together(options, message):
    with pytest.raises(GspoError, match=None) as e:
        check_options(options)
    assert message in str(e.value)


def test_precision_takes_a_comma_separated_list_and_the_default_is_exact_fp32():
    assert check_options({"precision": "bf16, INT8", "max_error": "nmse=1e-3"}).precision.precisions == ("bf16", "int8")
    assert check_options({}).precision.precisions == ()


def test_a_bad_budget_is_refused_before_any_work():
    with pytest.raises(GspoError):
        check_options({"precision": "int8", "max_error": "nmse"})


def test_the_cli_refuses_precision_without_a_budget_in_one_line(model, tmp_path):
    line = one_line_error(gspo("optimize", model, "-o", tmp_path / "o.onnx", "--precision", "int8"))
    assert "--max-error" in line
    assert not (tmp_path / "o.onnx").exists()


def test_the_bf16_backend_is_not_a_placement_the_exact_search_may_pick():
    with pytest.raises(GspoError, match="changes outputs: ask for it with --precision"):
        check_backends(["ort", "openvino:bf16"])


@pytest.mark.skipif(not backend_status("openvino:bf16")[0], reason="OpenVINO bf16 needs OpenVINO and bf16 instructions")
def test_the_bf16_backend_runs_at_bf16_and_the_plain_one_at_f32():
    graph = branchy(channels=16, size=16)
    feeds = {v.name: np.random.default_rng(0).standard_normal(v.shape).astype(np.float32) for v in graph.inputs}
    names = graph.output_names()
    exact = load_runner("ort", graph).run(names, feeds)[0]
    f32 = load_runner("openvino", graph).run(names, feeds)[0]
    bf16 = load_runner("openvino:bf16", graph).run(names, feeds)[0]
    scale = np.abs(exact).max()
    assert np.abs(f32 - exact).max() <= 1e-4 * scale
    assert 1e-4 * scale < np.abs(bf16 - exact).max() <= 0.1 * scale  # bf16 keeps 8 bits of mantissa


@pytest.mark.skipif(not backend_status("openvino")[0], reason="needs OpenVINO")
def test_the_openvino_probe_compiles_in_a_process_of_its_own_and_says_why_not():
    from onnx import helper

    from gspo.runtime.openvino import openvino_probe

    good = ir.serialize(branchy())
    assert openvino_probe(good) is None
    node = helper.make_node("NoSuchOp", ["x"], ["y"], domain="example.custom")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, [2])],
                              [helper.make_tensor_value_info("y", 1, [2])])
    bad = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("example.custom", 1)])
    why = openvino_probe(bad.SerializeToString())
    assert why is not None and why.startswith("OpenVINO cannot compile the model: ")
