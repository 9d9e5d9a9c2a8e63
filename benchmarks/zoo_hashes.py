"""The sha256 of ``optimize``'s output on every tiny zoo model with ``select="estimated"``, no time
budget and seed 0: a refactor of the pipeline must leave these bytes unchanged.

Run: ``.venv/bin/python benchmarks/zoo_hashes.py [--backends ort]`` before and after a change and
compare the printed lines.
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
from pathlib import Path

from gspo.search import optimize
from gspo.zoo import MODELS, build


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default=None, help="comma-separated backends [default: every one installed]")
    args = parser.parse_args()
    backends = tuple(args.backends.split(",")) if args.backends else None
    with tempfile.TemporaryDirectory() as tmp:
        for name in MODELS:
            result = optimize(build(name, "tiny"), select="estimated", time_budget=None, seed=0, backends=backends)
            out = result.save(Path(tmp) / f"{name}.onnx")
            print(f"{name:<14} {hashlib.sha256(out.read_bytes()).hexdigest()}", flush=True)


if __name__ == "__main__":
    main()
