"""Where the time goes: onnxruntime's own profiler on every corpus model, per op type.

Usage::

    .venv/bin/python benchmarks/realworld/profile_ops.py                 # every model -> PROFILE.md
    .venv/bin/python benchmarks/realworld/profile_ops.py mixnet_s bert   # some, printed only

Each model runs in one onnxruntime session (all graph optimizations, 1 intra-op thread, no
spinning: per-op times add up to the run) with ``enable_profiling``; after warm-up runs the
kernel events of ``--runs`` runs are summed per op type of the graph onnxruntime actually
executes (its fused ops, ``ReorderInput``/``ReorderOutput`` of its blocked layout). Each op type
also gets its arithmetic work (FLOPs of the plain graph's ops of that type, by gspo's features)
and the rate it reached, to compare with the machine's fp32 peak measured here the same way on a
large MatMul.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import onnxruntime as ort

from gspo.ir import load, node_features, serialize
from gspo.runtime import random_inputs

HERE = Path(__file__).resolve().parent


def _session(data: bytes, prefix: str) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.enable_profiling = True
    so.profile_file_prefix = prefix
    so.log_severity_level = 4
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def profile(data: bytes, feeds: dict, runs: int, warmup: int = 3) -> tuple[dict[str, float], float]:
    """Seconds per op type (kernel time, averaged over the timed runs) and their sum."""
    with tempfile.TemporaryDirectory() as d:
        s = _session(data, os.path.join(d, "p"))
        for _ in range(warmup + runs):
            s.run(None, feeds)
        events = json.loads(Path(s.end_profiling()).read_text())
    model_runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == "model_run")[warmup:]
    per_type: dict[str, float] = defaultdict(float)
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        if any(a <= e["ts"] <= b for a, b in model_runs):
            per_type[e["args"].get("op_name", "?")] += e["dur"] * 1e-6 / len(model_runs)
    return dict(per_type), sum(per_type.values())


def peak_gflops() -> float:
    """fp32 rate of one [512,1024]x[1024,1024] MatMul on one thread, as onnxruntime runs it."""
    from gspo.ir.builder import GraphBuilder

    b = GraphBuilder()
    g = b.output(b.op("MatMul", [b.input("x", (512, 1024)), b.weight("w", (1024, 1024))])).build()
    per_type, total = profile(serialize(g), random_inputs(g), 10)
    return 2 * 512 * 1024 * 1024 / total / 1e9


def flops_by_type(path: Path) -> dict[str, float]:
    g = load(path, plain=True)
    out: dict[str, float] = defaultdict(float)
    for n in g.nodes:
        if not n.is_opaque:
            out[n.op_type] += node_features(g, n).flops
    return dict(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*")
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args(argv)
    manifest = json.loads((HERE / "models" / "manifest.json").read_text())
    names = args.models or sorted(manifest)
    peak = peak_gflops()
    lines = ["# Where the time goes (onnxruntime's profiler, 1 thread)", "",
             f"Peak here: {peak:.1f} GFLOP/s fp32 (one [512,1024]x[1024,1024] MatMul, 1 thread). "
             "Command: `.venv/bin/python benchmarks/realworld/profile_ops.py`.", ""]
    for name in names:
        path = HERE / "models" / manifest[name]["file"]
        g = load(path)
        per_type, total = profile(path.read_bytes(), random_inputs(g, 0), args.runs)
        flops = flops_by_type(path)
        lines += [f"## {name}: {total * 1e3:.2f} ms per run", "", "| op (as onnxruntime runs it) | ms | share | GFLOP/s |",
                  "|---|---|---|---|"]
        for op, sec in sorted(per_type.items(), key=lambda kv: -kv[1])[:12]:
            base = op.replace("Fused", "").replace("NchwcConv", "Conv")
            rate = flops.get(base, 0) / sec / 1e9 if sec and flops.get(base) else None
            lines.append(f"| {op} | {sec * 1e3:.3f} | {100 * sec / total:.1f}% | {f'{rate:.1f}' if rate else '-'} |")
        lines.append("")
        print(f"{name}: {total * 1e3:.2f} ms; top: " + ", ".join(
            f"{op} {100 * s / total:.0f}%" for op, s in sorted(per_type.items(), key=lambda kv: -kv[1])[:6]), flush=True)
    if not args.models:
        (HERE / "PROFILE.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
