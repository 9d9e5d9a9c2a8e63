"""Small graphs and model files shared by the tests."""

from __future__ import annotations

import re
from pathlib import Path

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


def documented_report_keys() -> list[str]:
    """The report's keys in the order docs/optimize.md lists them (``gspo optimize --report``)."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "optimize.md").read_text()
    listed = re.search(r"Its keys, in this order: (.*?)\.\n", text, re.S)
    assert listed, "docs/optimize.md lists the report's keys"
    return re.findall(r"`(\w+)`", listed.group(1))


def sample_report(**fields):
    """A :class:`~gspo.search.report.Report` of a faster model, with ``fields`` changed."""
    from gspo.search.report import Report

    base = dict(
        model="m", machine="cpu:test:2c", profile="cpu", profile_device="cpu:test:2c", pieces=2, threshold=64,
        cut_weight=0.0, frontend={"nodes_in_file": 3, "nodes_plain": 3, "used": False}, notes=[], dynamic_dims=None,
        search_seconds=1.0, total_seconds=2.0, latency_before_ms=3.4, latency_after_ms=3.1, speedup=1.097,
        timing_spread=0.12, rounds_faster=[57, 60], verdict="faster", estimated_before_ms=3.0,
        estimated_after_ms=3.0, chosen="optimized", select="measured", unchanged=False, substitutions={},
        streams=1, syncs=0, equivalence={}, max_rel_err=0.0, candidates_rejected_by_verification=0, rejected=[],
        invalid_rewrites={}, final_candidates=[], confirmations=[], final_streams_skipped=None, pieces_detail=[],
        config={}, inputs="random", device={"device": "cpu"}, settings={"advice": None}, placement={"chosen": {}},
        skipped=[],
    )
    return Report(**{**base, **fields})


def perturbed_pair(folder: Path):
    """:func:`branchy` saved in ``folder`` as ``a.onnx``, and as ``b.onnx`` with one weight moved by
    1e-2: two models that differ a little (their paths, and the graph)."""
    from gspo import ir
    from gspo.ir import Literal

    g = branchy()
    a = ir.save(g, Path(folder) / "a.onnx")
    name = next(n for n in g.weights if "w3" in n)
    w = g.weights[name].evaluate(g.store).copy()
    w.flat[0] += 1e-2
    b = ir.save(g.replace_nodes(weights={name: Literal.from_array(w)}), Path(folder) / "b.onnx")
    return a, b, g


def python_calls(fn, *args, **kwargs):
    """``fn(*args, **kwargs)``'s result and how many Python calls it made (each step of a
    generator or comprehension counts; this thread only): its work, counted rather than timed,
    so a bound on it holds however busy the machine is."""
    import sys

    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        if event == "call":
            calls += 1

    previous = sys.getprofile()
    sys.setprofile(count)
    try:
        result = fn(*args, **kwargs)
    finally:
        sys.setprofile(previous)
    return result, calls
