"""Backend placement (Collage): each piece of the model on the backend that runs it fastest.

The pieces the search optimized are each timed on every backend, on the values that really
reach them, and checked against onnxruntime's outputs there; a piece a backend cannot compile,
or computes differently, is not placed on it (with the reason). Timings are cached in the
calibration database, keyed by device, backend versions and the piece's structural key, so a
second run of the same model measures nothing again.

A mixed placement is proposed only when the per-piece bests, plus the cost of every crossing
between backends (measured here: a fixed cost per crossing and the copy of the values that
cross), beat the best single backend for the whole model by more than :data:`MIXED_MARGIN`;
the whole model on each backend is always a candidate of its own, so the result is never
slower than the best single backend as measured.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gspo.cache import calibration_db_path
from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.runtime import SessionConfig, interleaved, make_session, run
from gspo.runtime import backends as runtime_backends
from gspo.runtime.backends import DEFAULT_BACKEND
from gspo.runtime.spill import Spill
from gspo.runtime.verify import Tolerance, output_steps
from gspo.search.budget import Timebox
from gspo.search.candidate import compare
from gspo.search.report_parts import MixedEstimate
from gspo.search.strategies import Measure
from gspo.streams import Placement, node_id

__all__ = ["PieceTimes", "MIXED_MARGIN", "default_db_path", "time_pieces", "mixed_placement", "crossing_cost"]

#: How much faster than the best single backend a mixed placement must be estimated to be tried.
MIXED_MARGIN = 0.03
#: The sessions the pieces are timed in (onnxruntime's defaults).
_CONFIG = SessionConfig()


def default_db_path() -> Path:
    """The calibration database in the user's cache (``$XDG_CACHE_HOME/gspo/calibration.sqlite``)."""
    return calibration_db_path()


@dataclass
class PieceTimes:
    """One piece's median seconds per backend, and why a backend was not usable for it."""

    seconds: dict[str, float] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    cached: bool = False

    def best(self) -> str:
        """The fastest backend for the piece (onnxruntime on a tie or with no timing)."""
        if not self.seconds:
            return DEFAULT_BACKEND
        return min(self.seconds, key=lambda b: (self.seconds[b], b != DEFAULT_BACKEND))


def _signature(graph: Graph, backend: str, threads: int) -> str:
    return f"placement:{backend}:t{threads}:{graph.key.hex()}"


def _measure(graph: Graph, feeds: Sequence[Mapping[str, np.ndarray]], backends: Sequence[str], tolerance: Tolerance,
             runs: int, timebox: Timebox, measure: Measure) -> PieceTimes:
    """Time ``graph`` on every backend with ``measure`` (checked against onnxruntime's outputs
    first); the budget's build rates learn what building each session took (on its clock)."""
    out = PieceTimes()
    config, rates, clock = _CONFIG, timebox.rates, timebox.clock
    with Spill() as spill:  # large reference outputs wait in a file, not beside the other backends'
        try:
            began = clock()
            data = make_session(graph, config)  # the reference
            rates.record(DEFAULT_BACKEND, len(graph.nodes), clock() - began)
            expected = spill.outputs([run(data, f) for f in feeds])
        except GspoError as e:  # a piece onnxruntime cannot run alone stays where the whole model runs
            out.refused.update((b, f"onnxruntime cannot run the piece alone: {e}") for b in backends)
            return out
        runners = _checked(graph, data, feeds, expected, backends, tolerance, timebox, out)
        del expected  # not held while timed (the reference's next outputs would take as much again)
    feed = dict(feeds[0])
    timings = measure([(b, (lambda r=r, n=n: r.run(n, feed))) for b, r, n in runners], runs, 2)
    out.seconds = {t.label: t.median for t in timings}
    return out


