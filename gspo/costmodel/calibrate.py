"""Calibration: measure the microbenchmarks on the device, fit the profile.

Every measurement goes through ``gspo.runtime`` with its timing discipline (warm-up, repeated
runs, median; intra-op spinning off) and is cached in the calibration database, so an
interrupted calibration resumes where it stopped and a re-run only measures what is new.
"""

from __future__ import annotations

import math
import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from gspo.costmodel.db import CalibrationDB
from gspo.costmodel.estimate import CostModel, segment_boundary_bytes
from gspo.costmodel.features import feature_vector, op_features
from gspo.costmodel.layout import detect_block, reorder_delta
from gspo.costmodel.microbench import Bench, chains, multi_branch, single_ops, zoo_pieces
from gspo.costmodel.poly import Poly, fit_poly
from gspo.costmodel.profile import Profile
from gspo.costmodel.reference import SpeedReference, normalize
from gspo.ir import serialize
from gspo.ir.builder import GraphBuilder
from gspo.runtime import (
    CpuExecutor,
    device_executor,
    make_executor,
    make_plan,
    make_session,
    measure_once,
    random_inputs,
    timed_runner,
)
from gspo.streams import assign_streams, node_id, segment_runs

__all__ = ["CalibrationConfig", "calibrate", "time_callable", "measure_call_cost", "measure_sync_cost"]


@dataclass(frozen=True)
class CalibrationConfig:
    device: str
    runtime: str
    db_path: str
    budget_s: float = 15 * 60
    min_runs: int = 5
    max_runs: int = 30
    target_s: float = 0.1  # per measurement, after warm-up
    seed: int = 0
    backend: str = "cpu"  # "cpu" or "cuda"
    #: Passes over the suite: every microbenchmark is measured this many times, minutes apart,
    #: and the fit takes the median (in reference units) of its measurements.
    passes: int = 1
    #: Measure each pass in a seeded random order rather than kind by kind (single ops, then
    #: chains, fork-join graphs, zoo pieces): a drift of the machine's state within a pass then
    #: falls on every kind alike instead of on whichever kind was being measured.
    shuffle: bool = True


#: Passes over the suite that ``gspo calibrate`` makes unless told otherwise (sessions 6-7: with 3
#: instead of 1, the held-out sequential error fell in each of seven evaluation runs, by 0.1-1.5
#: points; see the README for what it did to the parallel one).
DEFAULT_CALIBRATION_PASSES = 3

#: A measurement of pass k >= 1 is stored under its benchmark's signature plus this and k (pass 0
#: under the bare signature, so a database from before passes existed is pass 0 of any calibration).
PASS_MARK = "#pass="


def _pass_signature(signature: str, k: int) -> str:
    return signature if k == 0 else f"{signature}{PASS_MARK}{k}"


def _pass_order(suite: list[Bench], k: int, cfg: CalibrationConfig) -> list[Bench]:
    """The order in which pass ``k`` measures ``suite`` (see ``CalibrationConfig.shuffle``)."""
    if not cfg.shuffle:
        return list(suite)
    import random

    order = list(suite)
    random.Random(f"{cfg.seed}/{k}").shuffle(order)
    return order


def _by_benchmark(rows: list[tuple[str, dict]], passes: int) -> dict[str, list[dict]]:
    """The measurements of each benchmark's first ``passes`` passes, by its bare signature."""
    by_sig: dict[str, list[dict]] = {}
    for sig, d in rows:
        base, _, k = sig.partition(PASS_MARK)
        if not k or int(k) < passes:
            by_sig.setdefault(base, []).append(d)
    return by_sig


