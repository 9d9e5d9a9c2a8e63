"""Calibration: measure the microbenchmarks on the device, fit the profile.

Every measurement goes through ``gspo.runtime`` with its timing discipline (warm-up, repeated
runs, median; intra-op spinning off) and is cached in the calibration database, so an
interrupted calibration resumes where it stopped and a re-run only measures what is new.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gspo.costmodel.db import CalibrationDB
from gspo.costmodel.fit import TIMED_KEYS, FixedCosts, fit
from gspo.costmodel.microbench import (
    Bench,
    chains,
    launch_graph,
    multi_branch,
    single_ops,
    stream_cap,
    zoo_pieces,
)
from gspo.costmodel.profile import Profile
from gspo.costmodel.reference import SpeedReference, normalize
from gspo.ir import serialize
from gspo.ir.builder import GraphBuilder
from gspo.runtime import (
    CpuExecutor,
    Repeats,
    device_executor,
    make_executor,
    make_plan,
    make_session,
    median_seconds,
    optimized_op_types,
    random_inputs,
    timed_runner,
)
from gspo.streams import assign_streams

__all__ = ["CalibrationConfig", "calibrate", "detect_block", "measure_call_cost", "measure_sync_cost", "speed_reference"]


@dataclass(frozen=True)
class CalibrationConfig:
    """Settings of one calibration (``gspo calibrate`` builds this).

    Attributes:
        device / runtime: what the profile is for (its description, onnxruntime's version).
        db_path: the calibration database measurements are cached in.
        budget_s: seconds of measuring at most (what is left unmeasured waits for a re-run).
        min_runs / max_runs / target_s: each measurement's repeats (:class:`~gspo.runtime.Repeats`).
    """

    device: str
    runtime: str
    db_path: str
    budget_s: float = 15 * 60
    min_runs: int = Repeats.min_runs
    max_runs: int = Repeats.max_runs
    target_s: float = Repeats.target_s
    seed: int = 0
    backend: str = "cpu"  # "cpu" or "cuda"
    #: On ``cuda``, the runtime the executors run on (``ort`` or ``torch``, as ``calibrate --gpu``
    #: chose it: :func:`~gspo.runtime.cuda.choice.cuda_runtime`).
    cuda_runtime: str | None = None
    #: Passes over the suite: every microbenchmark is measured this many times, minutes apart,
    #: and the fit takes the median (in reference units) of its measurements.
    passes: int = 1
    #: Measure each pass in a seeded random order rather than kind by kind (single ops, then
    #: chains, fork-join graphs, zoo pieces): a drift of the machine's state within a pass then
    #: falls on every kind alike instead of on whichever kind was being measured.
    shuffle: bool = True

    @property
    def repeats(self) -> Repeats:
        """The repeats of each measurement."""
        return Repeats(self.min_runs, self.max_runs, self.target_s)


#: Passes over the suite that ``gspo calibrate`` makes unless told otherwise (with 3 instead of 1,
#: the held-out sequential error fell in each of seven evaluation runs, by 0.1-1.5 points; see the
#: README for what it did to the parallel one).
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
        for key in TIMED_KEYS:
            values = [normalize(d[key], d["reference"], nominal) for d in ds if key in d]
            if values:
                row[key] = float(statistics.median(values))
        row["reference"] = nominal
        row["passes"] = len(ds)
        out.append((sig, row))
    return out


#: Repeats of the fixed-cost measurements: many runs of next to nothing.
CALL_REPEATS = Repeats(20, 2000, 0.2)
LAUNCH_REPEATS = Repeats(20, 2000, 0.1)
#: Seconds spent timing the speed reference after each measurement.
REFERENCE_TARGET_S = 0.03
REFERENCE_REPEATS = Repeats(5, 500, REFERENCE_TARGET_S)


def measure_call_cost(backend: str = "cpu", runtime: str | None = None) -> float:
    """Seconds of one call of a session (or executor, on ``runtime``) running a single Identity."""
    b = GraphBuilder()
    g = b.output(b.op("Identity", [b.input("x", (1,))])).build()
    feeds = {"x": np.zeros(1, np.float32)}
    if backend == "cpu":
        sess = make_session(g)
        return median_seconds(lambda: sess.run(None, feeds), CALL_REPEATS)
    ex = make_executor(g, 1, backend, runtime=runtime)
    try:
        return median_seconds(timed_runner(ex, feeds), CALL_REPEATS)
    finally:
        ex.close()


def measure_launch_cost() -> float | None:
    """Seconds of one run of :func:`launch_graph` on the CPU executor with two streams (None when
    the machine has one core: no multi-stream schedule)."""
    g = launch_graph()
    schedule = assign_streams(g, max_streams=stream_cap("cpu"))
    if schedule.num_streams < 2:
        return None
    feeds = random_inputs(g)
    with CpuExecutor(g, schedule) as ex:
        # Thread hand-offs are what it measures, and they vary with the machine's load: the median
        # of five timings (a single one read 0.15 ms and 0.24 ms on the same afternoon).
        return statistics.median(median_seconds(lambda: ex.run(feeds), LAUNCH_REPEATS) for _ in range(5))


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


def detect_block() -> int:
    """The channel block of onnxruntime's blocked layout on this CPU (8 or 16), read from the
    graph onnxruntime optimizes for a convolution with 8 and with 16 input channels (a block's
    worth of channels gets a ``ReorderInput``, fewer do not); 0 when neither is blocked."""
    for block in (8, 16):
        b = GraphBuilder("gspo-layout-probe", seed=0)
        x = b.input("x", (1, block, 8, 8))
        g = b.output(b.op("Conv", [x, b.weight("w", (16, block, 3, 3))], pads=[1, 1, 1, 1], kernel_shape=[3, 3])).build()
        if "ReorderInput" in optimized_op_types(g):
            return block
    return 0


def speed_reference(backend: str = "cpu") -> SpeedReference | None:
    """The speed reference timed next to every measurement (CPU only: on a GPU the reference
    would have to run on the device, which is not built yet)."""
    if backend != "cpu":
        return None
    return SpeedReference(lambda fn: median_seconds(fn, REFERENCE_REPEATS))


def _measure(bench: Bench, cfg: CalibrationConfig, reference: SpeedReference | None = None) -> dict:
    d = _measure_bench(bench, cfg)
    if reference is not None:
        d["reference"] = reference.measure()
    return d


def _measure_bench(bench: Bench, cfg: CalibrationConfig) -> dict:
    g = bench.build()
    feeds = random_inputs(g, cfg.seed)
    timing = cfg.repeats
    forked = bench.kind == "branches" or (bench.kind == "piece" and bench.spec.get("parallel"))
    if not forked and bench.kind in ("op", "chain", "piece") and cfg.backend == "cpu":
        sess = make_session(g)
        return {"seconds": median_seconds(lambda: sess.run(None, feeds), timing)}
    if forked and cfg.backend == "cpu":
        sess = make_session(g)
        schedule = assign_streams(g, max_streams=stream_cap(cfg.backend))
        segments = make_plan(g, schedule).segments
        seg_sessions = [make_session(serialize(seg.graph)) for seg in segments]

        def in_order():
            values = dict(feeds)
            for seg, ss in zip(segments, seg_sessions):
                values.update(zip(seg.outputs, ss.run(list(seg.outputs), {k: values[k] for k in seg.inputs})))

        with CpuExecutor(g, schedule) as ex:
            return {
                "seconds": median_seconds(lambda: ex.run(feeds), timing),
                "one_session": median_seconds(lambda: sess.run(None, feeds), timing),
                "segments_in_order": median_seconds(in_order, timing),
                "streams": schedule.num_streams,
            }
    if forked:
        return _measure_forked_on_device(g, feeds, cfg.backend, timing, cfg.cuda_runtime)
    ex = device_executor(g, None, cfg.backend, runtime=cfg.cuda_runtime)
    try:
        seconds = median_seconds(timed_runner(ex, feeds), timing)
    finally:
        ex.close()
    return {"seconds": seconds, "streams": ex.num_streams}


def _measure_forked_on_device(g, feeds, backend: str, timing: Repeats, runtime: str | None = None) -> dict:
    """A fork-join graph on a device timed as the CPU's are: on its streams (``seconds``), as one
    session (``one_session``, what the sequential fit and beta's reference need) and as its pieces
    one after another on one stream (``segments_in_order``)."""
    schedule = assign_streams(g, max_streams=stream_cap(backend))
    out = {"streams": schedule.num_streams}
    for key, sched, one_stream in (("seconds", schedule, False), ("one_session", None, False),
                                   ("segments_in_order", schedule, True)):
        ex = device_executor(g, sched, backend, one_stream=one_stream, runtime=runtime)
        try:
            out[key] = median_seconds(timed_runner(ex, feeds), timing)
        finally:
            ex.close()
    return out


def calibrate(cfg: CalibrationConfig, progress: Callable[[int, int, str], None] | None = None) -> Profile:
    """Measure what the database lacks (within the budget), then fit and return the profile."""
    db = CalibrationDB(cfg.db_path, cfg.device, cfg.runtime)
    started = time.perf_counter()
    try:
        fixed = db.get("fixed-costs")
        if fixed is None:
            # On CUDA the sync cost is part of what beta_a absorbs; it is not measured apart.
            sync = measure_sync_cost() if cfg.backend == "cpu" else 0.0
            fixed = {"call": measure_call_cost(cfg.backend, cfg.cuda_runtime), "sync": sync}
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
    costs = FixedCosts(fixed["call"], fixed["sync"], (launch or {}).get("seconds"),
                       int((layout or {}).get("block", 0)))
    return fit(ops, chain, branches, costs, cfg, pieces)


def _spec(signature: str) -> dict:
    import json

    d = json.loads(signature)
    d.pop("kind")
    return d
