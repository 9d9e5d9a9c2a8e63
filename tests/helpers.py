"""Small graphs and model files shared by the tests."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from gspo.ir.builder import GraphBuilder


def branchy(channels: int = 4, size: int = 8, seed: int = 0):
    """x -> [Conv 1x1, Conv 3x3] -> Add -> Relu: a two-branch graph."""
    b = GraphBuilder("branchy", seed=seed)
    x = b.input("x", (1, channels, size, size))
    c1 = b.op("Conv", [x, b.weight("w1", (channels, channels, 1, 1))], kernel_shape=[1, 1])
    c3 = b.op("Conv", [x, b.weight("w3", (channels, channels, 3, 3))], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    y = b.op("Relu", [b.op("Add", [c1, c3])])
    return b.output(y).build()


def onnx_model(nodes, inputs, outputs, initializers=(), opset=17, ir_version=8) -> onnx.ModelProto:
    """A ModelProto made with onnx.helper (for loader tests)."""
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir_version
    return m


def relu_model(shape=(2, 3), opset=17, ir_version=8) -> onnx.ModelProto:
    return onnx_model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))],
        opset=opset,
        ir_version=ir_version,
    )


def random_array(shape, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def random_dag_graph(draw, st, max_nodes=30, shape=(1, 4)):
    """A random DAG of elementwise ops over one input (for hypothesis ``@st.composite``)."""
    n = draw(st.integers(1, max_nodes))
    b = GraphBuilder()
    values = [b.input("x", shape)]
    used = set()
    for _ in range(n):
        op = draw(st.sampled_from(["Relu", "Sigmoid", "Add", "Mul", "Tanh", "Max"]))
        a = draw(st.sampled_from(values))
        if op in ("Add", "Mul", "Max"):
            c = draw(st.sampled_from(values))
            values.append(b.op(op, [a, c]))
            used.update([a, c])
        else:
            values.append(b.op(op, [a]))
            used.add(a)
    outs = [v for v in values[1:] if v not in used]
    return b.output(*outs).build()


def one_line_error(result, code=2) -> str:
    """The one line a failed CLI run printed (``gspo: error: ...``), after checking its exit code."""
    assert result.exit_code == code, result.output
    lines = [line for line in result.output.strip().splitlines() if line]
    assert len(lines) == 1 and lines[0].startswith("gspo: error: "), result.output
    assert "Traceback" not in result.output
    return lines[0]
