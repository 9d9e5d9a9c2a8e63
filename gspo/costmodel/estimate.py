"""Estimating a graph's latency from a profile (GSPO Eq. 1-3).

Sequential (Eq. 1-2): ``Cost = call_cost + sum of op costs``; an op's cost is its family's
polynomial fit of log10(seconds) over log features (a family without a fit uses Eq. 2 with its
nearest representative op, by FLOPs), times the family's in-context factor (``family_scale``:
how much of a zoo piece's time an op of that family takes compared with running alone), plus
``reorder_cost`` times the blocked-layout reorders the graph makes beyond those its ops made when
measured alone (:mod:`gspo.costmodel.layout`; each segment of a parallel plan likewise).

Parallel (Eq. 3), made precise: each stream is cut into segments between sync points. With
``beta_i = 1`` (the sequential model measures every op with the whole device to itself), the
critical path ``CP1`` of the segment DAG (segment = sum of its op costs + ``segment_cost``,
event = ``sync_cost``) is what the schedule would take if running together slowed nothing down.
``beta_a`` is the fraction of that speed the streams keep when they share the device,
``beta_a = CP1 / measured`` (CP1 includes the calibrated ``launch_cost``: what a multi-stream run
costs beyond its segment DAG, more than a tiny piece's ops), fitted by polynomial
regression over (#streams, log10 CP1, imbalance = CP1 / sum of segment costs, conv and matmul FLOP
fractions), evaluated within the range of its calibration graphs. The estimate is
``max_i (beta_i / beta_a) cost(i)`` along the critical path, i.e. ``CP1 / beta_a``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gspo.costmodel.features import FAMILIES, OpFeatures, feature_vector, op_features, skip_norm_add
from gspo.costmodel.layout import reorder_delta
from gspo.costmodel.schema import Profile
from gspo.ir import Graph
from gspo.ir.digests import digest
from gspo.streams import Schedule, node_id, segment_runs

__all__ = ["CostModel", "parallel_features", "segment_boundary_bytes"]

#: Calibration ops shorter than this do not set a family's peak rate (their time, less the call
#: cost, is mostly overhead and noise).
PEAK_MIN_SECONDS = 1e-4

_FUSED_AFTER_CONV = frozenset({"BatchNormalization", "Relu", "Clip", "LeakyRelu"})


def _fused_into_producer(graph: Graph, node) -> bool:
    """onnxruntime folds BatchNormalization into, and fuses ReLU/Clip with, the Conv that feeds
    them (when nothing else reads the Conv's output): such ops cost nothing of their own."""
    if node.op_type not in _FUSED_AFTER_CONV or node.is_opaque:
        return False
    prod = graph.producers.get(node.inputs[0])
    if prod is None or prod[0].op_type != "Conv":
        return False
    readers = graph.consumers.get(node.inputs[0], ())
    return len(readers) == 1 and node.inputs[0] not in graph.output_names()


def _fused_into_consumer(graph: Graph, node) -> bool:
    """An Add that onnxruntime fuses into the LayerNormalization reading it (SkipLayerNormalization,
    costed as the ``skipnorm`` family) costs nothing of its own."""
    if node.op_type != "Add" or not node.outputs:
        return False
    readers = graph.consumers.get(node.outputs[0].name, ())
    return len(readers) == 1 and skip_norm_add(graph, readers[0]) is node


def _cost_key(graph: Graph, node) -> bytes:
    """What an op's cost depends on: the node itself (its key has its output shapes, not its input
    shapes) and the shape, dtype and constness of every input. Keying on ``node.key`` alone made
    two MatMuls named alike, with equal output shapes but different reduction lengths, share a
    cost across graphs."""
    values = graph.values
    ins = tuple((v.dtype, v.shape, name in graph.weights) if (v := values.get(name)) is not None else None
                for name in node.inputs)
    return digest(node.key, ins)


def _boundary_bytes(graph: Graph, runs, index) -> list[float]:
    from gspo.ir.features import nbytes

    out = []
    for _, ops in runs:
        nodes = [graph.nodes[index[op]] for op in ops]
        produced = {v.name for n in nodes for v in n.outputs}
        ins = {name for n in nodes for name in n.inputs if name and name not in produced and name not in graph.weights}
        inside = {index[op] for op in ops}
        outside_reads = {name for i, n in enumerate(graph.nodes) if i not in inside for name in n.reads()}
        outs = {name for name in produced if name in outside_reads or name in graph.output_names()}
        out.append(float(sum(nbytes(graph.values.get(v)) for v in ins | outs)))
    return out


def segment_boundary_bytes(graph: Graph, schedule: Schedule) -> list[float]:
    """Bytes entering or leaving each segment of ``schedule`` (activations, not weights)."""
    index = {node_id(n): i for i, n in enumerate(graph.nodes)}
    return _boundary_bytes(graph, segment_runs(schedule), index)


def parallel_features(num_streams: int, cp1: float, total: float, conv_frac: float, mm_frac: float) -> list[float]:
    """The features beta_a is fitted on: streams, log10 CP1, CP1's share of the total, and the
    convolution and MatMul shares of the FLOPs.
    """
    return [float(num_streams), math.log10(max(cp1, 1e-9)), cp1 / max(total, 1e-12), conv_frac, mm_frac]


class CostModel:
    """Estimates seconds for graphs (optionally with a schedule) from a :class:`Profile`."""

    def __init__(self, profile: Profile):
        self.profile = profile
        self._cache: dict[bytes, float] = {}
        self._peaks: dict[str, float] = {}

    def peak_rate(self, family: str) -> float:
        """The highest FLOP rate a calibration op of ``family`` reached (FLOPs per second; 0: none),
        among ops long enough (``PEAK_MIN_SECONDS``) that the call overhead taken off their time
        does not inflate it."""
        rate = self._peaks.get(family)
        if rate is None:
            reps = self.profile.representatives.get(family, ())
            rate = self._peaks[family] = max((fl / s for fl, s in reps if s >= PEAK_MIN_SECONDS), default=0.0)
        return rate

    def feature_cost(self, f: OpFeatures) -> float:
        """Seconds of one op with features ``f``: its family's fit (never faster than the family's
        peak rate), or Eq. 2 from the nearest representative when the family has no fit.
        """
        fit = self.profile.families.get(f.family)
        if fit is not None:
            # Roofline floor: no op runs faster than the fastest measured op of its family (a
            # polynomial extrapolated past the measured sizes promised BERT's largest MatMul
            # 206 GFLOP/s where none measured above 146).
            peak = self.peak_rate(f.family)
            return max(10 ** fit(feature_vector(f)), f.flops / peak if peak else 0.0)
        reps = self.profile.representatives.get(f.family) or [r for v in self.profile.representatives.values() for r in v]
        if not reps:
            return 0.0
        flops, seconds = min(reps, key=lambda r: abs(math.log10(r[0] + 1) - math.log10(f.flops + 1)))
        return seconds * (f.flops + 1) / (flops + 1)  # Eq. 2

    def op_costs(self, graph: Graph) -> list[float]:
        """Seconds of each node of ``graph`` measured alone (0 for ops onnxruntime fuses into a
        neighbour), scaled by its family's in-context factor; cached by node and input shapes.
        """
        out = []
        for n in graph.nodes:
            if _fused_into_producer(graph, n) or _fused_into_consumer(graph, n):
                out.append(0.0)
                continue
            key = _cost_key(graph, n)
            c = self._cache.get(key)
            if c is None:
                f = op_features(graph, n)
                scale = self.profile.family_scale.get(f.family, 1.0)
                c = self._cache[key] = scale * max(self.feature_cost(f), self.profile.op_overhead)
            out.append(c)
        return out

    def aggregate(self, op_sum: float) -> float:
        """The fitted correction from a sum of single-op costs to a graph's run time."""
        a, b = self.profile.seq_scale
        return 10 ** (a * math.log10(max(op_sum, 1e-9)) + b) if op_sum > 0 else 0.0

    def reorders(self, graph: Graph, nodes=None) -> float:
        """Seconds of blocked-layout reorders ``nodes`` (default all) make run as one session,
        beyond those their ops' single-op costs include (usually negative: a chain of
        convolutions reorders once, each measured alone reordered twice)."""
        p = self.profile
        if not p.reorder_cost or not p.layout_block:
            return 0.0
        return p.reorder_cost * reorder_delta(graph, p.layout_block, nodes)

    def sequential(self, graph: Graph) -> float:
        """Eq. 1: one session running every op in turn (with the fitted aggregate correction),
        plus the blocked-layout reorders the graph saves or adds (:meth:`reorders`); never less
        than the call cost."""
        ops = self.aggregate(sum(self.op_costs(graph)))
        return self.profile.call_cost + max(ops + self.reorders(graph), 0.0)

    def parallel(self, graph: Graph, schedule: Schedule) -> float:
        """Eq. 3 over the schedule's segments (see the module docstring)."""
        if schedule.num_streams <= 1:
            return self.sequential(graph)
        return self.critical_path(graph, schedule)[0] / self.beta(self.parallel_features(graph, schedule))

    def parallel_features(self, graph: Graph, schedule: Schedule) -> list[float]:
        """The features of beta_a for ``graph`` run on ``schedule``."""
        cp1, total = self.critical_path(graph, schedule)
        return parallel_features(schedule.num_streams, cp1, total, *self._flop_mix(graph))

    def critical_path(self, graph: Graph, schedule: Schedule) -> tuple[float, float]:
        """``(CP1, total)``: the critical path with beta = 1, and the sum of segment costs."""
        costs = self.op_costs(graph)
        index = {node_id(n): i for i, n in enumerate(graph.nodes)}
        runs = segment_runs(schedule)
        seg_of = {op: k for k, (_, ops) in enumerate(runs) for op in ops}
        boundary = _boundary_bytes(graph, runs, index)
        seg_cost = [
            max(self.aggregate(sum(costs[index[op]] for op in ops)) + self.reorders(graph, [index[op] for op in ops]), 0.0)
            + self.profile.segment_cost + self.profile.segment_byte_cost * boundary[k]
            for k, (_, ops) in enumerate(runs)
        ]
        preds: list[list[tuple[int, float]]] = [[] for _ in runs]
        last_on_stream: dict[int, int] = {}
        order = sorted(range(len(runs)), key=lambda k: min(index[op] for op in runs[k][1]))
        for k in order:
            s = runs[k][0]
            if s in last_on_stream:
                preds[k].append((last_on_stream[s], 0.0))
            last_on_stream[s] = k
        for a, b in schedule.events:
            preds[seg_of[b]].append((seg_of[a], self.profile.sync_cost))
        finish = [0.0] * len(runs)
        for k in order:
            start = max((finish[p] + w for p, w in preds[k]), default=0.0)
            finish[k] = start + seg_cost[k]
        launch = self.profile.launch_cost if schedule.num_streams > 1 else 0.0
        return max(finish) + self.profile.call_cost + launch, sum(seg_cost)

    def beta(self, features: Sequence[float]) -> float:
        """beta_a, the fitted speedup of running in parallel, for ``features`` (1 without a fit;
        clamped to 0.05-2).
        """
        if self.profile.parallel is None:
            return 1.0
        return min(max(self.profile.parallel(features), 0.05), 2.0)

    @staticmethod
    def _flop_mix(graph: Graph) -> tuple[float, float]:
        by_family = dict.fromkeys(FAMILIES, 0.0)
        for n in graph.nodes:
            f = op_features(graph, n)
            by_family[f.family] += f.flops
        total = sum(by_family.values()) or 1.0
        return by_family["conv"] / total, by_family["matmul"] / total

    def cost(self, graph: Graph, schedule: Schedule | None = None) -> float:
        """Estimated seconds of one run of ``graph``: on one stream (Eq. 1) when ``schedule`` is
        ``None`` or has one stream, else on its streams (Eq. 3).
        """
        return self.sequential(graph) if schedule is None or schedule.num_streams <= 1 else self.parallel(graph, schedule)
