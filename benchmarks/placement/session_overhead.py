"""gspo.InferenceSession against plain OpenVINO on the same placed file, back to back and in bursts.

Usage (a model optimized with OpenVINO placed, e.g. the corpus's Llama-style decoder)::

    .venv/bin/gspo optimize benchmarks/realworld/models/llama.onnx -o /tmp/llama_g.onnx --time-budget 60
    .venv/bin/python benchmarks/placement/session_overhead.py /tmp/llama_g.onnx benchmarks/realworld/models/llama.onnx

Runners, interleaved in one process (medians of 20 rounds; in bursts: 3-5 calls after 0.2 s idle
and one untimed call, the burst's mean a call): OpenVINO (latency hint, f32, 2 threads and its
default) on the source and on gspo's file, gspo's own OpenVINO runner of the placed graph, and
``gspo.InferenceSession``. Where the last is slower than the runner alone, the difference is
gspo's per-call path (input checks, the executor), not the compiled model.
"""

from __future__ import annotations

import sys

import numpy as np


def main(out: str, src: str) -> None:
    import openvino as ov

    import gspo
    from gspo import ir
    from gspo.runtime import random_inputs
    from gspo.runtime.bench import bursts, interleaved
    from gspo.runtime.openvino import load_openvino

    core = ov.Core()
    graph = ir.load(out)
    feeds = random_inputs(graph, seed=0)

    def plain(path, threads=None):
        cfg = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"}
        if threads:
            cfg["INFERENCE_NUM_THREADS"] = threads
        req = core.compile_model(core.read_model(path), "CPU", cfg).create_infer_request()
        return lambda: req.infer(feeds, share_inputs=True)

    runner, names = load_openvino(graph, 2), graph.output_names()
    session = gspo.InferenceSession(out)
    runners = [("OpenVINO, source, 2 threads", plain(src, 2)), ("OpenVINO, source, default", plain(src)),
               ("OpenVINO, gspo's file, 2 threads", plain(out, 2)),
               ("gspo's OpenVINO runner alone", lambda: runner.run(names, feeds)),
               ("gspo.InferenceSession", lambda: session.run(None, feeds))]
    for _, fn in runners:
        for _ in range(5):
            fn()
    print(f"{'runner':<36} {'back to back ms':>16} {'bursts ms':>10}")
    for a, b in zip(interleaved(runners, 20, 3), bursts(runners, rounds=20)):
        print(f"{a.label:<36} {a.median * 1e3:16.2f} {b.median * 1e3:10.2f}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    np.set_printoptions(precision=3)
    main(sys.argv[1], sys.argv[2])
