"""The time budget of one ``optimize`` run (``--time-budget``): a deadline counted from the start
(loading and the front end included), the shares of it each stage may use, what building a
session is expected to cost, and the record of the work skipped to hold it.

Every stage asks its budget before it starts a piece of work it cannot interrupt (a search
step, building or compiling a session, a timing) and skips the work that would run past its
deadline, saying so with :meth:`Budget.skip`. A budget without a limit (``seconds=None``)
allows everything and records nothing, so a run without one does exactly what it did before.

Example:
    >>> clock = iter([0.0, 1.0, 1.0, 7.0]).__next__
    >>> b = Budget(10.0, clock=clock)   # started at 0
    >>> round(b.remaining(), 1)         # at 1.0
    9.0
    >>> search = b.share(0.5)           # at 1.0: half of what is left
    >>> search.deadline
    5.5
    >>> search.expired()                # at 7.0
    True
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gspo.ir.dag import depth
from gspo.ir.features import nbytes

__all__ = ["Budget", "BuildRates", "FREE_OPS", "Shares", "build_depth", "build_ops", "frontend_seconds", "partition_seconds",
           "streams_seconds", "weight_bytes"]


@dataclass(frozen=True)
class Shares:
    """How a budget is divided among the stages of ``optimize``.

    ``search``: the fraction of what loading, checking and partitioning left that the search
    gets (spread over the pieces and jobs). ``final``: the fraction of the whole budget kept
    for the whole-model comparison and its confirmation. Piece verification and backend
    placement share the rest, ``placement`` of it kept for timing the pieces on the backends
    other than onnxruntime's CPU provider (when there are any). The search and final shares
    were measured on NASNet-A Large (24 pieces), where verification and the final comparison
    of a 500 ms model take longer than the search (benchmarks/RESULTS.md).
    """

    search: float = 0.5
    final: float = 0.2
    placement: float = 0.4


#: Seconds per op that building a session takes, on each backend, until one is measured in the
#: run: onnxruntime about 0.2 ms per op on small graphs; OpenVINO's slowest whole model measured
#: here (BERT-base, 25 ms per op) with a margin.
PRIOR_RATES = {"ort": 2e-4, "openvino": 3e-2, "cuda": 3e-2}
#: Seconds per byte of weights that compiling a whole model on a backend other than onnxruntime
#: takes before one is measured in the run: OpenVINO compiled BERT-base (406 ops, 440 MB) and
#: NASNet-A Large (1,242 ops, 350 MB) in about 10 s each, so its time follows the weights, not the
#: ops (25 ms per op on BERT-base, 8 ms on NASNet-A Large).
PRIOR_BYTE_RATES = {"openvino": 2.5e-8, "cuda": 2.5e-8}
#: ... or from onnxruntime's build of the same model, when that says more: OpenVINO compiled
#: whole models in 1.5-5x onnxruntime's time through gspo's runners (NASNet-A Large export 3.6 s
#: against 2.3 s, BERT 0.18 s against 0.07 s, DenseNet-121 0.45 s against 0.09 s); the weights'
#: prior was the larger on each.
ORT_FACTOR = 2.0
#: Seconds per op squared: building grows faster than the ops on graphs of thousands of small
#: ops (measured on 2 loaded cores: onnxruntime 118 s for a chain of 20,000 Adds; OpenVINO
#: 119 s for 5,000 parallel Relus, 122 s for a chain of 2,000 Adds), not on the zoo's models
#: (OpenVINO compiled BERT-base, 406 ops, in 10 s, NASNet-A Large, 1,242 ops, in 10 s).
QUADRATIC = {"ort": 3e-7, "openvino": 5e-6, "cuda": 5e-6}
#: With the graph's depth known (its longest path of :func:`build_ops` ops), the floor is
#: ``WIDE * ops**2 + DEEP * ops * depth``: OpenVINO's compile grows with both, far more with the
#: depth (measured alone on this EPYC's 2 cores, serialized bytes to compiled: 5,000 parallel
#: Relus, depth 2, 13.3 s; a chain of 2,000 Adds, depth 2,000, 15.2 s; the exported NASNet-A
#: Large, 1,907 ops, depth 357, 3.4 s, which the plain square put at 18 s); the coefficients are
#: about twice those fits. onnxruntime keeps its square.
WIDE = {"ort": 3e-7, "openvino": 1e-6, "cuda": 1e-6}
DEEP = {"ort": 0.0, "openvino": 7e-6, "cuda": 7e-6}
#: Seconds any session build takes at least (loading the backend's plugin, a tiny graph).
BUILD_FLOOR = 0.005
#: The front end reads the model again and folds it: at most twice the seconds reading it took
#: plus this many seconds per op (measured on loaded cores: BERT-base 10.8 s after a 6.1 s read,
#: NASNet-A Large 10.4 s after 4.9 s, 5,000 parallel Relus 3.0 s after 0.5 s).
FRONTEND_RATE = 1e-3


def frontend_seconds(read_s: float, ops: int) -> float:
    """Seconds that the front end is expected to take on a model of ``ops`` ops read in ``read_s``."""
    return 2 * read_s + FRONTEND_RATE * ops


#: Seconds per op and level of halving that partitioning takes (0.4-0.6 ms measured on loaded
#: cores for BERT-base, NASNet-A Large, 1,000 branches and a chain of 2,000 Adds), with a margin.
PARTITION_RATE = 1e-3


#: Seconds per op squared that assigning streams to a whole model may take (its chains merged
#: down to the stream cap: 30 s for 5,000 parallel Relus on loaded cores; a chain takes far less).
STREAMS_RATE = 1.2e-6


def streams_seconds(ops: int) -> float:
    """Seconds that assigning streams to a graph of ``ops`` ops may take (an upper estimate)."""
    return STREAMS_RATE * ops * ops


def partition_seconds(ops: int, threshold: int) -> float:
    """Seconds that cutting ``ops`` ops into pieces of at most ``threshold`` is expected to take."""
    return PARTITION_RATE * ops * max(1.0, math.log2(max(1, ops) / max(1, threshold)))


@dataclass
class BuildRates:
    """What building a session costs in this run, learned as it goes: per backend, the seconds
    per op of the largest session built so far.

    An estimate is the larger of that rate (on a backend other than onnxruntime, at least
    onnxruntime's: a whole model compiled 0.9-1.5x onnxruntime's time on the zoo) times the ops,
    and :data:`QUADRATIC` times the ops squared.
    """

    largest: dict[str, tuple[int, float]] = field(default_factory=dict)

    def rate(self, backend: str) -> float:
        """Seconds per op of the largest session built on ``backend`` (the prior before one)."""
        own = self.largest.get(backend, (0, PRIOR_RATES.get(backend, PRIOR_RATES["openvino"])))[1]
        return own if backend == "ort" else max(own, self.rate("ort"))

    def estimate(self, backend: str, ops: int, weight_bytes: int | None = None, depth: int | None = None) -> float:
        """Seconds that building a session of ``ops`` ops on ``backend`` is expected to take. A
        whole model (``weight_bytes`` given) on a backend other than onnxruntime, before any
        session was built on that backend in this run, is estimated from its weights
        (:data:`PRIOR_BYTE_RATES`) or :data:`ORT_FACTOR` times onnxruntime's rate per op,
        whichever is larger; once one was, from the rate
        per op it took (which overstates a large model's compile when learned on small pieces:
        NASNet-A Large's put its whole model at 17-22 s, but a backend slow per op is caught).
        The floor for graphs of many ops is :data:`QUADRATIC` times the ops squared, or with
        ``depth`` given, :data:`WIDE` and :data:`DEEP`."""
        if depth is None:
            quadratic = QUADRATIC.get(backend, QUADRATIC["openvino"]) * ops * ops
        else:
            quadratic = ops * (WIDE.get(backend, WIDE["openvino"]) * ops + DEEP.get(backend, DEEP["openvino"]) * depth)
        linear = self.rate(backend) * ops
        if weight_bytes is not None and backend != "ort" and backend not in self.largest:
            linear = max(PRIOR_BYTE_RATES.get(backend, PRIOR_BYTE_RATES["openvino"]) * weight_bytes,
                         ORT_FACTOR * self.rate("ort") * ops)
        return BUILD_FLOOR + max(linear, quadratic)

    def record(self, backend: str, ops: int, seconds: float) -> None:
        """A session of ``ops`` ops was built on ``backend`` in ``seconds``."""
        if ops >= self.largest.get(backend, (0, 0.0))[0]:
            self.largest[backend] = (ops, max(0.0, seconds - BUILD_FLOOR) / max(1, ops))


#: At most this much of what is left after loading goes to the final comparison: the whole model
#: on another backend is where most real models gained (OpenVINO ran 25 of 33 faster than
#: onnxruntime), the pieces' search on a few; on NASNet-A Large (1,242 ops, 0.28 s a run) at
#: --time-budget 60, half of what was left could not hold compiling it for OpenVINO and timing it.
MAX_FINAL = 2 / 3


class Budget:
    """Seconds for one run from its start, and the budgets of its stages (see the module docstring).

    Args:
        seconds: the whole budget (``None``: no limit).
        shares: how it is divided among the stages.
        clock: seconds, monotonic (:func:`time.perf_counter`; tests pass a fake one).
    """

    def __init__(self, seconds: float | None, shares: Shares = Shares(),
                 clock: Callable[[], float] = time.perf_counter):
        self.seconds = seconds
        self.shares = shares
        self.clock = clock
        self.started = clock()
        self.deadline: float | None = None if seconds is None else self.started + seconds
        #: The work skipped to hold the deadline: ``{"stage", "what", "why"}`` each, in order
        #: (shared with every child budget).
        self.skipped: list[dict[str, str]] = []
        self.rates = BuildRates()
        #: Seconds kept for the final comparison: its share of the whole budget, or more once
        #: :meth:`reserve_final` asked for more.
        self.final_s = 0.0 if seconds is None else shares.final * seconds

    @property
    def limited(self) -> bool:
        """Whether there is a deadline at all."""
        return self.deadline is not None

    def remaining(self) -> float:
        """Seconds left before the deadline (never negative; infinite without a limit)."""
        if self.deadline is None:
            return math.inf
        return max(0.0, self.deadline - self.clock())

    def expired(self) -> bool:
        """Whether the deadline has passed."""
        return self.deadline is not None and self.clock() >= self.deadline

    def fits(self, seconds: float) -> bool:
        """Whether work expected to take ``seconds`` ends before the deadline."""
        return self.deadline is None or self.clock() + seconds <= self.deadline

    def _child(self, deadline: float | None) -> Budget:
        child = object.__new__(Budget)
        child.seconds, child.shares, child.clock, child.started = self.seconds, self.shares, self.clock, self.started
        child.deadline = deadline if self.deadline is None or deadline is None else min(deadline, self.deadline)
        child.skipped, child.rates, child.final_s = self.skipped, self.rates, self.final_s
        return child

    def share(self, fraction: float) -> Budget:
        """A child budget of ``fraction`` of the seconds left now (no limit without one)."""
        if self.deadline is None:
            return self._child(None)
        now = self.clock()
        return self._child(now + fraction * max(0.0, self.deadline - now))

    def reserve_final(self, seconds: float) -> None:
        """Keep ``seconds`` for the final comparison when that is more than its share of the
        whole budget, but never more than :data:`MAX_FINAL` of what is left now; what is kept
        beyond the share is taken from the stages before it (:meth:`search_share`,
        :meth:`until_final`)."""
        if self.deadline is not None:
            self.final_s = max(self.shares.final * self.seconds, min(seconds, MAX_FINAL * self.remaining()))

    def _extra_final(self) -> float:
        """Seconds kept for the final comparison beyond its share."""
        return max(0.0, self.final_s - self.shares.final * self.seconds)

    def until_final(self) -> Budget:
        """A child budget that ends when the final comparison's time (:attr:`Shares.final` of
        the whole budget, or what :meth:`reserve_final` kept) must begin."""
        if self.deadline is None:
            return self._child(None)
        return self._child(self.deadline - self.final_s)

    def search_share(self) -> Budget:
        """The search's child budget: :attr:`Shares.search` of what is left now, less what
        :meth:`reserve_final` kept beyond the final comparison's share."""
        if self.deadline is None:
            return self._child(None)
        now = self.clock()
        return self._child(now + self.shares.search * max(0.0, self.deadline - now - self._extra_final()))

    def search_seconds(self, pieces: int, jobs: int) -> float | None:
        """Seconds of search per piece: the search's share (:meth:`search_share`), spread over
        the pieces and the processes searching them (``None``: no limit)."""
        if self.deadline is None:
            return None
        left = max(0.0, self.remaining() - self._extra_final())
        return self.shares.search * left * max(1, jobs) / max(1, pieces)

    def timing_seconds(self, cap: float, fraction: float = 1.0) -> float:
        """Seconds one timing may take: ``cap``, or ``fraction`` of what is left when less."""
        return min(cap, fraction * self.remaining())

    def skip(self, stage: str, what: str, why: str) -> None:
        """Record work skipped to hold the deadline (for the report)."""
        self.skipped.append({"stage": stage, "what": what, "why": why})


#: Ops a backend folds away as it reads a model: they cost no build time of their own.
FREE_OPS = frozenset({"Constant", "Identity"})


def build_ops(graph) -> int:
    """The ops of ``graph`` that building a session compiles (not :data:`FREE_OPS`): the
    exported NASNet-A Large has 2,881 ops, 974 of them Constant or Identity."""
    return sum(1 for n in graph.nodes if n.op_type not in FREE_OPS)


def build_depth(graph) -> int:
    """The longest dependency path of ``graph`` in :func:`build_ops` ops."""
    return depth(graph, lambda n: n.op_type not in FREE_OPS)


def weight_bytes(graph) -> int:
    """Bytes of a graph's weights (a weight of an unknown element type counted as empty)."""
    values = graph.values
    return sum(nbytes(values[name]) for name in graph.weights)
