"""Multi-stream runtime vs plain onnxruntime on the full zoo models (CPU).

Usage: .venv/bin/python benchmarks/streams.py [--runs 15] [--models a,b] > benchmarks/streams.md

Per model, interleaved in one process (rotating order each round), medians of --runs runs
after 3 warm-ups, onnxruntime intra-op spinning off everywhere:
  plain    one onnxruntime session, default threads (the baseline)
  gspo-1   gspo's runtime with one stream (must be the same session: within noise of plain)
  gspo-N   Nimble streams capped at the core count, each segment session with default threads
  gspo-N/split  the same with the cores divided among the streams (1 thread each here)
  seq-segs the gspo-N segments run one after another on one thread (what segmenting costs)
Also measured: the fixed cost of one segment call (a session over a 1-element Identity) and
of one cross-thread sync (threading.Event set in one thread, seen in another).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform

from gspo.costmodel.calibrate import measure_call_cost, measure_sync_cost
from gspo.ir import serialize
from gspo.runtime import (
    CpuExecutor,
    SessionConfig,
    interleaved,
    make_session,
    random_inputs,
    runtime_version,
)
from gspo.streams import Schedule, assign_streams
from gspo.zoo import build

MODELS = ["resnet50", "inception_v3", "squeezenet", "nasnet_mobile", "nasnet_large", "nasrnn", "bert"]


def bench_model(name: str, cores: int, runs: int) -> str:
    """One table row: the five configurations of one model, interleaved."""
    g = build(name, "full")
    feeds = random_inputs(g)
    width = assign_streams(g).num_streams
    schedule = assign_streams(g, max_streams=cores)
    plain = make_session(g)
    one = CpuExecutor(g, Schedule.single(g))
    multi = CpuExecutor(g, schedule)
    split = CpuExecutor(g, schedule, SessionConfig(intra_op_threads=max(1, cores // schedule.num_streams)))
    segs = multi.plan.segments if multi.plan else ()
    sessions = [make_session(serialize(s.graph)) for s in segs]

    def sequential():
        values = dict(feeds)
        for seg, sess in zip(segs, sessions):
            values.update(zip(seg.outputs, sess.run(list(seg.outputs), {k: values[k] for k in seg.inputs})))

    t_plain, t_one, t_multi, t_split, t_seq = interleaved(
        [("plain", lambda: plain.run(None, feeds)), ("gspo-1", lambda: one.run(feeds)),
         ("gspo-N", lambda: multi.run(feeds)), ("gspo-N/split", lambda: split.run(feeds)),
         ("seq-segs", sequential)],
        runs=runs, warmup=3,
    )
    multi.close()
    split.close()
    events = multi.plan.num_events if multi.plan else 0
    per_seg = (t_seq.median - t_plain.median) / max(len(segs), 1)
    return (f"| {name} | {len(g.nodes)} | {width} -> {multi.num_streams} | {len(segs)} | {events} | "
            f"{t_plain.median * 1e3:.2f} | {t_plain.median / t_one.median:.3f} | {t_multi.ratio_to(t_plain):.3f}x | "
            f"{t_split.ratio_to(t_plain):.3f}x | {t_seq.ratio_to(t_plain):.3f}x | {per_seg * 1e6:.0f} us |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    print("# Multi-stream runtime vs plain onnxruntime (CPU)\n")
    print(f"{datetime.date.today()}, {platform.machine()}, {cores} cores, onnxruntime {runtime_version()}, "
          f"full-size zoo models, batch 1, fp32, {args.runs} interleaved runs after 3 warm-ups, medians.\n")
    print(f"Command: `.venv/bin/python benchmarks/streams.py --runs {args.runs}`\n")
    print(f"Fixed costs: one segment call (1-element Identity session) {measure_call_cost() * 1e6:.1f} us; "
          f"one cross-thread sync {measure_sync_cost() * 1e6:.1f} us.\n")
    print("| model | ops | streams (width -> cap) | segments | events | plain ms | gspo-1 / plain | gspo-N / plain | gspo-N/split / plain | seq-segs / plain | segmenting cost per segment |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        print(bench_model(name, cores, args.runs), flush=True)


if __name__ == "__main__":
    main()