def _combine_passes(rows: list[tuple[str, dict]], passes: int, nominal: float | None = None) -> list[tuple[str, dict]]:
    """One row per benchmark from the measurements of its first ``passes`` passes: each timed value
    is the median of the passes' values, every one first put in reference units (against
    ``nominal``, by default the median reference of the rows), and the row's reference is
    ``nominal``, so :func:`fit`, given the median reference of everything it fits as its own, leaves
    the values as they are. With one pass, or rows without a reference, the rows are as stored."""
    by_sig = _by_benchmark(rows, passes)
    refs = [d["reference"] for ds in by_sig.values() for d in ds if d.get("reference")]
    if passes <= 1 or not refs or len(refs) != sum(len(ds) for ds in by_sig.values()):
        return [(sig, ds[0]) for sig, ds in by_sig.items()]
    nominal = float(statistics.median(refs)) if nominal is None else nominal
    out = []
    for sig, ds in by_sig.items():
        row = dict(ds[0])
        for key in _TIMED:
            values = [normalize(d[key], d["reference"], nominal) for d in ds if key in d]
            if values:
                row[key] = float(statistics.median(values))
        row["reference"] = nominal
        row["passes"] = len(ds)
        out.append((sig, row))
    return out


def time_callable(fn: Callable[[], object], min_runs: int = 5, max_runs: int = 30, target_s: float = 0.1) -> float:
    """Median seconds of ``fn`` after 2 warm-up calls, over at least ``min_runs`` runs and until
    ``target_s`` has been spent (at most ``max_runs``)."""
    fn()
    fn()
    times: list[float] = []
    spent = 0.0
    while len(times) < min_runs or (spent < target_s and len(times) < max_runs):
        dt = measure_once(fn)  # the device's own time where fn reports one
        times.append(dt)
        spent += dt
    return statistics.median(times)


def measure_call_cost(backend: str = "cpu") -> float:
    b = GraphBuilder()
    g = b.output(b.op("Identity", [b.input("x", (1,))])).build()
    feeds = {"x": np.zeros(1, np.float32)}
    if backend == "cpu":
        sess = make_session(g)
        return time_callable(lambda: sess.run(None, feeds), 20, 2000, 0.2)
    ex = make_executor(g, 1, backend)
    try:
        return time_callable(timed_runner(ex, feeds), 20, 2000, 0.2)
    finally:
        ex.close()


def launch_graph():
    """Two one-op branches joined by an Add: a multi-stream run with next to nothing to compute,
    so its time is the executor's own cost."""
    b = GraphBuilder()
    x = b.input("x", (1, 8))
    return b.output(b.op("Add", [b.op("Relu", [x]), b.op("Sigmoid", [x])])).build()


def measure_launch_cost() -> float | None:
    """Seconds of one run of :func:`launch_graph` on the CPU executor with two streams (None when
    the machine has one core: no multi-stream schedule)."""
    g = launch_graph()
    schedule = assign_streams(g, max_streams=_stream_cap("cpu"))
    if schedule.num_streams < 2:
        return None
    feeds = random_inputs(g)
    with CpuExecutor(g, schedule) as ex:
        # Thread hand-offs are what it measures, and they vary with the machine's load: the median
        # of five timings (a single one read 0.15 ms and 0.24 ms on the same afternoon).
        return statistics.median(time_callable(lambda: ex.run(feeds), 20, 2000, 0.1) for _ in range(5))


def measure_sync_cost(rounds: int = 2000) -> float:
    """Half a round trip of two ``threading.Event``s between two threads."""
    ping, pong = threading.Event(), threading.Event()

    def other():
        for _ in range(rounds):
            ping.wait()
            ping.clear()
            pong.set()

    t = threading.Thread(target=other)
    t.start()
    start = time.perf_counter()
    for _ in range(rounds):
        ping.set()
        pong.wait()
        pong.clear()
    elapsed = time.perf_counter() - start
    t.join()
    return elapsed / rounds / 2


#: Seconds spent timing the speed reference after each measurement.
REFERENCE_TARGET_S = 0.03


def speed_reference(backend: str = "cpu") -> SpeedReference | None:
    """The speed reference timed next to every measurement (CPU only: on a GPU the reference
    would have to run on the device, which is not built yet)."""
    if backend != "cpu":
        return None
    return SpeedReference(lambda fn: time_callable(fn, 5, 500, REFERENCE_TARGET_S))


def _measure(bench: Bench, cfg: CalibrationConfig, reference: SpeedReference | None = None) -> dict:
    d = _measure_bench(bench, cfg)
    if reference is not None:
        d["reference"] = reference.measure()
    return d


