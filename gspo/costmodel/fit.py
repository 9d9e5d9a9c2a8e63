"""Fitting a profile to calibration measurements: pure, measured times in, a :class:`Profile` out.

:mod:`gspo.costmodel.calibrate` measures (through :mod:`gspo.runtime`) and hands its rows here;
nothing in this module runs a model. The fit goes in order: the per-family op model, the
sequential aggregate correction, the per-segment costs, the launch cost and beta_a (GSPO Eq. 3).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

import numpy as np

from gspo.costmodel.estimate import CostModel, segment_boundary_bytes
from gspo.costmodel.features import FAMILIES, feature_vector, op_features
from gspo.costmodel.layout import reorder_delta
from gspo.costmodel.microbench import launch_graph, stream_cap
from gspo.costmodel.poly import Poly, fit_poly
from gspo.costmodel.profile import Profile
from gspo.costmodel.reference import normalize
from gspo.streams import assign_streams, node_id, segment_runs

__all__ = ["FixedCosts", "TIMED_KEYS", "fit", "fit_family", "scale_fit", "family_scales", "fit_beta"]

#: The keys of a measurement row that hold seconds (put in reference units before fitting).
TIMED_KEYS = frozenset({"seconds", "one_session", "segments_in_order"})


#: Bounds of an in-context family factor: a family's ops take between a quarter and four times
#: their single-op cost inside real pieces (a free fit zeroed families the pieces rarely contain).
FAMILY_SCALE_BOUNDS = (0.25, 4.0)


#: Candidate ridge weights pulling the family factors toward 1, chosen by cross-validation on the
#: calibration pieces (:func:`family_scales`). A free fit swung with the piece set (LayerNorm's
#: factor 2.7 in one calibration, 0.25 in the next, when adding two rules moved the partition).
FAMILY_SCALE_PENALTIES = (0.0, 1.0, 5.0, 20.0, 100.0, 1000.0)
#: Folds of that cross-validation.
CV_FOLDS = 5


def scale_fit(x: np.ndarray, lam: float, extra: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Least squares of ``log(x @ s + extra @ r) ~ 0`` plus ``lam * |s - c|^2``, with ``s = c + d``:
    one common factor ``c`` and per-family deviations ``d`` pulled toward 0; ``s`` kept within the
    bounds. ``extra`` (optional): further columns with their own coefficients ``r``, unpenalized,
    within ``[0, EXTRA_MAX]`` (the reorder count, :mod:`gspo.costmodel.layout`). Returns ``(s, r)``.

    On the log of the ratio estimate/measured, so that an estimate half the measured time weighs
    as much as one twice it. Least squares on the ratio itself (``x @ s ~ 1``) is biased low when
    the measurements are noisy: it leaves the cross-validated estimates of the calibration pieces
    at a median of 0.92-0.95 of their measured time (five calibration databases; 0.96-1.01 with
    this fit, at the same cross-validated mean error, 16-19%)."""
    from scipy.optimize import least_squares

    k = x.shape[1]
    extra = np.zeros((x.shape[0], 0)) if extra is None else extra
    m = extra.shape[1]
    lo, hi = FAMILY_SCALE_BOUNDS
    a = np.hstack([x.sum(axis=1, keepdims=True), x, extra])

    def residuals(v: np.ndarray) -> np.ndarray:
        r = np.log(np.maximum(a @ v, 1e-9))
        return np.concatenate([r, np.sqrt(lam) * v[1:k + 1]]) if lam else r

    # Start from the common factor that puts the median ratio at 1, deviations 0, extras 0.
    start = np.r_[np.clip(1.0 / float(np.median(x.sum(axis=1))), lo, hi), np.zeros(k + m)]
    lower = np.r_[lo, np.full(k, lo - hi), np.zeros(m)]
    upper = np.r_[hi, np.full(k, hi - lo), np.full(m, EXTRA_MAX)]
    sol = least_squares(residuals, start, bounds=(lower, upper)).x
    return np.clip(sol[0] + sol[1:k + 1], lo, hi), sol[k + 1:]


#: Upper bound of an extra column's coefficient in :func:`scale_fit` (the reorder column is in
#: units of ``REORDER_UNIT`` seconds: at most 1 ms per reorder).
EXTRA_MAX = 100.0
REORDER_UNIT = 1e-5


