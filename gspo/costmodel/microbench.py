"""The generated microbenchmark suite: representative single ops and multi-branch subgraphs.

Sizes span the zoo models' ranges but are drawn from a synthetic grid (a fixed seed), so the
subgraphs that evaluate the model, cut from the zoo models, are held out from fitting.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass

import numpy as np

from gspo.ir import Graph
from gspo.ir.builder import GraphBuilder

__all__ = ["Bench", "single_ops", "multi_branch", "chains", "zoo_pieces", "launch_graph", "stream_cap"]


@dataclass(frozen=True)
class Bench:
    """One calibration benchmark: its kind ("op", "chain", "branches" or "piece") and spec."""

    kind: str  # "op", "chain", "branches" or "piece"
    spec: dict

    @property
    def signature(self) -> str:
        """The benchmark's key in the calibration database (its kind and spec as JSON)."""
        return json.dumps({"kind": self.kind, **self.spec}, sort_keys=True)

    def build(self) -> Graph:
        """The benchmark's graph."""
        if self.kind == "piece":
            from gspo.costmodel.subgraphs import zoo_piece

            return zoo_piece(self.spec["label"])
        return {"op": _build_op, "branches": _build_branches, "chain": _build_chain}[self.kind](self.spec)


def _conv(b, x, cout, k, stride=1, group=1):
    cin = b.shape(x)[1]
    kh, kw = (k, k) if isinstance(k, int) else k
    return b.op("Conv", [x, b.weight("w", (cout, cin // group, kh, kw)), b.weight("b", (cout,), scale=0.1)],
                kernel_shape=[kh, kw], strides=[stride, stride], pads=[kh // 2, kw // 2, kh // 2, kw // 2], group=group)


def _build_op(s: dict) -> Graph:
    b = GraphBuilder("bench", seed=1)
    op = s["op"]
    if op == "Conv":
        x = b.input("x", (1, s["cin"], s["hw"], s["hw"]))
        y = _conv(b, x, s["cout"], tuple(s["k"]), s["stride"], s["group"])
    elif op == "MatMul":
        x = b.input("x", tuple(s["a"]))
        y = b.op("MatMul", [x, b.weight("w", tuple(s["b"]), scale=0.05)] if s.get("const", True) else [x, b.input("y", tuple(s["b"]))])
    elif op == "Gemm":
        x = b.input("x", (s["m"], s["k"]))
        y = b.op("Gemm", [x, b.weight("w", (s["n"], s["k"]), scale=0.05), b.weight("c", (s["n"],))], transB=1)
    elif op in ("Relu", "Sigmoid", "Tanh", "Erf", "Exp"):
        y = b.op(op, [b.input("x", tuple(s["shape"]))])
    elif op in ("Add", "Mul", "Div", "Sub"):
        y = b.op(op, [b.input("x", tuple(s["shape"])), b.input("y", tuple(s["shape"]))])
    elif op in ("MaxPool", "AveragePool"):
        x = b.input("x", tuple(s["shape"]))
        y = b.op(op, [x], kernel_shape=[s["k"]] * 2, strides=[s["stride"]] * 2, pads=[s["k"] // 2] * 4)
    elif op == "GlobalAveragePool":
        y = b.op(op, [b.input("x", tuple(s["shape"]))])
    elif op == "BatchNormalization":
        x = b.input("x", tuple(s["shape"]))
        c = s["shape"][1]
        y = b.op(op, [x] + [b.weight(n, (c,), loc=1.0, scale=0.1) for n in ("g", "b", "m", "v")])
    elif op == "LayerNormalization":
        x = b.input("x", tuple(s["shape"]))
        y = b.op(op, [x, b.weight("g", (s["shape"][-1],)), b.weight("b", (s["shape"][-1],))], axis=-1)
    elif op == "SkipLayerNorm":  # Add + LayerNormalization: onnxruntime fuses them
        shape = tuple(s["shape"])
        x = b.op("Add", [b.input("x", shape), b.input("r", shape)])
        y = b.op("LayerNormalization", [x, b.weight("g", (shape[-1],)), b.weight("b", (shape[-1],))], axis=-1)
    elif op == "Softmax":
        y = b.op(op, [b.input("x", tuple(s["shape"]))], axis=-1)
    elif op == "Concat":
        xs = [b.input(f"x{i}", tuple(s["shape"])) for i in range(s["n"])]
        y = b.op("Concat", xs, axis=1)
    elif op == "Split":
        x = b.input("x", tuple(s["shape"]))
        n = s["n"]
        y = b.op("Split", [x, b.const("s", np.full(n, s["shape"][1] // n))], n_outputs=n, axis=1)
        return b.output(*y).build()
    elif op == "Transpose":
        y = b.op("Transpose", [b.input("x", tuple(s["shape"]))], perm=s["perm"])
    elif op == "Reshape":
        x = b.input("x", tuple(s["shape"]))
        y = b.op("Reshape", [x, b.const("s", np.array([1, -1]))])
    else:
        raise ValueError(op)
    return b.output(y).build()


def single_ops(seed: int = 0) -> list[Bench]:
    """About 300 single-op graphs across the op families."""
    rng = random.Random(seed)
    return _conv_ops(rng, seed) + _matmul_ops(rng, seed) + _other_ops(rng)


def _conv_ops(rng: random.Random, seed: int) -> list[Bench]:
    """Convolutions: ordinary, depthwise, and depthwise with channel counts off the fast path."""
    convs = set()
    while len(convs) < 110:
        hw = rng.choice([7, 14, 17, 28, 35, 56, 83])
        cin = rng.choice([16, 32, 48, 64, 96, 128, 192, 256, 384, 512])
        kind = rng.random()
        if kind < 0.2:  # depthwise
            k = rng.choice([3, 5, 7])
            convs.add((cin, cin, (k, k), rng.choice([1, 2]), cin, hw))
        else:
            cout = rng.choice([16, 32, 48, 64, 96, 128, 192, 256, 384, 512])
            k = rng.choice([(1, 1), (1, 1), (3, 3), (3, 3), (5, 5), (1, 7), (7, 1), (1, 3), (3, 1)])
            convs.add((cin, cout, k, rng.choice([1, 1, 2]), 1, hw))
    # Depthwise convolutions with channel counts off onnxruntime's fast path (not a multiple of 4)
    # and their aligned neighbours, from a second generator so the draws above stay as they were.
    rng2 = random.Random(seed + 1)
    for c in (6, 10, 14, 18, 21, 26, 30, 42, 54, 66, 90, 126):
        for ch in (c, c + (-c) % 4):
            hw = rng2.choice([14, 28, 42, 56, 83, 111])
            k = rng2.choice([3, 5, 7])
            convs.add((ch, ch, (k, k), rng2.choice([1, 2]), ch, hw))
    return [Bench("op", {"op": "Conv", "cin": cin, "cout": cout, "k": list(k), "stride": stride, "group": group, "hw": hw})
            for cin, cout, k, stride, group, hw in sorted(convs)]


def _matmul_ops(rng: random.Random, seed: int) -> list[Bench]:
    """MatMuls (constant and variable right operands, the large end apart) and Gemms."""
    out: list[Bench] = []
    mms = set()
    while len(mms) < 45:
        m = rng.choice([1, 1, 8, 32, 128])
        k = rng.choice([64, 256, 512, 768, 1024, 2048, 3072])
        n = rng.choice([64, 256, 512, 768, 1024, 3072, 4096])
        mms.add(((1, m, k) if rng.random() < 0.5 else (m, k), (k, n)))
    mms.update({((1, 12, 128, 64), (1, 12, 64, 128)), ((1, 12, 128, 128), (1, 12, 128, 64)), ((1, 4, 64, 32), (1, 4, 32, 64))})
    # The large end (M 128-512, K and N 768-4096), where the fit extrapolated: from a third
    # generator, so the draws above and below stay as they were.
    rng3 = random.Random(seed + 2)
    large: set = set()
    while len(large) < 12:
        m = rng3.choice([128, 256, 512])
        k = rng3.choice([768, 1024, 2048, 3072, 4096])
        n = rng3.choice([768, 1024, 2048, 3072, 4096])
        if 2 * m * k * n <= 4e9:  # at most ~40 ms per run
            large.add(((1, m, k) if rng3.random() < 0.5 else (m, k), (k, n)))
    mms.update(large)
    for a, bshape in sorted(mms):
        out.append(Bench("op", {"op": "MatMul", "a": list(a), "b": list(bshape), "const": len(a) <= 3}))
    for m, k, n in [(1, 2048, 1000), (1, 4032, 1000), (1, 1056, 1000), (1, 768, 768), (1, 512, 100), (4, 256, 256)]:
        out.append(Bench("op", {"op": "Gemm", "m": m, "k": k, "n": n}))
    return out


def _other_ops(rng: random.Random) -> list[Bench]:
    """Elementwise ops, pooling, normalizations, Softmax and data movement."""
    out: list[Bench] = []
    sizes = [(1, 64, 56, 56), (1, 32, 112, 112), (1, 256, 28, 28), (1, 512, 14, 14), (1, 1024, 7, 7), (1, 128, 768),
             (1, 128, 3072), (1, 512), (1, 4096), (1, 96, 83, 83), (1, 12, 128, 128), (1, 44, 28, 28)]
    for op in ("Relu", "Sigmoid", "Tanh", "Erf", "Add", "Mul", "Div"):
        for shape in rng.sample(sizes, 6):
            out.append(Bench("op", {"op": op, "shape": list(shape)}))
    for op in ("MaxPool", "AveragePool"):
        for shape in [(1, 64, 112, 112), (1, 192, 35, 35), (1, 96, 83, 83), (1, 256, 28, 28), (1, 768, 17, 17), (1, 44, 56, 56)]:
            for stride in (1, 2):
                out.append(Bench("op", {"op": op, "shape": list(shape), "k": 3, "stride": stride}))
    for shape in [(1, 2048, 8, 8), (1, 4032, 11, 11), (1, 512, 14, 14), (1, 1056, 7, 7)]:
        out.append(Bench("op", {"op": "GlobalAveragePool", "shape": list(shape)}))
    for shape in [(1, 64, 112, 112), (1, 256, 56, 56), (1, 512, 28, 28), (1, 168, 42, 42), (1, 1024, 14, 14), (1, 2048, 7, 7)]:
        out.append(Bench("op", {"op": "BatchNormalization", "shape": list(shape)}))
    for shape in [(1, 128, 768), (1, 16, 64), (1, 128, 256), (1, 64, 1024)]:
        out.append(Bench("op", {"op": "LayerNormalization", "shape": list(shape)}))
    for shape in [(1, 16, 128), (1, 32, 256), (1, 64, 256), (1, 128, 256), (1, 64, 512), (1, 128, 512), (1, 128, 768),
                  (1, 256, 768), (1, 384, 768), (1, 128, 1024), (1, 256, 1024), (1, 512, 1024)]:
        out.append(Bench("op", {"op": "SkipLayerNorm", "shape": list(shape)}))
    for shape in [(1, 12, 128, 128), (1, 4, 16, 16), (1, 1000), (1, 8, 64, 64)]:
        out.append(Bench("op", {"op": "Softmax", "shape": list(shape)}))
    for shape in [(1, 64, 28, 28), (1, 168, 42, 42), (1, 256, 14, 14), (1, 32, 56, 56), (1, 512, 7, 7)]:
        for n in (2, 4):
            out.append(Bench("op", {"op": "Concat", "shape": list(shape), "n": n}))
            out.append(Bench("op", {"op": "Split", "shape": [shape[0], shape[1] * n, *shape[2:]], "n": n}))
    for shape, perm in [((1, 128, 12, 64), [0, 2, 1, 3]), ((1, 12, 128, 64), [0, 2, 1, 3]), ((1, 128, 12, 64), [0, 2, 3, 1]),
                        ((1, 64, 56, 56), [0, 2, 3, 1])]:
        out.append(Bench("op", {"op": "Transpose", "shape": list(shape), "perm": perm}))
    for shape in [(1, 2048, 1, 1), (1, 128, 768), (1, 64, 56, 56)]:
        out.append(Bench("op", {"op": "Reshape", "shape": list(shape)}))
    return out


def _build_branches(s: dict) -> Graph:
    b = GraphBuilder("branches", seed=2)
    if s.get("stack") == "mlp":
        x = b.input("x", (1, s["m"], s["h"]))
    else:
        x = b.input("x", (1, s["c"], s["hw"], s["hw"]))
    outs = []
    for branch in s["branches"]:
        y = x
        for op in branch:
            if op["op"] == "Linear":
                y = b.op("MatMul", [y, b.weight("w", (s["h"], s["h"]), scale=0.05)])
            elif op["op"] == "Conv":
                y = b.op("Relu", [_conv(b, y, s["c"], tuple(op["k"]))])
            elif op["op"] == "Pool":
                y = b.op("AveragePool", [y], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
            else:
                y = b.op(op["op"], [y])
        outs.append(y)
    total = outs[0]
    for o in outs[1:]:
        total = b.op("Add", [total, o])
    return b.output(total).build()


def multi_branch(seed: int = 0, count: int = 60) -> list[Bench]:
    """Fork-join subgraphs with 2..8 branches of different lengths, kernels and op mixes."""
    rng = random.Random(seed + 1)
    out = []
    for _ in range(count):
        n = rng.randint(2, 8)
        c = rng.choice([8, 16, 32, 64, 128])
        hw = rng.choice([7, 14, 28, 35])
        branches = []
        for _ in range(n):
            length = rng.randint(1, 4)
            ops = []
            for _ in range(length):
                r = rng.random()
                if r < 0.6:
                    ops.append({"op": "Conv", "k": list(rng.choice([(1, 1), (3, 3), (5, 5), (1, 7), (7, 1)]))})
                elif r < 0.8:
                    ops.append({"op": "Pool"})
                else:
                    ops.append({"op": rng.choice(["Sigmoid", "Tanh", "Relu"])})
            branches.append(ops)
        out.append(Bench("branches", {"v": 2, "c": c, "hw": hw, "branches": branches}))
    for _ in range(count // 2):  # MatMul and elementwise branches (NasRNN gates, attention heads)
        n = rng.randint(2, 8)
        branches = [[{"op": "Linear"} if rng.random() < 0.5 else {"op": rng.choice(["Sigmoid", "Tanh", "Relu"])}
                     for _ in range(rng.randint(1, 4))] for _ in range(n)]
        out.append(Bench("branches", {"v": 2, "stack": "mlp", "m": rng.choice([1, 1, 16, 128]),
                                      "h": rng.choice([64, 256, 512, 768]), "branches": branches}))
    return out


def _build_chain(s: dict) -> Graph:
    b = GraphBuilder("chain", seed=3)
    if s["stack"] == "conv":
        y = b.input("x", (1, s["c"], s["hw"], s["hw"]))
        for op in s["ops"]:
            if op == "convbnrelu":
                c = _conv(b, y, s["c"], (3, 3))
                c = b.op("BatchNormalization", [c] + [b.weight(n, (s["c"],), loc=1.0, scale=0.1) for n in "gbmv"])
                y = b.op("Relu", [c])
            elif op == "conv1":
                y = _conv(b, y, s["c"], (1, 1))
            elif op == "pool":
                y = b.op("MaxPool", [y], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
            else:
                y = b.op(op, [y])
    else:
        y = b.input("x", (1, s["m"], s["h"]))
        for op in s["ops"]:
            if op == "linear":
                y = b.op("Add", [b.op("MatMul", [y, b.weight("w", (s["h"], s["h"]), scale=0.05)]), b.weight("b", (s["h"],))])
            elif op == "ln":
                y = b.op("LayerNormalization", [y, b.weight("g", (s["h"],)), b.weight("bb", (s["h"],))], axis=-1)
            else:
                y = b.op(op, [y])
    return b.output(y).build()


def chains(seed: int = 0, count: int = 50) -> list[Bench]:
    """Sequential chains of 3..12 ops (conv stacks and transformer-like MLP stacks): what the
    sum of single-op costs must be corrected by when ops share one session."""
    rng = random.Random(seed + 2)
    out = []
    for i in range(count):
        if i % 2 == 0:
            ops = [rng.choice(["convbnrelu", "convbnrelu", "conv1", "pool", "Sigmoid", "Relu"]) for _ in range(rng.randint(3, 10))]
            out.append(Bench("chain", {"stack": "conv", "c": rng.choice([16, 32, 64, 128]), "hw": rng.choice([7, 14, 28, 56]), "ops": ops}))
        else:
            ops = [rng.choice(["linear", "linear", "ln", "Tanh", "Relu", "Sigmoid"]) for _ in range(rng.randint(3, 12))]
            out.append(Bench("chain", {"stack": "mlp", "m": rng.choice([1, 16, 128]), "h": rng.choice([64, 256, 768]), "ops": ops}))
    return out


def zoo_pieces(sequential: int = 60, parallel: int = 40) -> list[Bench]:
    """Pieces of the full zoo models shaped like what the search costs, disjoint from the
    evaluation's held-out pieces (see :mod:`gspo.costmodel.subgraphs`): sequential ones are timed as
    one session, parallel ones as one session and on streams."""
    from gspo.costmodel.subgraphs import calibration_pieces

    out = [Bench("piece", {"label": lbl, "parallel": False}) for lbl, _ in calibration_pieces(sequential, False)]
    out += [Bench("piece", {"label": lbl, "parallel": True}) for lbl, _ in calibration_pieces(parallel, True)]
    return out


def launch_graph():
    """Two one-op branches joined by an Add: a multi-stream run with next to nothing to compute,
    so its time is the executor's own cost."""
    b = GraphBuilder()
    x = b.input("x", (1, 8))
    return b.output(b.op("Add", [b.op("Relu", [x]), b.op("Sigmoid", [x])])).build()


def stream_cap(backend: str) -> int | None:
    """The most streams a calibration graph runs on: one per core on the CPU, no cap on a GPU."""
    return (os.cpu_count() or 1) if backend == "cpu" else None