def _checked(graph: Graph, data, feeds, expected: list[dict], backends: Sequence[str], tolerance: Tolerance,
             timebox: Timebox, out: PieceTimes) -> list[tuple]:
    """The runner of each backend that computes ``expected`` (``data``: onnxruntime's, the
    reference), ``(backend, runner, output names)``; those refused are in ``out.refused``."""
    runners = []
    for b in backends:
        try:
            began = timebox.clock()
            runner = data if b == DEFAULT_BACKEND else runtime_backends.load_runner(b, _bytes(graph), _CONFIG)
            if b != DEFAULT_BACKEND:
                timebox.rates.record(b, len(graph.nodes), timebox.clock() - began)
            names = list(expected[0])
            if runner is not data:  # not the reference against itself (a second output of it in memory)
                _check(runner, names, feeds, expected, tolerance, output_steps(graph))
        except GspoError as e:
            out.refused[b] = str(e)
            continue
        runners.append((b, runner, names))
    return runners


def _check(runner, names: list[str], feeds, expected: list[dict], tolerance: Tolerance, steps: dict) -> None:
    """Raise :class:`GspoError` when ``runner``'s outputs differ from the reference's ``expected``."""
    for f, want in zip(feeds, expected):
        res = compare(want, dict(zip(names, runner.run(names, dict(f)))), tolerance, steps)
        if not res.equivalent:
            raise GspoError(f"output {res.worst.name} differs ({res.worst.reason})")


def _bytes(graph: Graph) -> bytes:
    from gspo.ir import serialize

    return serialize(graph)


def time_pieces(pieces: Sequence[Graph], feeds: Sequence[Sequence[Mapping[str, np.ndarray]]], backends: Sequence[str],
                db=None, tolerance: Tolerance = Tolerance(), runs: int = 10, timebox: Timebox | None = None,
                measure: Measure = interleaved) -> list[PieceTimes]:
    """Each piece's time on each backend (by ``measure``, :func:`gspo.runtime.interleaved`): from
    ``db`` when measured before, else measured (and stored). A piece whose measuring ``timebox``
    cannot hold (the sessions it builds, and as long as the pieces measured before took per op)
    is left to onnxruntime, and the budget says so."""
    timebox = timebox if timebox is not None else Timebox.of(None)
    config = _CONFIG
    results, left, spent, measured_ops = [], 0, 0.0, 0
    for graph, piece_feeds in zip(pieces, feeds):
        known = {b: db.get(_signature(graph, b, config.intra_op_threads)) for b in backends} if db else {}
        if known and all(v is not None for v in known.values()):
            results.append(_cached(known))
            continue
        ops = len(graph.nodes)
        need = sum(timebox.rates.estimate(b, ops) for b in backends) + spent / max(1, measured_ops) * ops
        if not timebox.fits(need):
            results.append(PieceTimes())
            left += 1
            continue
        began = timebox.clock()
        t = _measure(graph, piece_feeds, backends, tolerance, runs, timebox, measure)
        spent, measured_ops = spent + timebox.clock() - began, measured_ops + ops
        if db is not None:
            for b in backends:
                data = {"refused": t.refused[b]} if b in t.refused else {"seconds": t.seconds.get(b)}
                db.put(_signature(graph, b, config.intra_op_threads), "placement", data)
        results.append(t)
    if left:
        timebox.skip("placement", f"timing {left} of {len(results)} pieces on {', '.join(backends)}",
                     "the time budget could not hold it (those pieces stay on onnxruntime)")
    return results


def _cached(known: Mapping[str, dict]) -> PieceTimes:
    """A piece's times as the calibration database holds them."""
    t = PieceTimes(cached=True)
    for b, v in known.items():
        if v.get("refused"):
            t.refused[b] = v["refused"]
        else:
            t.seconds[b] = v["seconds"]
    return t


def crossing_cost(nbytes: int, fixed: float, bandwidth: float) -> float:
    """Seconds to cross between backends with ``nbytes`` of values: a fixed cost plus a copy."""
    return fixed + nbytes / bandwidth


