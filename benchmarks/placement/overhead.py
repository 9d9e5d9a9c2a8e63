"""What gspo's executor adds to a model placed whole on OpenVINO: interleaved medians of
OpenVINO's runner alone (at 2 threads and at its default) and of the same model in
:class:`~gspo.runtime.CpuExecutor` with every op placed on OpenVINO.

Usage::

    .venv/bin/python benchmarks/placement/overhead.py benchmarks/realworld/models/nasnetalarge.onnx --runs 20
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from gspo.ir import load
from gspo.runtime import CpuExecutor, SessionConfig, interleaved, random_inputs
from gspo.runtime.backends import backend_status, load_runner
from gspo.streams import Placement


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args(argv)
    ok, why = backend_status("openvino")
    if not ok:
        print(f"overhead.py: {why}", file=sys.stderr)
        return 2
    logging.disable(logging.WARNING)
    g = load(args.model)
    feeds = random_inputs(g, 7)
    names = [v.name for v in g.outputs]
    data = args.model.read_bytes()
    at2 = load_runner("openvino", data, SessionConfig(intra_op_threads=2))
    default = load_runner("openvino", data, SessionConfig())
    with CpuExecutor(g, None, SessionConfig(), Placement.whole(g, "openvino")) as placed:
        timings = interleaved([("openvino@2", lambda: at2.run(names, feeds)), ("executor", lambda: placed.run(feeds)),
                               ("openvino@default", lambda: default.run(names, feeds))], args.runs, 3)
    for t in timings:
        print(f"{t.label:<18} {t.median * 1e3:9.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
