"""Does ``gspo optimize --time-budget`` hold on large graphs? Builds the cases of issue 29 (a
model of 5,000 parallel branches, a chain of 20,000 Adds), times how long reading each model
takes, then runs ``gspo optimize MODEL --time-budget SECONDS`` on it and prints the wall time,
the deadline it should hold (the budget plus 10%, plus the time to read the model as given; the
front end's time is reported apart, it counts against the budget) and what the report says was
skipped. ``total_seconds`` is optimize's own count from its start; the wall time adds starting
Python and importing onnxruntime and OpenVINO.

Run: ``.venv/bin/python benchmarks/time_budget.py [--time-budget 10] [--backends ort,openvino]``
(the backends default to every one installed; the models are written to a temporary folder).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gspo.ir import load, save
from gspo.ir.builder import GraphBuilder


def branches(n: int = 5000):
    """``x -> Relu`` ``n`` times side by side, joined by one Concat."""
    b = GraphBuilder(f"branches{n}")
    x = b.input("x", (1, 4))
    return b.output(b.op("Concat", [b.op("Relu", [x]) for _ in range(n)], axis=1)).build()


def chain(n: int = 20000):
    """``y = Add(y, y)`` ``n`` times."""
    b = GraphBuilder(f"chain{n}")
    y = b.input("x", (1, 4))
    for _ in range(n):
        y = b.op("Add", [y, y])
    return b.output(y).build()


CASES = {"branches5000": branches, "chain20000": chain}


def read_seconds(path: Path) -> tuple[float, float]:
    """Seconds to read the model as given, and through the front end."""
    start = time.perf_counter()
    load(path)
    middle = time.perf_counter()
    load(path, plain=True)
    return middle - start, time.perf_counter() - middle


def run_case(name: str, folder: Path, budget: float, backends: str | None) -> dict:
    model = folder / f"{name}.onnx"
    save(CASES[name](), model, overwrite=True)
    read_s, plain_s = read_seconds(model)
    cmd = [sys.executable, "-m", "gspo", "optimize", str(model), "-o", str(folder / f"{name}.out.onnx"), "--force",
           "--time-budget", str(budget), "--report", str(folder / f"{name}.json")]
    if backends:
        cmd += ["--backends", backends]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    report = json.loads((folder / f"{name}.json").read_text()) if proc.returncode == 0 else {}
    return {"case": name, "exit": proc.returncode, "wall_s": round(wall, 2), "read_s": round(read_s, 2),
            "front_end_s": round(plain_s, 2),
            "limit_s": round(1.1 * budget + read_s, 2), "held": wall <= 1.1 * budget + read_s,
            "total_seconds": report.get("total_seconds"), "skipped": report.get("skipped"),
            "stderr": proc.stderr.strip().splitlines()[-1:] if proc.returncode else []}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-budget", type=float, default=10.0)
    parser.add_argument("--backends", default=None)
    parser.add_argument("--case", choices=sorted(CASES), action="append")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.case or list(CASES):
            print(json.dumps(run_case(name, Path(tmp), args.time_budget, args.backends)), flush=True)


if __name__ == "__main__":
    main()