def family_scales(model: CostModel, timed: list, call_cost: float) -> tuple[dict[str, float], float, float]:
    """Per family, the factor that best turns single-op costs into the measured run times of
    ``timed`` pieces (least squares on the log of estimated/measured, bounded, pulled toward a common factor by a
    penalty chosen by ``CV_FOLDS``-fold cross-validation over the pieces); families the pieces
    lack keep 1. With a blocked layout on the device (``model.profile.layout_block``), fitted
    together with the seconds per reorder (:mod:`gspo.costmodel.layout`): the count a piece makes
    beyond what its ops made alone is a further column (cross-validated error of the calibration
    pieces 15.5% with the factors alone, 14.0% with the column, on the shipped database). Returns the factors, the penalty
    and the reorder cost (0 without a blocked layout)."""
    block = model.profile.layout_block
    rows, ys, deltas = [], [], []
    for bench, seconds in timed:
        g = bench.build()
        by_family = dict.fromkeys(FAMILIES, 0.0)
        for node, c in zip(g.nodes, model.op_costs(g)):
            by_family[op_features(g, node).family] += c
        rows.append([by_family[f] for f in FAMILIES])
        ys.append(max(seconds - call_cost, 1e-7))
        deltas.append(reorder_delta(g, block) * REORDER_UNIT)
    x = np.asarray(rows) / np.asarray(ys)[:, None]
    present = x.any(axis=0)
    x = x[:, present]
    # The reorder column, or no extra column at all (no blocked layout, or no piece that differs).
    extra = (np.asarray(deltas) / np.asarray(ys))[:, None] if block and any(deltas) else np.zeros((len(x), 0))
    folds = np.arange(len(x)) % CV_FOLDS

    def cv_error(lam: float) -> float:
        err = 0.0
        for k in range(CV_FOLDS):
            s, r = scale_fit(x[folds != k], lam, extra[folds != k])
            err += float(np.abs(x[folds == k] @ s + extra[folds == k] @ r - 1.0).sum())
        return err

    lam = min(FAMILY_SCALE_PENALTIES, key=cv_error)
    scales, r = scale_fit(x, lam, extra)
    reorder = float(r[0]) * REORDER_UNIT if r.size else 0.0
    return {f: float(v) for f, v in zip((f for f, p in zip(FAMILIES, present) if p), scales)}, lam, reorder


#: Candidate weights of the zoo pieces beside the fork-join graphs in beta_a's fit (0: left out),
#: chosen by cross-validation over the pieces (:func:`fit_beta`).
BETA_PIECE_WEIGHTS = (0, 1, 2, 4)


def fit_beta(px, py, qx, qy) -> tuple[Poly | None, int]:
    """beta_a's fit on the fork-join graphs ``(px, py)`` plus the zoo pieces ``(qx, qy)`` repeated
    ``weight`` times, the weight chosen by ``CV_FOLDS``-fold cross-validation over the pieces
    (mean relative error of the estimated time, ``beta / predicted beta - 1``). Added
    unconditionally, the pieces can make the held-out error grow (21% -> 25% measured with an
    earlier op model); with another they help, which is what the cross-validation is there to tell."""
    if len(px) + len(qx) < 8:
        return None, 0

    def fit(weight: int, keep) -> Poly:
        xs = list(px) + [x for i, x in enumerate(qx) if keep(i)] * weight
        ys = list(py) + [y for i, y in enumerate(qy) if keep(i)] * weight
        # Clipped to the features' range: a quadratic extrapolated to pieces smaller than any
        # calibration graph (NasRNN's, CP1 ~0.13 ms) put beta_a at 0.29 and their estimates at
        # 1.5-1.7x the measured time.
        return fit_poly(xs, ys, degree=2, alpha=1.0, clip=True)

    def cv_error(weight: int) -> float:
        err = 0.0
        for k in range(CV_FOLDS):
            poly = fit(weight, lambda i, k=k: i % CV_FOLDS != k)
            err += sum(abs(y / max(poly(x), 0.05) - 1) for i, (x, y) in enumerate(zip(qx, qy)) if i % CV_FOLDS == k)
        return err

    weight = min(BETA_PIECE_WEIGHTS, key=cv_error) if len(qx) >= 2 * CV_FOLDS and len(px) >= 8 else 0
    return fit(weight, lambda i: True), weight


#: Candidate bandwidths (standardized feature units) of the op fits' local correction
#: (:mod:`gspo.costmodel.poly`), chosen per family by leave-one-out error over its single ops;
#: ``None``: the polynomial alone.
LOCAL_BANDWIDTHS = (None, 0.15, 0.3, 0.6, 1.2)
#: Weight of "no correction" against a measured op at distance 0.
LOCAL_PRIOR = 0.5


