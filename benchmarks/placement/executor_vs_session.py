"""gspo's result in gspo's executor against the source in a bare onnxruntime session at one
intra-op thread, interleaved in one process: what the executor adds on a model whose result
gspo saved with a one-thread setting (the placement table's small models).

Usage::

    .venv/bin/gspo optimize benchmarks/realworld/models/vad_gru.onnx -o /tmp/vad_gru.gspo.onnx --time-budget 30
    .venv/bin/python benchmarks/placement/executor_vs_session.py benchmarks/realworld/models/vad_gru.onnx /tmp/vad_gru.gspo.onnx
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from gspo.ir import load
from gspo.runtime import SessionConfig, interleaved, make_executor, random_inputs
from gspo.runtime.backends import load_runner


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", type=Path)
    ap.add_argument("result", type=Path)
    ap.add_argument("--runs", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    g = load(args.source)
    feeds, names = random_inputs(g, seed=7), [v.name for v in g.outputs]
    bare = load_runner("ort", args.source.read_bytes(), SessionConfig(intra_op_threads=1))
    executor = make_executor(load(args.result))
    try:
        for _ in range(args.repeats):
            timings = interleaved([("source, onnxruntime at 1 thread", lambda: bare.run(names, feeds)),
                                   ("result, gspo's executor", lambda: executor.run(feeds))], args.runs, 20)
            us = [t.median * 1e6 for t in timings]
            print("; ".join(f"{t.label}: {u:.1f} us" for t, u in zip(timings, us)) + f"; ratio {us[1] / us[0]:.3f}")
    finally:
        executor.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