def _measure_bench(bench: Bench, cfg: CalibrationConfig) -> dict:
    g = bench.build()
    feeds = random_inputs(g, cfg.seed)
    timing = (cfg.min_runs, cfg.max_runs, cfg.target_s)
    forked = bench.kind == "branches" or (bench.kind == "piece" and bench.spec.get("parallel"))
    if not forked and bench.kind in ("op", "chain", "piece") and cfg.backend == "cpu":
        sess = make_session(g)
        return {"seconds": time_callable(lambda: sess.run(None, feeds), *timing)}
    if forked and cfg.backend == "cpu":
        sess = make_session(g)
        schedule = assign_streams(g, max_streams=_stream_cap(cfg.backend))
        segments = make_plan(g, schedule).segments
        seg_sessions = [make_session(serialize(seg.graph)) for seg in segments]

        def in_order():
            values = dict(feeds)
            for seg, ss in zip(segments, seg_sessions):
                values.update(zip(seg.outputs, ss.run(list(seg.outputs), {k: values[k] for k in seg.inputs})))

        with CpuExecutor(g, schedule) as ex:
            return {
                "seconds": time_callable(lambda: ex.run(feeds), *timing),
                "one_session": time_callable(lambda: sess.run(None, feeds), *timing),
                "segments_in_order": time_callable(in_order, *timing),
                "streams": schedule.num_streams,
            }
    if forked:
        return _measure_forked_on_device(g, feeds, cfg.backend, timing)
    ex = device_executor(g, None, cfg.backend)
    try:
        seconds = time_callable(timed_runner(ex, feeds), *timing)
    finally:
        ex.close()
    return {"seconds": seconds, "streams": ex.num_streams}


def _measure_forked_on_device(g, feeds, backend: str, timing: tuple) -> dict:
    """A fork-join graph on a device timed as the CPU's are: on its streams (``seconds``), as one
    session (``one_session``, what the sequential fit and beta's reference need) and as its pieces
    one after another on one stream (``segments_in_order``)."""
    schedule = assign_streams(g, max_streams=_stream_cap(backend))
    out = {"streams": schedule.num_streams}
    for key, sched, one_stream in (("seconds", schedule, False), ("one_session", None, False),
                                   ("segments_in_order", schedule, True)):
        ex = device_executor(g, sched, backend, one_stream=one_stream)
        try:
            out[key] = time_callable(timed_runner(ex, feeds), *timing)
        finally:
            ex.close()
    return out


_TIMED = frozenset({"seconds", "one_session", "segments_in_order"})


def _stream_cap(backend: str) -> int | None:
    return (os.cpu_count() or 1) if backend == "cpu" else None


