"""Partition time and weight lost per threshold on the full zoo models.

Usage: .venv/bin/python benchmarks/partition.py > benchmarks/partition.md
Timing: median of 5 runs in one process (partitioning is pure Python, single-threaded).
"""

from __future__ import annotations

import datetime
import platform
import statistics
import time

from gspo.partition import partition
from gspo.zoo import MODELS, build

THRESHOLDS = (16, 32, 64, 128)


def main() -> None:
    print("# Partition: time and substitution weight lost\n")
    print(f"{datetime.date.today()}, {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}; command: `.venv/bin/python benchmarks/partition.py`\n")
    print("| model | ops | T | pieces | largest | weight lost | % of total | time (median of 5) |")
    print("|---|---|---|---|---|---|---|---|")
    for name in MODELS:
        g = build(name, "full")
        for t in THRESHOLDS:
            times = []
            for _ in range(5):
                start = time.perf_counter()
                p = partition(g, t)
                times.append(time.perf_counter() - start)
            share = 100 * p.cut_weight / p.total_weight
            print(f"| {name} | {len(g.nodes)} | {t} | {len(p.pieces)} | {max(x.size for x in p.pieces)} | "
                  f"{p.cut_weight:.2f} | {share:.2f}% | {statistics.median(times):.2f} s |")


if __name__ == "__main__":
    main()