def _crossings(pieces: Sequence[Graph], choice: Sequence[str]) -> list[int]:
    """Bytes of the values each piece receives from a piece on another backend."""
    made_by: dict[str, int] = {}
    out = []
    for k, g in enumerate(pieces):
        crossing = 0
        for v in g.inputs:
            src = made_by.get(v.name)
            if src is not None and choice[src] != choice[k] and v.is_static:
                crossing += int(np.prod(v.shape, dtype=np.int64)) * 4
        out.append(crossing)
        for n in g.nodes:
            for v in n.outputs:
                made_by[v.name] = k
    return out


def mixed_placement(pieces: Sequence[Graph], times: Sequence[PieceTimes], fixed: float, bandwidth: float,
                    backends: Sequence[str]) -> tuple[Placement | None, MixedEstimate]:
    """The per-piece best placement, when its estimate (crossings included) beats every single
    backend by :data:`MIXED_MARGIN`; else ``None``. Also the estimates, for the report."""
    choice = [t.best() for t in times]
    whole = {b: sum(t.seconds.get(b, float("inf")) for t in times) for b in backends}
    crossings = _crossings(pieces, choice)
    crossing_s = sum(crossing_cost(nb, fixed, bandwidth) for nb in crossings if nb)
    mixed = sum(t.seconds.get(c, 0.0) for t, c in zip(times, choice)) + crossing_s
    estimate = MixedEstimate(mixed, whole, sum(1 for nb in crossings if nb), crossing_s,
                             {b: choice.count(b) for b in backends})
    if len(set(choice)) < 2 or mixed >= min(whole.values()) * (1 - MIXED_MARGIN):
        return None, estimate
    where = {node_id(n): c for g, c in zip(pieces, choice) for n in g.nodes}
    return Placement.of(where), estimate


def measure_crossing(backends: Sequence[str], db=None, config: SessionConfig = SessionConfig()) -> tuple[float, float]:
    """The fixed seconds of a crossing between backends (the largest over the backends other
    than onnxruntime's CPU provider, each measured once and cached, see :func:`_crossing`), and
    the copy bandwidth in bytes/s (a host copy: a CUDA piece's own timing includes its copies to
    and from the device)."""
    measured = [_crossing(b, db, config) for b in backends if b != DEFAULT_BACKEND]
    if not measured:
        return 0.0, float("inf")
    return max(f for f, _ in measured), min(bw for _, bw in measured)


def _crossing(other: str, db, config: SessionConfig) -> tuple[float, float]:
    """A two-piece model whose second piece runs on ``other``, against both on onnxruntime: the
    difference is the fixed cost of a crossing; and the bandwidth of a host copy."""
    signature = f"placement-crossing:{other}:t{config.intra_op_threads}"
    cached = db.get(signature) if db else None
    if cached:
        return cached["fixed_s"], cached["bandwidth"]
    from gspo.ir.builder import GraphBuilder
    from gspo.runtime import CpuExecutor

    b = GraphBuilder()
    y = b.op("Sigmoid", [b.op("Relu", [b.input("x", (1, 64))], out="mid")], out="y")
    g = b.output(y).build()
    feeds = {"x": np.ones((1, 64), np.float32)}
    split = Placement.of({node_id(g.nodes[1]): other})
    with CpuExecutor(g, None, config) as one, CpuExecutor(g, None, config, split) as two:
        t = interleaved([("one", lambda: one.run(feeds)), ("two", lambda: two.run(feeds))], 30, 5)
    fixed = max(0.0, t[1].median - t[0].median)
    a = np.ones(1 << 20, np.float32)
    start = time.perf_counter()
    for _ in range(10):
        a.copy()
    bandwidth = 10 * a.nbytes / max(time.perf_counter() - start, 1e-9)
    if db is not None:
        db.put(signature, "placement", {"fixed_s": fixed, "bandwidth": bandwidth})
    return fixed, bandwidth