def calibrate(cfg: CalibrationConfig, progress: Callable[[int, int, str], None] | None = None) -> Profile:
    """Measure what the database lacks (within the budget), then fit and return the profile."""
    db = CalibrationDB(cfg.db_path, cfg.device, cfg.runtime)
    started = time.perf_counter()
    try:
        fixed = db.get("fixed-costs")
        if fixed is None:
            # On CUDA the sync cost is part of what beta_a absorbs; it is not measured apart.
            sync = measure_sync_cost() if cfg.backend == "cpu" else 0.0
            fixed = {"call": measure_call_cost(cfg.backend), "sync": sync}
            db.put("fixed-costs", "fixed", fixed)
        # Measured apart from the fixed costs so that a database made before it was added gets it.
        launch = db.get("launch-cost")
        if launch is None and cfg.backend == "cpu":
            launch = {"seconds": measure_launch_cost()}
            db.put("launch-cost", "fixed", launch)
        # onnxruntime's blocked-layout channel block on this CPU (gspo.costmodel.layout); read from
        # the database so that a refit elsewhere keeps the calibrated device's.
        layout = db.get("layout")
        if layout is None and cfg.backend == "cpu":
            layout = {"block": detect_block()}
            db.put("layout", "fixed", layout)
        suite = single_ops(cfg.seed) + chains(cfg.seed) + multi_branch(cfg.seed) + zoo_pieces()
        # Pass by pass (a pass's measurements are minutes apart from the previous pass's).
        todo = [(b, _pass_signature(b.signature, k)) for k in range(cfg.passes) for b in _pass_order(suite, k, cfg)]
        todo = [(b, sig) for b, sig in todo if db.get(sig) is None]
        total = len(suite) * cfg.passes
        done = total - len(todo)
        reference = speed_reference(cfg.backend) if todo else None
        for i, (bench, sig) in enumerate(todo):
            if time.perf_counter() - started > cfg.budget_s:
                break
            db.put(sig, bench.kind, _measure(bench, cfg, reference))
            if progress:
                progress(done + i + 1, total, bench.spec.get("op", "branches"))
        stored = {kind: db.all(kind) for kind in ("op", "chain", "branches", "piece")}
        refs = [d["reference"] for rows in stored.values() for ds in _by_benchmark(rows, cfg.passes).values()
                for d in ds if d.get("reference")]
        nominal = float(statistics.median(refs)) if refs else None
        rows = {kind: _combine_passes(r, cfg.passes, nominal) for kind, r in stored.items()}
        ops = [(Bench("op", _spec(sig)), d) for sig, d in rows["op"]]
        chain = [(Bench("chain", _spec(sig)), d) for sig, d in rows["chain"]]
        branches = [(Bench("branches", _spec(sig)), d) for sig, d in rows["branches"]]
        # Only the pieces of the current suite (a changed zoo or held-out set retires old ones).
        current = {b.signature for b in suite if b.kind == "piece"}
        pieces = [(Bench("piece", _spec(sig)), d) for sig, d in rows["piece"] if sig in current]
    finally:
        db.close()
    return fit(ops, chain, branches, fixed["call"], fixed["sync"], cfg, pieces,
               launch_s=(launch or {}).get("seconds"), layout_block=int((layout or {}).get("block", 0)))


def _spec(signature: str) -> dict:
    import json

    d = json.loads(signature)
    d.pop("kind")
    return d


#: Bounds of an in-context family factor: a family's ops take between a quarter and four times
#: their single-op cost inside real pieces (a free fit zeroed families the pieces rarely contain).
FAMILY_SCALE_BOUNDS = (0.25, 4.0)


#: Candidate ridge weights pulling the family factors toward 1, chosen by cross-validation on the
#: calibration pieces (:func:`_family_scales`). A free fit swung with the piece set (LayerNorm's
#: factor 2.7 in one calibration, 0.25 in the next, when adding two rules moved the partition).
FAMILY_SCALE_PENALTIES = (0.0, 1.0, 5.0, 20.0, 100.0, 1000.0)
#: Folds of that cross-validation.
CV_FOLDS = 5


