"""What work costs before it is measured, and what building sessions costs as a run learns it:
the priors the time budget's estimates start from (building a session on each backend, the
front end, partitioning, assigning streams) and :class:`BuildRates`, which learns each backend's
rate from the sessions a run builds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gspo.ir.dag import depth
from gspo.ir.features import nbytes

__all__ = ["BUILD_FLOOR", "BuildRates", "FREE_OPS", "PRIOR_RATES", "QUADRATIC", "build_depth", "build_ops",
           "frontend_seconds", "partition_seconds", "streams_seconds", "weight_bytes"]


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
