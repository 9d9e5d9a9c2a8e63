"""What gspo's executor adds to a bare session on a model under 0.1 ms (one stream, one backend).

A small MLP (1x64 -> 64 -> ReLU -> 16) is built in code. Each configuration is a bare session of
a backend (onnxruntime's ``InferenceSession``, OpenVINO's runner) and the same model in
:class:`~gspo.runtime.CpuExecutor` built as ``gspo run`` builds it (onnxruntime at its default
and at one thread; whole on OpenVINO when installed). All are timed interleaved in one process;
each timed sample is ``--calls`` calls in a row (a single call is too short for the clock), so
the figures are per call. Prints each median in microseconds and the executor's ratio to its
bare session (1.000 = no overhead).

Usage::

    .venv/bin/python benchmarks/overhead_small.py --runs 200 --calls 200
"""

from __future__ import annotations

import argparse
import logging
import sys

from gspo.ir import serialize
from gspo.ir.builder import GraphBuilder
from gspo.runtime import CpuExecutor, SessionConfig, interleaved, random_inputs
from gspo.runtime.backends import backend_status, load_runner
from gspo.streams import Placement


def small_mlp():
    """A model that runs in well under 0.1 ms on a CPU core."""
    b = GraphBuilder("small_mlp", seed=0)
    x = b.input("x", (1, 64))
    h = b.op("Relu", [b.op("Add", [b.op("MatMul", [x, b.weight("w1", (64, 64))]), b.weight("b1", (64,))])])
    return b.output(b.op("MatMul", [h, b.weight("w2", (64, 16))])).build()


def _repeat(fn, calls: int):
    def run():
        for _ in range(calls):
            fn()
    return run


def _pairs(g, feeds, names):
    """(bare label, bare call, executor label, executor) for each backend setting measured."""
    data = serialize(g)
    out = []
    for threads in (0, 1):
        config = SessionConfig(intra_op_threads=threads)
        bare = load_runner("ort", data, config)
        out.append((f"ort@{threads or 'default'}", lambda r=bare: r.run(names, feeds),
                    f"gspo ort@{threads or 'default'}", CpuExecutor(g, None, config)))
    if backend_status("openvino")[0]:
        bare = load_runner("openvino", data, SessionConfig())
        out.append(("openvino", lambda r=bare: r.run(names, feeds), "gspo openvino",
                    CpuExecutor(g, None, SessionConfig(), Placement.whole(g, "openvino"))))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200, help="timed samples per configuration")
    ap.add_argument("--calls", type=int, default=200, help="calls per sample")
    args = ap.parse_args(argv)
    if args.runs < 1 or args.calls < 1:
        print("overhead_small.py: --runs and --calls must be at least 1", file=sys.stderr)
        return 2
    logging.disable(logging.WARNING)
    g = small_mlp()
    feeds = random_inputs(g, 7)
    names = list(g.output_names())
    pairs = _pairs(g, feeds, names)
    runners = []
    for bare_label, bare, ex_label, ex in pairs:
        runners += [(bare_label, _repeat(bare, args.calls)), (ex_label, _repeat(lambda e=ex: e.run(feeds), args.calls))]
    try:
        timings = {t.label: t.median / args.calls for t in interleaved(runners, args.runs, 5)}
    finally:
        for *_, ex in pairs:
            ex.close()
    print(f"{'configuration':<20} {'median us/call':>15} {'vs bare':>8}")
    for bare_label, _, ex_label, _ in pairs:
        print(f"{bare_label:<20} {timings[bare_label] * 1e6:>15.2f}")
        print(f"{ex_label:<20} {timings[ex_label] * 1e6:>15.2f} {timings[ex_label] / timings[bare_label]:>8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