def fit_family(xs: list[list[float]], ys: list[float]) -> Poly:
    """The family's polynomial, with the local correction whose bandwidth predicts each single op
    best from the others (leave-one-out, mean absolute error in log10 seconds)."""
    plain = fit_poly(xs, ys, degree=2, alpha=1.0)
    z = (np.asarray(xs) - np.asarray(plain.mean)) / np.asarray(plain.scale)
    resid = np.asarray(ys) - np.asarray([plain(x) for x in xs])
    d2 = ((z[:, None, :] - z[None, :, :]) ** 2).sum(axis=2)

    def loo(bw: float | None) -> float:
        if bw is None:
            return float(np.abs(resid).mean())
        w = np.exp(-d2 / (2 * bw * bw))
        np.fill_diagonal(w, 0.0)
        corr = (w @ resid) / (w.sum(axis=1) + LOCAL_PRIOR)
        return float(np.abs(resid - corr).mean())

    bw = min(LOCAL_BANDWIDTHS, key=lambda b: (loo(b), b is not None))
    if bw is None:
        return plain
    return fit_poly(xs, ys, degree=2, alpha=1.0, bandwidth=bw, prior=LOCAL_PRIOR)


@dataclass(frozen=True)
class FixedCosts:
    """What calibration measures once per device, beside the benchmarks.

    Attributes:
        call: seconds of one session call that does next to nothing.
        sync: seconds of one cross-stream synchronization.
        launch: seconds of a multi-stream run of next to nothing (``None``: not measured).
        layout_block: onnxruntime's blocked-layout channel block on the device (0: none).
    """

    call: float
    sync: float
    launch: float | None = None
    layout_block: int = 0


