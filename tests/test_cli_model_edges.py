"""Models at the edges that onnxruntime runs (or refuses): optimized, handed back, or refused in one line."""

from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from gspo.cli import cli
from tests.helpers import one_line_error, onnx_model


def gspo(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _write(tmp_path, model, name="m.onnx"):
    path = tmp_path / name
    path.write_bytes(model.SerializeToString())
    return path


def _vi(name, dims):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


def _relu_chain(dim):
    return onnx_model([helper.make_node("Relu", ["x"], ["t"]), helper.make_node("Relu", ["t"], ["y"])],
                      [_vi("x", [dim, 4])], [_vi("y", [dim, 4])])


def _optimized_and_equivalent(tmp_path, path, *extra) -> None:
    out = tmp_path / "out.onnx"
    result = gspo("optimize", path, "-o", out, "--time-budget", 10, *extra)
    assert result.exit_code == 0, result.output
    assert gspo("verify", path, out).exit_code == 0


def test_a_negative_dimension_is_dynamic_and_info_counts_positive_flops(tmp_path):
    path = _write(tmp_path, _relu_chain(-5))
    data = json.loads(gspo("info", path, "--json").stdout)
    assert data["inputs"] == {"x": [1, 4]} and data["flops"] == 8 and data["bytes_read"] == 32
    _optimized_and_equivalent(tmp_path, path, "--backends", "ort")


def test_a_dimension_of_2_to_the_62_is_refused_naming_the_value_and_dimension(tmp_path):
    path = _write(tmp_path, _relu_chain(2**62))
    for command in (["info", path], ["optimize", path, "-o", tmp_path / "o.onnx"]):
        line = one_line_error(gspo(*command))
        assert "value 'x' of shape [4611686018427387904, 4]" in line and "dimension 0 is 4611686018427387904" in line


def test_a_graph_with_no_nodes_is_handed_back(tmp_path):
    path = _write(tmp_path, onnx_model([], [_vi("x", [2, 4])], [_vi("x", [2, 4])]))
    assert json.loads(gspo("info", path, "--json").stdout)["inputs"] == {"x": [2, 4]}
    _optimized_and_equivalent(tmp_path, path, "--backends", "ort")
    assert gspo("convert", path, "-o", tmp_path / "c.onnx").exit_code == 0


def test_an_initializer_that_is_also_a_graph_output_is_optimized_on_every_backend(tmp_path):
    w = numpy_helper.from_array(np.ones((2, 4), np.float32), "w")
    model = onnx_model([helper.make_node("Add", ["x", "w"], ["y"])], [_vi("x", [2, 4])],
                       [_vi("y", [2, 4]), _vi("w", [2, 4])], [w])
    _optimized_and_equivalent(tmp_path, _write(tmp_path, model))


def test_unsorted_nodes_onnxruntime_runs_are_optimized(tmp_path):
    nodes = [helper.make_node("Relu", ["a"], ["y"]), helper.make_node("Neg", ["x"], ["a"])]
    _optimized_and_equivalent(tmp_path, _write(tmp_path, onnx_model(nodes, [_vi("x", [2, 4])], [_vi("y", [2, 4])])),
                              "--backends", "ort")


def test_a_dangling_input_is_one_full_line_naming_the_node_and_value(tmp_path):
    model = onnx_model([helper.make_node("Add", ["x", "b2"], ["y"], name="add0")], [_vi("x", [2, 4])],
                       [_vi("y", [2, 4])])
    line = one_line_error(gspo("optimize", _write(tmp_path, model), "-o", tmp_path / "o.onnx"))
    assert line.endswith("node 'add0' (Add) reads 'b2', which is not a graph input, an initializer or the output "
                         "of any node")


def test_inputs_and_outputs_without_a_shape_onnxruntime_runs_are_optimized(tmp_path):
    no_shape = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    out_path = _write(tmp_path, onnx_model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2, 4])],
                                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]))
    _optimized_and_equivalent(tmp_path, out_path, "--backends", "ort")
    in_path = _write(tmp_path, onnx_model([helper.make_node("Relu", ["x"], ["y"])], [no_shape], [_vi("y", [2, 4])]),
                     "in.onnx")
    assert "give one with --input-shape x=" in one_line_error(gspo("info", in_path))
    result = gspo("optimize", in_path, "-o", tmp_path / "in.o.onnx", "--input-shape", "x=2,4", "--backends", "ort",
                  "--time-budget", 10)
    assert result.exit_code == 0, result.output
