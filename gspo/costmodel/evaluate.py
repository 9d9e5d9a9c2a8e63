"""Accuracy of a profile on held-out subgraphs cut from the zoo models.

Sequential: pieces of the full zoo models (partitioned at several thresholds), each measured as
one onnxruntime session. Parallel: pieces with at least two independent ops, measured with the
multi-stream runtime (streams capped at the cores). None of these graphs is in the calibration
suite. Reports mean absolute percentage error and Spearman rank correlation.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from gspo.costmodel.calibrate import time_callable
from gspo.costmodel.estimate import CostModel
from gspo.costmodel.profile import Profile
from gspo.partition import partition
from gspo.runtime import CpuExecutor, make_session, random_inputs
from gspo.streams import assign_streams
from gspo.zoo import MODELS, build

__all__ = ["Evaluation", "held_out_subgraphs", "evaluate"]


@dataclass(frozen=True)
class Evaluation:
    kind: str
    estimated: tuple[float, ...]
    measured: tuple[float, ...]
    labels: tuple[str, ...]

    @property
    def mape(self) -> float:
        return sum(abs(e - m) / m for e, m in zip(self.estimated, self.measured)) / len(self.measured)

    @property
    def spearman(self) -> float:
        from scipy.stats import spearmanr

        return float(spearmanr(self.estimated, self.measured).statistic)

    def to_json(self) -> dict:
        return {"kind": self.kind, "n": len(self.measured), "mape": self.mape, "spearman": self.spearman,
                "rows": [{"subgraph": lbl, "estimated_s": e, "measured_s": m}
                         for lbl, e, m in zip(self.labels, self.estimated, self.measured)]}


def held_out_subgraphs(count: int = 100, parallel: bool = False, size: str = "full"):
    """``(label, graph)`` pieces of the zoo models, spread over models and thresholds."""
    per_model: dict[str, list] = {}
    for name in MODELS:
        g = build(name, size)
        for t in (8, 16, 32, 64):
            for k, piece in enumerate(partition(g, t).pieces):
                pg = piece.graph
                if not pg.outputs or len(pg.nodes) < 2:
                    continue
                width = assign_streams(pg).num_streams
                if parallel != (width >= 2):
                    continue
                per_model.setdefault(name, []).append((f"{name}/T{t}/piece{k}", pg))
    chosen, i = [], 0
    pools = [v for v in per_model.values() if v]
    while len(chosen) < count and any(pools):
        pool = pools[i % len(pools)]
        if pool:
            chosen.append(pool.pop(len(pool) // 2))
        i += 1
        pools = [p for p in pools if p]
    return chosen


def evaluate(profile: Profile, count: int = 100, progress: Callable[[int, int], None] | None = None) -> list[Evaluation]:
    model = CostModel(profile)
    cap = os.cpu_count() or 1
    results = []
    for parallel in (False, True):
        est, meas, labels = [], [], []
        subgraphs = held_out_subgraphs(count, parallel)
        for i, (label, g) in enumerate(subgraphs):
            feeds = random_inputs(g)
            if parallel:
                schedule = assign_streams(g, max_streams=cap)
                with CpuExecutor(g, schedule) as ex:
                    meas.append(time_callable(lambda ex=ex, feeds=feeds: ex.run(feeds)))
                est.append(model.parallel(g, schedule))
            else:
                sess = make_session(g)
                meas.append(time_callable(lambda sess=sess, feeds=feeds: sess.run(None, feeds)))
                est.append(model.sequential(g))
            labels.append(label)
            if progress:
                progress(i + 1, len(subgraphs))
        results.append(Evaluation("parallel" if parallel else "sequential", tuple(est), tuple(meas), tuple(labels)))
    return results
