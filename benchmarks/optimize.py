"""gspo optimize on the full zoo models against plain onnxruntime (CPU).

Usage: .venv/bin/python benchmarks/optimize.py [--models a,b] [--runs 30] > benchmarks/optimize.md

For each model: `gspo optimize` (default settings, --jobs 2), its wall time; then, interleaved in
one process (rotating order, 5 warm-ups, medians of --runs): plain onnxruntime with all graph
optimizations at default threads and at 1 thread (the best of the two is the baseline), and the
optimized model (as gspo run runs it: its schedule if it has one, else one plain session), and a
second plain session identical to the first (the control: its ratio to the first is pure noise).
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import time

from gspo.runtime import (
    CpuExecutor,
    SessionConfig,
    interleaved,
    make_session,
    random_inputs,
    runtime_version,
)
from gspo.search import optimize
from gspo.zoo import MODELS, build


def bench_model(name: str, runs: int) -> tuple[str, float]:
    g = build(name, "full")
    start = time.perf_counter()
    result = optimize(g, jobs=2)
    wall = time.perf_counter() - start
    feeds = random_inputs(g)
    plain = make_session(g)
    plain1 = make_session(g, SessionConfig(intra_op_threads=1))
    control = make_session(g)  # a second, identical plain session: the noise floor
    opt = CpuExecutor(result.graph, result.schedule)
    t_plain, t_plain1, t_control, t_opt = interleaved(
        [("plain", lambda: plain.run(None, feeds)), ("plain-1thread", lambda: plain1.run(None, feeds)),
         ("control", lambda: control.run(None, feeds)), ("gspo", lambda: opt.run(feeds))], runs=runs, warmup=5)
    opt.close()
    best = min(t_plain, t_plain1, key=lambda t: t.median)
    r = result.report
    subs = ", ".join(f"{k} {v}" for k, v in r["substitutions"].items()) or "none"
    ratio = best.median / t_opt.median
    same = " (= input)" if result.unchanged else ""
    row = (f"| {name} | {best.median * 1e3:.2f} ({best.label}) | {t_opt.median * 1e3:.2f} | {ratio:.3f}x | "
           f"{t_plain.median / t_control.median:.3f} | {r['chosen']}{same} | {r['streams']} | {subs} | "
           f"{r['latency_before_ms'] / r['latency_after_ms']:.3f}x | {r['pieces']} | {wall:.1f} s |")
    return row, ratio


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    print("# gspo optimize vs plain onnxruntime (CPU)\n")
    print(f"{datetime.date.today()}, {platform.machine()}, {os.cpu_count()} cores, onnxruntime {runtime_version()}; "
          f"full zoo models, fp32, batch 1; {args.runs} interleaved runs after 5 warm-ups, medians.\n")
    print(f"Command: `.venv/bin/python benchmarks/optimize.py --runs {args.runs}`\n")
    print("| model | plain onnxruntime ms (best threads) | gspo ms | speedup | identical-session control | chosen | streams | substitutions | speedup optimize measured | pieces | optimize wall time |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    ratios = []
    for name in args.models.split(","):
        row, ratio = bench_model(name, args.runs)
        ratios.append(ratio)
        print(row, flush=True)
    print(f"\nGeometric mean speedup: {math.exp(sum(math.log(r) for r in ratios) / len(ratios)):.3f}x")


if __name__ == "__main__":
    main()
