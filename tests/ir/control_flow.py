"""Models with control flow, built in code: a voice-activity detector's shape (an ``If`` on the
sample rate whose branches hold an LSTM) and a Loop that runs it chunk by chunk."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

#: Hidden size of the LSTMs; a 16 kHz chunk has :data:`FRAME_16K` samples.
HIDDEN = 16
FRAME_16K = 64
FRAME_8K = 32


def _const(name: str, value) -> onnx.NodeProto:
    return h.make_node("Constant", [], [name], value=nh.from_array(np.asarray(value), name))


def _squeeze_if_single(tag: str, frames: str) -> onnx.NodeProto:
    """``frames`` [B, T, H] squeezed to [B, H] when T == 1, else left (as exporters write
    ``if x.shape[1] == 1: x = x.squeeze(1)``)."""
    then = h.make_graph([_const(f"{tag}_ax1", [1]), h.make_node("Squeeze", [frames, f"{tag}_ax1"], [f"{tag}_sq"])],
                        f"{tag}_squeeze", [], [h.make_tensor_value_info(f"{tag}_sq", T.FLOAT, None)])
    keep = h.make_graph([h.make_node("Identity", [frames], [f"{tag}_id"])],
                        f"{tag}_keep", [], [h.make_tensor_value_info(f"{tag}_id", T.FLOAT, None)])
    return h.make_node("If", [f"{tag}_single"], [f"{tag}_x2"], then_branch=then, else_branch=keep)


def lstm_branch(tag: str, frame: int, seed: int, audio: str = "input", state: str = "state") -> onnx.GraphProto:
    """One sample rate's detector: ``audio`` [B, N] (outer scope) cut into frames of ``frame``
    samples, an LSTM over the hidden ``state`` [2, B, H] (outer scope); outputs a probability
    [B, 1] and the next state. The LSTM needs its input of rank 3, so the branch runs only where
    N == ``frame`` (a single frame, squeezed by a nested If on the shape)."""
    rng = np.random.default_rng(seed)
    weights = [nh.from_array((rng.standard_normal(shape) * scale).astype(np.float32), f"{tag}_{name}")
               for name, shape, scale in (("W", (1, 4 * HIDDEN, HIDDEN), 0.3), ("R", (1, 4 * HIDDEN, HIDDEN), 0.3),
                                          ("P", (frame, HIDDEN), 0.1))]
    t = lambda name: f"{tag}_{name}"  # noqa: E731
    nodes = [
        _const(t("frames_shape"), [0, -1, frame]),
        h.make_node("Reshape", [audio, t("frames_shape")], [t("framed")]),
        h.make_node("MatMul", [t("framed"), t("P")], [t("f")]),
        h.make_node("Shape", [t("f")], [t("f_shape")]),
        _const(t("one"), 1),
        h.make_node("Gather", [t("f_shape"), t("one")], [t("count")], axis=0),
        h.make_node("Equal", [t("count"), t("one")], [t("single")]),
        _squeeze_if_single(tag, t("f")),
        _const(t("axis0"), [0]),
        h.make_node("Unsqueeze", [t("x2"), t("axis0")], [t("x")]),
        _const(t("zero"), 0),
        h.make_node("Gather", [state, t("zero")], [t("h0")], axis=0),
        h.make_node("Gather", [state, t("one")], [t("c0")], axis=0),
        h.make_node("Unsqueeze", [t("h0"), t("axis0")], [t("h0u")]),
        h.make_node("Unsqueeze", [t("c0"), t("axis0")], [t("c0u")]),
        h.make_node("LSTM", [t("x"), t("W"), t("R"), "", "", t("h0u"), t("c0u")], [t("Y"), t("Yh"), t("Yc")],
                    hidden_size=HIDDEN),
        h.make_node("Concat", [t("Yh"), t("Yc")], [t("state")], axis=0),
        h.make_node("ReduceMean", [t("Yh")], [t("mean")], axes=[2], keepdims=0),
        h.make_node("Sigmoid", [t("mean")], [t("prob")]),
    ]
    outputs = [h.make_tensor_value_info(t("prob"), T.FLOAT, None), h.make_tensor_value_info(t("state"), T.FLOAT, None)]
    return h.make_graph(nodes, f"{tag}_branch", [], outputs, initializer=weights)


def _sample_rate_if(outputs: list[str], audio: str, state: str, tag: str = "") -> list[onnx.NodeProto]:
    return [_const(f"{tag}sr16k", np.int64(16000)), h.make_node("Equal", ["sr", f"{tag}sr16k"], [f"{tag}is16k"]),
            h.make_node("If", [f"{tag}is16k"], outputs, name=f"{tag}If_0",
                        then_branch=lstm_branch(f"{tag}t", FRAME_16K, 1, audio, state),
                        else_branch=lstm_branch(f"{tag}e", FRAME_8K, 2, audio, state))]


def _model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    m = h.make_model(h.make_graph(nodes, "vad", inputs, outputs, initializer=list(initializers)),
                     opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def vad_model() -> onnx.ModelProto:
    """inputs ``input`` [?, ?] float, ``state`` [2, ?, H] float, ``sr`` int64 scalar; an If on
    ``sr == 16000`` whose branches hold an LSTM each. onnxruntime runs it at 16 kHz on
    [1, 64] samples, but refuses it with ``input`` pinned to [1, 64]: it infers shapes in the
    8 kHz branch too, which holds only for 32 samples."""
    return _model(_sample_rate_if(["prob", "new_state"], "input", "state"), [
        h.make_tensor_value_info("input", T.FLOAT, [None, None]),
        h.make_tensor_value_info("state", T.FLOAT, [2, None, HIDDEN]),
        h.make_tensor_value_info("sr", T.INT64, [])],
        [h.make_tensor_value_info("prob", T.FLOAT, [None, 1]),
         h.make_tensor_value_info("new_state", T.FLOAT, [2, None, HIDDEN])])


def streaming_vad_model(chunks: int = 3) -> onnx.ModelProto:
    """The detector of :func:`vad_model` run ``chunks`` times by a Loop that carries the state:
    the body reads ``input``, ``sr`` and the sample-rate constant from the outer scope."""
    body_nodes = _sample_rate_if(["prob_k", "s_out"], "input", "s_in", tag="b_")
    body_nodes.append(h.make_node("Identity", ["cond_in"], ["cond_out"]))
    body = h.make_graph(body_nodes, "chunk", [
        h.make_tensor_value_info("k", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []),
        h.make_tensor_value_info("s_in", T.FLOAT, None)],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("s_out", T.FLOAT, None),
         h.make_tensor_value_info("prob_k", T.FLOAT, None)])
    nodes = [h.make_node("Loop", ["chunks", "go", "state"], ["final_state", "probs"], body=body)]
    init = [nh.from_array(np.array(chunks, np.int64), "chunks"), nh.from_array(np.array(True), "go")]
    return _model(nodes, [
        h.make_tensor_value_info("input", T.FLOAT, [None, None]),
        h.make_tensor_value_info("state", T.FLOAT, [2, None, HIDDEN]),
        h.make_tensor_value_info("sr", T.INT64, [])],
        [h.make_tensor_value_info("final_state", T.FLOAT, [2, None, HIDDEN]),
         h.make_tensor_value_info("probs", T.FLOAT, [chunks, None, 1])], init)


#: ``--input-shape`` pins of the 16 kHz case.
PINS = {"input": (1, FRAME_16K), "state": (2, 1, HIDDEN)}


def feeds(seed: int = 0) -> dict[str, np.ndarray]:
    """Valid inputs at 16 kHz for both models."""
    rng = np.random.default_rng(seed)
    return {"input": rng.standard_normal((1, FRAME_16K)).astype(np.float32),
            "state": rng.standard_normal((2, 1, HIDDEN)).astype(np.float32) * 0.1,
            "sr": np.array(16000, np.int64)}


def simple_if_model() -> onnx.ModelProto:
    """``Relu(x)`` if ``flag`` else ``Neg(x)``, x [?, 4]: its branches hold at every size."""
    then = h.make_graph([h.make_node("Relu", ["x"], ["r"])], "then", [], [h.make_tensor_value_info("r", T.FLOAT, None)])
    other = h.make_graph([h.make_node("Neg", ["x"], ["n"])], "else", [], [h.make_tensor_value_info("n", T.FLOAT, None)])
    return _model([h.make_node("If", ["flag"], ["y"], then_branch=then, else_branch=other)],
                  [h.make_tensor_value_info("x", T.FLOAT, [None, 4]), h.make_tensor_value_info("flag", T.BOOL, [])],
                  [h.make_tensor_value_info("y", T.FLOAT, [None, 4])])
