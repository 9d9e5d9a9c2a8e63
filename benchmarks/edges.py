"""The models and timings behind benchmarks/edges.md (issue 42's cases 4, 5 and 7).

Usage:
    .venv/bin/python benchmarks/edges.py relu 60000 60000 -o relu60k.onnx    # a Relu over [60000, 60000]
    .venv/bin/python benchmarks/edges.py nested-if 25 -o nested25.onnx       # 25 Ifs nested in one another
    .venv/bin/python benchmarks/edges.py openvino-compile 10 12 14 16 18 20  # OpenVINO's compile seconds per depth
    .venv/bin/python benchmarks/edges.py gather 550000 1000 -o in2.onnx   # one 2.2 GB table in in2.onnx.data
    .venv/bin/python benchmarks/edges.py matmuls 4 5000 -o mm.onnx        # 4 parallel MatMuls, 400 MB of weights
"""

from __future__ import annotations

import argparse
import io
import os
import time

import numpy as np
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


def gather(rows: int, cols: int, path: str, indices: int = 64) -> None:
    """y = Gather(table, idx): one float32 table [rows, cols] kept in ``<path>.data`` (written
    in chunks of rows, never whole in memory), idx int64[indices]."""
    data = os.path.basename(path) + ".data"
    rng = np.random.default_rng(0)
    with open(path + ".data", "wb") as out:
        for start in range(0, rows, 8192):
            out.write(rng.standard_normal((min(8192, rows - start), cols), dtype=np.float32).tobytes())
    table = onnx.TensorProto(name="table", data_type=T.FLOAT, dims=[rows, cols], data_location=T.EXTERNAL)
    for k, v in (("location", data), ("offset", "0"), ("length", str(rows * cols * 4))):
        table.external_data.add(key=k, value=v)
    g = h.make_graph([h.make_node("Gather", ["table", "idx"], ["y"], axis=0)], "gather",
                     [h.make_tensor_value_info("idx", T.INT64, [indices])],
                     [h.make_tensor_value_info("y", T.FLOAT, [indices, cols])], initializer=[table])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    with open(path, "wb") as f:
        f.write(m.SerializeToString())


def matmuls(count: int, size: int, batch: int = 8) -> onnx.ModelProto:
    """``count`` MatMuls of one input x float32[batch, size], each by its own float32[size, size]
    weight (``count * size * size * 4`` bytes of weights), each its own output."""
    rng = np.random.default_rng(0)
    weights = [onnx.numpy_helper.from_array(rng.standard_normal((size, size), dtype=np.float32), f"w{k}")
               for k in range(count)]
    g = h.make_graph([h.make_node("MatMul", ["x", f"w{k}"], [f"y{k}"]) for k in range(count)], "matmuls",
                     [h.make_tensor_value_info("x", T.FLOAT, [batch, size])],
                     [h.make_tensor_value_info(f"y{k}", T.FLOAT, [batch, size]) for k in range(count)],
                     initializer=weights)
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
    for what, numbers in (("relu", ("rows", "cols")), ("nested-if", ("depth",)), ("gather", ("rows", "cols")),
                          ("matmuls", ("count", "size"))):
        p = sub.add_parser(what)
        for name in numbers:
            p.add_argument(name, type=int)
        p.add_argument("-o", required=True)
    c = sub.add_parser("openvino-compile")
    c.add_argument("depths", type=int, nargs="+")
    args = ap.parse_args()
    if args.what == "relu":
        onnx.save(relu(args.rows, args.cols), args.o)
    elif args.what == "gather":
        gather(args.rows, args.cols, args.o)
    elif args.what == "matmuls":
        onnx.save(matmuls(args.count, args.size), args.o)
    elif args.what == "nested-if":
        onnx.save(nested_if(args.depth), args.o)
    else:
        openvino_compile(args.depths)


if __name__ == "__main__":
    main()
