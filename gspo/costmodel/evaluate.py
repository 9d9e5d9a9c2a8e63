"""Accuracy of a profile on held-out subgraphs cut from the zoo models.

Sequential: pieces of the full zoo models (partitioned at several thresholds), each measured as
one onnxruntime session. Parallel: pieces with at least two independent ops, measured with the
multi-stream runtime (streams capped at the cores). None of these graphs is in the calibration
suite. Reports mean absolute percentage error and Spearman rank correlation.

When the profile was calibrated with the speed reference, each subgraph's timing is followed by
the reference's, and the error is computed in reference units (the machine's drift between
calibration and now, and during the evaluation, cancels); the raw error is reported beside it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from gspo.costmodel.calibrate import speed_reference, time_callable
from gspo.costmodel.estimate import CostModel
from gspo.costmodel.profile import Profile
from gspo.costmodel.reference import normalize
from gspo.partition import partition
from gspo.runtime import CpuExecutor, make_session, random_inputs
from gspo.streams import assign_streams
from gspo.zoo import MODELS, build

__all__ = ["Evaluation", "held_out_subgraphs", "evaluate"]


@dataclass(frozen=True)
class Evaluation:
    kind: str
    estimated: tuple[float, ...]
    measured: tuple[float, ...]  # in reference units when the profile has a reference, else raw
    labels: tuple[str, ...]
    raw: tuple[float, ...] = ()  # seconds as measured (empty: same as ``measured``)

    @property
    def mape(self) -> float:
        return _mape(self.estimated, self.measured)

    @property
    def mape_raw(self) -> float:
        return _mape(self.estimated, self.raw or self.measured)

    @property
    def spearman(self) -> float:
        from scipy.stats import spearmanr

        return float(spearmanr(self.estimated, self.measured).statistic)

    def to_json(self) -> dict:
        raw = self.raw or self.measured
        return {"kind": self.kind, "n": len(self.measured), "mape": self.mape, "mape_raw": self.mape_raw,
                "spearman": self.spearman,
                "rows": [{"subgraph": lbl, "estimated_s": e, "measured_s": m, "measured_raw_s": r}
                         for lbl, e, m, r in zip(self.labels, self.estimated, self.measured, raw)]}


def _mape(estimated, measured) -> float:
    return sum(abs(e - m) / m for e, m in zip(estimated, measured)) / len(measured)


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
    reference = speed_reference("cpu") if profile.reference_s else None
    results = []
    for parallel in (False, True):
        est, meas, raw, labels = [], [], [], []
        subgraphs = held_out_subgraphs(count, parallel)
        for i, (label, g) in enumerate(subgraphs):
            feeds = random_inputs(g)
            if parallel:
                schedule = assign_streams(g, max_streams=cap)
                with CpuExecutor(g, schedule) as ex:
                    seconds = time_callable(lambda ex=ex, feeds=feeds: ex.run(feeds))
                est.append(model.parallel(g, schedule))
            else:
                sess = make_session(g)
                seconds = time_callable(lambda sess=sess, feeds=feeds: sess.run(None, feeds))
                est.append(model.sequential(g))
            now = reference.measure() if reference is not None else None
            raw.append(seconds)
            meas.append(normalize(seconds, now, profile.reference_s))
            labels.append(label)
            if progress:
                progress(i + 1, len(subgraphs))
        results.append(Evaluation("parallel" if parallel else "sequential", tuple(est), tuple(meas), tuple(labels),
                                  tuple(raw)))
    return results
