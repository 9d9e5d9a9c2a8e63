"""The models and timings behind benchmarks/edges.md (issue 42's cases 4, 5 and 7).

Usage:
    .venv/bin/python benchmarks/edges.py relu 60000 60000 -o relu60k.onnx    # a Relu over [60000, 60000]
    .venv/bin/python benchmarks/edges.py nested-if 25 -o nested25.onnx       # 25 Ifs nested in one another
    .venv/bin/python benchmarks/edges.py openvino-compile 10 12 14 16 18 20  # OpenVINO's compile seconds per depth
"""

from __future__ import annotations

import argparse
import io
import time

import onnx
from onnx import TensorProto as T
from onnx import helper as h


def relu(rows: int, cols: int) -> onnx.ModelProto:
    """y = Relu(x), x float32[rows, cols] (nothing but its inputs and outputs is large)."""
    g = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "relu", [h.make_tensor_value_info("x", T.FLOAT, [rows, cols])],
                     [h.make_tensor_value_info("y", T.FLOAT, [rows, cols])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def nested_if(depth: int, n: int = 4) -> onnx.ModelProto:
    """``depth`` Ifs nested in one another's then-branches (each else-branch a Neg of x): the
    model grows linearly with the depth, OpenVINO's compile of it exponentially."""
    def leaf(level: int) -> onnx.GraphProto:
        out = f"y{level}e"
        return h.make_graph([h.make_node("Neg", ["x"], [out])], f"{out}_g", [], [h.make_tensor_value_info(out, T.FLOAT, [n])])

    def branch(level: int) -> onnx.GraphProto:
        out = f"y{level}t"
        k = h.make_node("Constant", [], [f"{out}_k"], value=h.make_tensor(f"{out}_kv", T.FLOAT, [1], [float(level)]))
        if level == depth:
            nodes = [k, h.make_node("Add", ["x", f"{out}_k"], [out])]
        else:
            nodes = [k, h.make_node("If", ["c"], [f"{out}_in"], then_branch=branch(level + 1), else_branch=leaf(level + 1)),
                     h.make_node("Add", [f"{out}_in", f"{out}_k"], [out])]
        return h.make_graph(nodes, f"{out}_g", [], [h.make_tensor_value_info(out, T.FLOAT, [n])])

    top = h.make_node("If", ["c"], ["y"], then_branch=branch(1), else_branch=leaf(1))
    g = h.make_graph([top], "nested", [h.make_tensor_value_info("x", T.FLOAT, [n]),
                                       h.make_tensor_value_info("c", T.BOOL, [])],
                     [h.make_tensor_value_info("y", T.FLOAT, [n])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def openvino_compile(depths: list[int]) -> None:
    """Seconds OpenVINO's CPU plugin takes to compile :func:`nested_if` of each depth, with the
    properties gspo compiles with (gspo.runtime.backends)."""
    import openvino

    core = openvino.Core()
    for depth in depths:
        data = nested_if(depth).SerializeToString()
        began = time.perf_counter()
        core.compile_model(core.read_model(io.BytesIO(data)), "CPU",
                           {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"})
        print(f"{depth} nested Ifs: compiled in {time.perf_counter() - began:.2f} s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    r = sub.add_parser("relu")
    r.add_argument("rows", type=int)
    r.add_argument("cols", type=int)
    r.add_argument("-o", required=True)
    n = sub.add_parser("nested-if")
    n.add_argument("depth", type=int)
    n.add_argument("-o", required=True)
    c = sub.add_parser("openvino-compile")
    c.add_argument("depths", type=int, nargs="+")
    args = ap.parse_args()
    if args.what == "relu":
        onnx.save(relu(args.rows, args.cols), args.o)
    elif args.what == "nested-if":
        onnx.save(nested_if(args.depth), args.o)
    else:
        openvino_compile(args.depths)


if __name__ == "__main__":
    main()
