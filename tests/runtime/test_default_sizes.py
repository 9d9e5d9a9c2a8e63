"""A model that fails at the sizes gspo chose for its dynamic dimensions: which dimensions, why
(onnxruntime's reason on one line), and the --input-shape with which it runs."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from gspo import ir
from gspo.runtime import make_session, random_inputs, run
from gspo.runtime.default_sizes import explain_defaults_failure, onnxruntime_reason
from tests.helpers import onnx_model, relu_model

HIDDEN = 8


def vad_like(tmp_path, state_dims=(2, "?", HIDDEN)) -> str:
    """An exported voice-activity detector's shape: ``inp[b, 8]`` and ``state[2, ?, 8]``; the
    LSTM's initial state (``state[0:1]``) must have the input's batch (1), not 128."""
    ints = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((1, 4 * HIDDEN, n)).astype(np.float32), name)
               for name, n in (("W", 8), ("R", HIDDEN))]
    nodes = [helper.make_node("Unsqueeze", ["inp", "zero"], ["X"]),
             helper.make_node("Slice", ["state", "zero", "one", "zero"], ["h0"]),
             helper.make_node("LSTM", ["X", "W", "R", "", "", "h0"], ["Y", "Yh"], hidden_size=HIDDEN)]
    dims = [None if d == "?" else d for d in state_dims]
    m = onnx_model(nodes, [helper.make_tensor_value_info("inp", TensorProto.FLOAT, ["b", 8]),
                           helper.make_tensor_value_info("state", TensorProto.FLOAT, dims)],
                   [helper.make_tensor_value_info("Yh", TensorProto.FLOAT, ["d", "b", HIDDEN])],
                   [*weights, ints("zero", [0]), ints("one", [1])])
    path = tmp_path / "vad.onnx"
    onnx.save(m, path)
    return str(path)


def reshape_tied(tmp_path) -> str:
    """``x[N, 4] + Reshape(s[2, K, 4], [2, 1, 4])``: runs only with K = 1 (the default is 128)."""
    m = onnx_model([helper.make_node("Reshape", ["s", "shape"], ["r"]), helper.make_node("Add", ["x", "r"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4]),
                    helper.make_tensor_value_info("s", TensorProto.FLOAT, [2, "K", 4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "N", 4])],
                   [numpy_helper.from_array(np.array([2, 1, 4], np.int64), "shape")])
    path = tmp_path / "tied.onnx"
    onnx.save(m, path)
    return str(path)


def test_the_lstm_state_pinned_to_128_is_named_with_the_flag_that_runs(tmp_path):
    graph = ir.load(vad_like(tmp_path))
    message = explain_defaults_failure(graph, seed=0)
    assert message.startswith("onnxruntime cannot run the model at the sizes gspo chose for its dynamic "
                              "dimensions (inp dim 0 (b) -> 1; state dim 1 -> 128): ")
    assert "LSTM node: Input initial_h must have shape {1,1,8}. Actual:{1,128,8}" in message
    assert "it runs with --input-shape state=2,1,8 " in message and "--inputs FEEDS.npz" in message
    assert "\n" not in message and "ONNXRuntimeError" not in message
    fixed = ir.load(vad_like(tmp_path), {"state": (2, 1, HIDDEN)})  # the flag, taken at its word
    assert run(make_session(fixed), random_inputs(fixed, 0))["Yh"].shape == (1, 1, HIDDEN)


def test_a_reshape_tied_to_a_symbol_is_explained_without_the_cpp_signature(tmp_path):
    message = explain_defaults_failure(ir.load(reshape_tied(tmp_path)), seed=3)
    assert "(x dim 0 (N) -> 1; s dim 1 (K) -> 128)" in message
    assert ("Reshape node: The input tensor cannot be reshaped to the requested shape. "
            "Input shape:{2,128,4}, requested shape:{2,1,4}") in message
    assert "onnxruntime::" not in message and "was false" not in message
    assert "it runs with --input-shape s=2,1,4 " in message


def test_no_explanation_when_the_model_runs_or_nothing_was_defaulted(tmp_path):
    assert explain_defaults_failure(ir.load(reshape_tied(tmp_path), {"s": (2, 1, 4)})) is None
    path = tmp_path / "relu.onnx"
    onnx.save(relu_model(), path)
    assert explain_defaults_failure(ir.load(str(path))) is None


def test_when_no_size_tried_runs_the_flags_to_choose_are_given(tmp_path):
    """``Reshape(s[2, K, 4], [2, 3, 4])`` runs only with K = 3: 1 does not run either."""
    m = onnx_model([helper.make_node("Reshape", ["s", "shape"], ["y"])],
                   [helper.make_tensor_value_info("s", TensorProto.FLOAT, [2, "K", 4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])],
                   [numpy_helper.from_array(np.array([2, 3, 4], np.int64), "shape")])
    path = tmp_path / "three.onnx"
    onnx.save(m, path)
    message = explain_defaults_failure(ir.load(str(path)))
    assert "(s dim 1 (K) -> 128), nor with them set to 1: Reshape node" in message and "it runs with" not in message
    assert "pass the sizes the model takes with --input-shape (now --input-shape s=2,128,4)" in message


def test_onnxruntime_reason_keeps_the_node_and_the_message():
    raw = ("[ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running Reshape node. "
           "Name:'/model/Reshape_3' Status Message: /onnxruntime_src/onnxruntime/core/providers/cpu/tensor/"
           "reshape_helper.h:91 onnxruntime::ReshapeHelper::ReshapeHelper(const onnxruntime::TensorShape&, "
           "bool) input_shape_size == requested_shape_size was false. The input tensor cannot be reshaped.\n")
    assert onnxruntime_reason(RuntimeError(raw)) == "Reshape node '/model/Reshape_3': The input tensor cannot be reshaped."
    assert onnxruntime_reason(RuntimeError("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Got invalid dimensions")) == \
        "Got invalid dimensions"