def fit(ops, chain, branches, fixed: FixedCosts, cfg, pieces=()) -> Profile:
    """Fit a profile to measured ``(Bench, row)`` pairs of each kind, with the device's ``fixed`` costs.

    In order: the per-family op model, the sequential aggregate correction (per-family in-context
    factors from zoo pieces run as one session, with the seconds per blocked-layout reorder when
    ``fixed.layout_block`` is set; without enough pieces, one factor from chains and fork-join graphs),
    the per-segment costs (multi-branch graphs run as segments in order vs one session), and
    beta_a (the same graphs on streams, plus the parallel zoo pieces weighted by cross-validation,
    :func:`fit_beta`). Measurements timed with the speed reference are first put in reference
    units (see :mod:`gspo.costmodel.reference`). ``cfg`` (a
    :class:`~gspo.costmodel.calibrate.CalibrationConfig`) gives the device, runtime, backend and
    passes.
    """
    call_cost = fixed.call
    refs = [d["reference"] for _, d in (*ops, *chain, *branches, *pieces) if d.get("reference")]
    nominal = float(statistics.median(refs)) if refs else 0.0
    ops, chain, branches, pieces = ([(b, _in_units(d, nominal)) for b, d in rows] for rows in (ops, chain, branches, pieces))
    families, reps = _op_families(ops, call_cost)
    meta = {"ops": len(ops), "chains": len(chain), "branches": len(branches), "pieces": len(pieces),
            "normalized": len(refs), "passes": cfg.passes}
    own = sorted(max(d["seconds"] - call_cost, 0.0) for _, d in ops)
    overhead = float(own[len(own) // 10]) if own else 0.0
    base = Profile(cfg.device, cfg.runtime, call_cost, call_cost, fixed.sync, families, reps, None, meta=meta,
                   op_overhead=overhead, reference_s=nominal, layout_block=fixed.layout_block)
    base = _sequential_correction(base, chain, branches, pieces, call_cost)
    graphs = [(g, assign_streams(g, max_streams=stream_cap(cfg.backend)), d) for g, d in
              ((bench.build(), d) for bench, d in branches)]
    base = _segment_costs(base, graphs, call_cost)
    if fixed.launch:
        base = _launch_cost(base, fixed.launch, cfg.backend)
    return _parallel_correction(base, graphs, pieces, cfg.backend)


def _in_units(d: dict, nominal: float) -> dict:
    """A measurement row with its timed values in reference units."""
    return {k: normalize(v, d.get("reference"), nominal) if k in TIMED_KEYS else v for k, v in d.items()}


def _op_families(ops, call_cost: float) -> tuple[dict[str, Poly], dict[str, list]]:
    """Per family of the single ops' main op: its fit (8 ops or more) and its (flops, seconds) points."""
    samples: dict[str, list[tuple[list[float], float, float]]] = {}
    for bench, d in ops:
        g = bench.build()
        seconds = max(d["seconds"] - call_cost, 1e-7)
        feats = [op_features(g, n) for n in g.nodes]
        main = max(feats, key=lambda f: (f.flops, f.bytes))
        samples.setdefault(main.family, []).append((feature_vector(main), seconds, main.flops))
    families, reps = {}, {}
    for fam, rows in sorted(samples.items()):
        reps[fam] = sorted((flops, sec) for _, sec, flops in rows)
        if len(rows) >= 8:
            families[fam] = fit_family([r[0] for r in rows], [math.log10(r[1]) for r in rows])
    return families, reps


def _sequential_correction(base: Profile, chain, branches, pieces, call_cost: float) -> Profile:
    """``base`` with what turns single-op costs into a graph's run time.

    Preferred: per-family in-context factors fitted on zoo pieces (disjoint from the held-out
    ones), what the search actually costs. Without enough pieces (a GPU calibration, a test): one
    factor over every calibration graph run as one session (chains, fork-join graphs), 0.75 on
    this CPU; chains alone gave 0.65 and over-discounted real pieces.
    """
    model = CostModel(base)
    seq_scale = (1.0, 0.0)
    whole = [(b, d["seconds"]) for b, d in chain] + [(b, d["one_session"]) for b, d in branches if "one_session" in d]
    real = [(b, d.get("one_session", d["seconds"])) for b, d in pieces]
    if len(real) >= 8:
        scales, penalty, reorder = family_scales(model, real, call_cost)
        base = replace(base, family_scale=scales, reorder_cost=reorder,
                       meta={**base.meta, "family_scale_penalty": penalty})
        model = CostModel(base)
    elif len(whole) >= 4:
        # A pure factor (slope 1 in log space): a free slope fitted on short chains was unstable
        # between calibrations (0.68-0.81) and extrapolated badly to larger graphs.
        xs = [math.log10(max(sum(model.op_costs(b.build())), 1e-9)) for b, _ in whole]
        ys = [math.log10(max(t - call_cost, 1e-7)) for _, t in whole]
        seq_scale = (1.0, float(np.median(np.subtract(ys, xs))))
    return replace(base, seq_scale=seq_scale)


def _segment_costs(base: Profile, graphs, call_cost: float) -> Profile:
    """``base`` with the cost of a segment and of each byte crossing between segments, fitted on
    the multi-branch graphs run as segments in order against one session."""
    model = CostModel(base)
    seg_rows, seg_y = [], []
    for g, schedule, d in graphs:
        if "segments_in_order" in d:
            runs = segment_runs(schedule)
            seg_rows.append([len(runs), sum(segment_boundary_bytes(g, schedule))])
            # Less the reorders the segments add over the whole (modelled on their own).
            index = {node_id(n): i for i, n in enumerate(g.nodes)}
            reorders = sum(model.reorders(g, [index[op] for op in ops]) for _, ops in runs)
            seg_y.append(d["segments_in_order"] - d["one_session"] - (reorders - model.reorders(g)))
    seg_cost, byte_cost = call_cost, 0.0
    if len(seg_rows) >= 4:
        from scipy.optimize import nnls

        coef, _ = nnls(np.asarray(seg_rows, dtype=np.float64), np.asarray(seg_y, dtype=np.float64))
        seg_cost, byte_cost = float(coef[0]), float(coef[1])
    return replace(base, segment_cost=seg_cost, segment_byte_cost=byte_cost)


def _launch_cost(base: Profile, launch_s: float, backend: str) -> Profile:
    """``base`` with what a multi-stream run of next to nothing took beyond what its segment DAG
    accounts for (its segment, sync and call costs): beta_a, fitted with it in CP1, then need not
    stretch to cover it for tiny pieces."""
    g = launch_graph()
    schedule = assign_streams(g, max_streams=stream_cap(backend))
    if schedule.num_streams <= 1:
        return base
    return replace(base, launch_cost=max(0.0, launch_s - CostModel(base).critical_path(g, schedule)[0]))


def _parallel_correction(base: Profile, graphs, pieces, backend: str) -> Profile:
    """``base`` with beta_a fitted on the fork-join graphs and the parallel zoo pieces on streams."""
    model = CostModel(base)
    px = [model.parallel_features(g, schedule) for g, schedule, _ in graphs]
    py = [model.critical_path(g, schedule)[0] / d["seconds"] for g, schedule, d in graphs]
    qx, qy = [], []
    for bench, d in pieces:
        if bench.spec.get("parallel") and "seconds" in d:
            g = bench.build()
            schedule = assign_streams(g, max_streams=stream_cap(backend))
            if schedule.num_streams >= 2:
                qx.append(model.parallel_features(g, schedule))
                qy.append(model.critical_path(g, schedule)[0] / d["seconds"])
    parallel, weight = fit_beta(px, py, qx, qy)
    return replace(base, parallel=parallel, meta={**base.meta, "beta_piece_weight": weight})
