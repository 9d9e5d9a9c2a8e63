"""Accuracy of a profile on held-out subgraphs cut from the zoo models.

Sequential: pieces of the full zoo models (partitioned at several thresholds), each measured as
one onnxruntime session. Parallel: pieces with at least two independent ops, measured with the
multi-stream runtime (streams capped at the cores). None of these graphs is in the calibration
suite (see :mod:`gspo.costmodel.subgraphs`). Reports mean absolute percentage error and Spearman
rank correlation, and the machine's noise: every subgraph is measured in two separate passes,
and the error of one pass against the other is what even an exact model would show.

When the profile was calibrated with the speed reference, each subgraph's timing is followed by
the reference's, and the error is computed in reference units (the machine's drift between
calibration and now, and during the evaluation, cancels); the raw error is reported beside it.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from gspo.costmodel.calibrate import speed_reference
from gspo.costmodel.estimate import CostModel
from gspo.costmodel.profile import Profile
from gspo.costmodel.reference import normalize
from gspo.costmodel.subgraphs import held_out_subgraphs
from gspo.runtime import CpuExecutor, make_session, median_seconds, random_inputs
from gspo.streams import assign_streams

__all__ = ["Evaluation", "held_out_subgraphs", "held_out_schedule", "evaluate"]


@dataclass(frozen=True)
class Evaluation:
    """Estimated and measured seconds of held-out subgraphs of one kind, and the errors between them."""

    kind: str
    estimated: tuple[float, ...]
    measured: tuple[float, ...]  # in reference units when the profile has a reference, else raw
    labels: tuple[str, ...]
    raw: tuple[float, ...] = ()  # seconds as measured (empty: same as ``measured``)
    passes: tuple[tuple[float, ...], ...] = ()  # per subgraph, each pass's time (same units as measured)

    @property
    def noise(self) -> float | None:
        """Test-retest error: pass 2 taken as an estimate of pass 1 (``None`` with one pass). A
        model that predicted one pass exactly would score about this against the other."""
        pairs = [p[:2] for p in self.passes if len(p) >= 2]
        return _mape([b for _, b in pairs], [a for a, _ in pairs]) if pairs else None

    @property
    def noise_of_mean(self) -> float | None:
        """The noise left in the measured time (the mean of all passes): half the error between
        the mean of the odd passes and that of the even ones (two independent means of half the
        passes each differ by about twice what their overall mean is off by). With two passes it
        is half the test-retest error. About what an exact model would score against ``measured``."""
        full = [p for p in self.passes if len(p) >= 2]
        if not full:
            return None
        odd = [statistics.fmean(p[0::2]) for p in full]
        even = [statistics.fmean(p[1::2]) for p in full]
        return _mape(even, odd) / 2

    @property
    def mape(self) -> float:
        """Mean absolute relative error of the estimates against the measured times."""
        return _mape(self.estimated, self.measured)

    @property
    def mape_raw(self) -> float:
        """The same against the raw timings (drift against the speed reference not cancelled)."""
        return _mape(self.estimated, self.raw or self.measured)

    @property
    def spearman(self) -> float:
        """Spearman's rank correlation between estimated and measured times."""
        from scipy.stats import spearmanr

        return float(spearmanr(self.estimated, self.measured).statistic)

    def to_json(self) -> dict:
        """The evaluation as JSON: its errors and a row per subgraph."""
        raw = self.raw or self.measured
        passes = self.passes or tuple(() for _ in self.measured)
        return {"kind": self.kind, "n": len(self.measured), "mape": self.mape, "mape_raw": self.mape_raw,
                "spearman": self.spearman, "noise": self.noise, "noise_of_mean": self.noise_of_mean,
                "passes": max((len(p) for p in self.passes), default=1),
                "rows": [{"subgraph": lbl, "estimated_s": e, "measured_s": m, "measured_raw_s": r,
                          "passes_s": list(p)}
                         for lbl, e, m, r, p in zip(self.labels, self.estimated, self.measured, raw, passes)]}


def _mape(estimated, measured) -> float:
    return sum(abs(e - m) / m for e, m in zip(estimated, measured)) / len(measured)


def _time_on_streams(graph, schedule, feeds) -> float:
    """Seconds of one multi-stream run, with this executor the only one alive (as calibration
    measures, and as ``gspo run`` runs): held-out pieces measured 1.17x slower (geometric mean of
    20) with the executors of all 100 alive at once."""
    with CpuExecutor(graph, schedule) as ex:
        return median_seconds(lambda: ex.run(feeds))


def held_out_schedule(graph):
    """The streams a parallel held-out subgraph is measured and estimated on: Nimble's, capped at
    the cores."""
    return assign_streams(graph, max_streams=os.cpu_count() or 1)


def evaluate(profile: Profile, count: int = 100, progress: Callable[[int, int], None] | None = None,
             passes: int = 2) -> list[Evaluation]:
    """Estimate and measure the held-out subgraphs. Each is measured in ``passes`` separate passes
    over the whole set (so that the machine's drift during the run shows); the measured time is
    their mean, and the test-retest error (pass 2 against pass 1) is the noise floor of this run."""
    model = CostModel(profile)
    reference = speed_reference("cpu") if profile.reference_s else None
    results = []
    for parallel in (False, True):
        subgraphs = held_out_subgraphs(count, parallel)
        runners, est = [], []
        for _, g in subgraphs:
            feeds = random_inputs(g)
            if parallel:
                schedule = held_out_schedule(g)
                runners.append(lambda g=g, schedule=schedule, feeds=feeds: _time_on_streams(g, schedule, feeds))
                est.append(model.parallel(g, schedule))
            else:
                sess = make_session(g)
                runners.append(lambda sess=sess, feeds=feeds: median_seconds(lambda: sess.run(None, feeds)))
                est.append(model.sequential(g))
        timed: list[list[tuple[float, float]]] = [[] for _ in subgraphs]  # (units, raw) per pass
        for k in range(passes):
            for i, measure in enumerate(runners):
                seconds = measure()
                now = reference.measure() if reference is not None else None
                timed[i].append((normalize(seconds, now, profile.reference_s), seconds))
                if progress:
                    progress(k * len(runners) + i + 1, passes * len(runners))
        results.append(Evaluation(
            "parallel" if parallel else "sequential", tuple(est),
            tuple(statistics.fmean(u for u, _ in t) for t in timed), tuple(lbl for lbl, _ in subgraphs),
            tuple(statistics.fmean(r for _, r in t) for t in timed),
            tuple(tuple(u for u, _ in t) for t in timed)))
    return results