def _scale_fit(x: np.ndarray, lam: float, extra: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Least squares of ``log(x @ s + extra @ r) ~ 0`` plus ``lam * |s - c|^2``, with ``s = c + d``:
    one common factor ``c`` and per-family deviations ``d`` pulled toward 0; ``s`` kept within the
    bounds. ``extra`` (optional): further columns with their own coefficients ``r``, unpenalized,
    within ``[0, EXTRA_MAX]`` (the reorder count, :mod:`gspo.costmodel.layout`). Returns ``(s, r)``.

    On the log of the ratio estimate/measured, so that an estimate half the measured time weighs
    as much as one twice it. Least squares on the ratio itself (``x @ s ~ 1``, the earlier fit) is
    biased low when the measurements are noisy: it leaves the cross-validated estimates of the
    calibration pieces at a median of 0.92-0.95 of their measured time (five calibration databases;
    0.96-1.01 with this fit, at the same cross-validated mean error, 16-19%)."""
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


#: Upper bound of an extra column's coefficient in :func:`_scale_fit` (the reorder column is in
#: units of ``REORDER_UNIT`` seconds: at most 1 ms per reorder).
EXTRA_MAX = 100.0
REORDER_UNIT = 1e-5


def _family_scales(model: CostModel, timed: list, call_cost: float) -> tuple[dict[str, float], float, float]:
    """Per family, the factor that best turns single-op costs into the measured run times of
    ``timed`` pieces (least squares on the log of estimated/measured, bounded, pulled toward a common factor by a
    penalty chosen by ``CV_FOLDS``-fold cross-validation over the pieces); families the pieces
    lack keep 1. With a blocked layout on the device (``model.profile.layout_block``), fitted
    together with the seconds per reorder (:mod:`gspo.costmodel.layout`): the count a piece makes
    beyond what its ops made alone is a further column (cross-validated error of the
    calibration pieces 15.5% -> 14.0% on the shipped database). Returns the factors, the penalty
    and the reorder cost (0 without a blocked layout)."""
    from gspo.costmodel.features import FAMILIES

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
            s, r = _scale_fit(x[folds != k], lam, extra[folds != k])
            err += float(np.abs(x[folds == k] @ s + extra[folds == k] @ r - 1.0).sum())
        return err

    lam = min(FAMILY_SCALE_PENALTIES, key=cv_error)
    scales, r = _scale_fit(x, lam, extra)
    reorder = float(r[0]) * REORDER_UNIT if r.size else 0.0
    return {f: float(v) for f, v in zip((f for f, p in zip(FAMILIES, present) if p), scales)}, lam, reorder


#: Candidate weights of the zoo pieces beside the fork-join graphs in beta_a's fit (0: left out),
#: chosen by cross-validation over the pieces (:func:`_fit_beta`).
BETA_PIECE_WEIGHTS = (0, 1, 2, 4)


def _fit_beta(px, py, qx, qy) -> tuple[Poly | None, int]:
    """beta_a's fit on the fork-join graphs ``(px, py)`` plus the zoo pieces ``(qx, qy)`` repeated
    ``weight`` times, the weight chosen by ``CV_FOLDS``-fold cross-validation over the pieces
    (mean relative error of the estimated time, ``beta / predicted beta - 1``). Added
    unconditionally, the pieces made the held-out error grow (21% -> 25%); with this profile's op
    model they help, which is what the cross-validation is there to tell."""
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


def _fit_family(xs: list[list[float]], ys: list[float]) -> Poly:
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


def fit(ops, chain, branches, call_cost: float, sync_cost: float, cfg: CalibrationConfig, pieces=(),
        launch_s: float | None = None, layout_block: int = 0) -> Profile:
    """Fit, in order: the per-family op model, the sequential aggregate correction (per-family
    in-context factors from zoo pieces run as one session, with the seconds per blocked-layout
    reorder when ``layout_block`` is set; without enough pieces, one factor from chains and
    fork-join graphs), the per-segment costs (multi-branch graphs run as segments in order vs one
    session), and beta_a (the same graphs on streams, plus the parallel zoo pieces weighted by
    cross-validation, :func:`_fit_beta`). Measurements timed with the speed reference are first put
    in reference units (see :mod:`gspo.costmodel.reference`)."""
    refs = [d["reference"] for _, d in (*ops, *chain, *branches, *pieces) if d.get("reference")]
    nominal = float(statistics.median(refs)) if refs else 0.0

    def units(d: dict) -> dict:
        return {k: normalize(v, d.get("reference"), nominal) if k in _TIMED else v for k, v in d.items()}

    ops = [(b, units(d)) for b, d in ops]
    chain = [(b, units(d)) for b, d in chain]
    branches = [(b, units(d)) for b, d in branches]
    pieces = [(b, units(d)) for b, d in pieces]
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
            families[fam] = _fit_family([r[0] for r in rows], [math.log10(r[1]) for r in rows])
    meta = {"ops": len(ops), "chains": len(chain), "branches": len(branches), "pieces": len(pieces),
            "normalized": len(refs), "passes": cfg.passes}
    own = sorted(max(d["seconds"] - call_cost, 0.0) for _, d in ops)
    overhead = float(own[len(own) // 10]) if own else 0.0
    base = Profile(cfg.device, cfg.runtime, call_cost, call_cost, sync_cost, families, reps, None, meta=meta,
                   op_overhead=overhead, reference_s=nominal, layout_block=layout_block)
    model = CostModel(base)
    seq_scale = (1.0, 0.0)
    # From single-op costs to a graph's run time. Preferred: per-family in-context factors fitted
    # on zoo pieces (disjoint from the held-out ones), what the search actually costs. Without
    # enough pieces (a GPU calibration, a test): one factor over every calibration graph run as one
    # session (chains, fork-join graphs), 0.75 on this CPU; chains alone gave 0.65 and
    # over-discounted real pieces.
    whole = [(b, d["seconds"]) for b, d in chain] + [(b, d["one_session"]) for b, d in branches if "one_session" in d]
    real = [(b, d.get("one_session", d["seconds"])) for b, d in pieces]
    if len(real) >= 8:
        scales, penalty, reorder = _family_scales(model, real, call_cost)
        base = replace(base, family_scale=scales, reorder_cost=reorder,
                       meta={**meta, "family_scale_penalty": penalty})
        model = CostModel(base)
    elif len(whole) >= 4:
        # A pure factor (slope 1 in log space): a free slope fitted on short chains was unstable
        # between calibrations (0.68-0.81) and extrapolated badly to larger graphs.
        xs = [math.log10(max(sum(model.op_costs(b.build())), 1e-9)) for b, _ in whole]
        ys = [math.log10(max(t - call_cost, 1e-7)) for _, t in whole]
        seq_scale = (1.0, float(np.median(np.subtract(ys, xs))))
    base = replace(base, seq_scale=seq_scale)
    model = CostModel(base)
    seg_rows, seg_y = [], []
    graphs = []
    for bench, d in branches:
        g = bench.build()
        schedule = assign_streams(g, max_streams=_stream_cap(cfg.backend))
        graphs.append((g, schedule, d))
        if "segments_in_order" in d:
            n_seg = len(segment_runs(schedule))
            seg_rows.append([n_seg, sum(segment_boundary_bytes(g, schedule))])
            # Less the reorders the segments add over the whole (modelled on their own).
            index = {node_id(n): i for i, n in enumerate(g.nodes)}
            reorders = sum(model.reorders(g, [index[op] for op in ops]) for _, ops in segment_runs(schedule))
            seg_y.append(d["segments_in_order"] - d["one_session"] - (reorders - model.reorders(g)))
    seg_cost, byte_cost = call_cost, 0.0
    if len(seg_rows) >= 4:
        from scipy.optimize import nnls

        coef, _ = nnls(np.asarray(seg_rows, dtype=np.float64), np.asarray(seg_y, dtype=np.float64))
        seg_cost, byte_cost = float(coef[0]), float(coef[1])
    base = replace(base, segment_cost=seg_cost, segment_byte_cost=byte_cost)
    model = CostModel(base)
    if launch_s:
        # What a multi-stream run of next to nothing took beyond what its segment DAG accounts for
        # (its segment, sync and call costs): beta_a, fitted below with it in CP1, then need not
        # stretch to cover it for tiny pieces.
        g = launch_graph()
        schedule = assign_streams(g, max_streams=_stream_cap(cfg.backend))
        if schedule.num_streams > 1:
            base = replace(base, launch_cost=max(0.0, launch_s - model.critical_path(g, schedule)[0]))
            model = CostModel(base)
    px, py = [], []
    for g, schedule, d in graphs:
        px.append(model.parallel_features(g, schedule))
        py.append(model.critical_path(g, schedule)[0] / d["seconds"])
    qx, qy = [], []  # the zoo calibration pieces on streams
    for bench, d in pieces:
        if bench.spec.get("parallel") and "seconds" in d:
            g = bench.build()
            schedule = assign_streams(g, max_streams=_stream_cap(cfg.backend))
            if schedule.num_streams >= 2:
                qx.append(model.parallel_features(g, schedule))
                qy.append(model.critical_path(g, schedule)[0] / d["seconds"])
    parallel, weight = _fit_beta(px, py, qx, qy)
    meta = {**base.meta, "beta_piece_weight": weight}
    base = replace(base, meta=meta)
    return replace(base, parallel=parallel)
