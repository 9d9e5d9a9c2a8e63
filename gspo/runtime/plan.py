"""Backend-independent execution plan: segments per stream and the events between them.

A *segment* is a run of consecutive ops on one stream between sync points: a segment ends
after an op another stream waits for, and a new one starts before an op that waits. Each
segment becomes one session; each event is recorded after its source segment and waited on
before its destination segment. The CPU and CUDA backends both execute a :class:`Plan`.
"""

from __future__ import annotations

from dataclasses import dataclass

from gspo.ir import Graph
from gspo.ir.subgraph import extract
from gspo.streams import Schedule, check_schedule, node_id, segment_runs

__all__ = ["Segment", "Plan", "make_plan"]


@dataclass(frozen=True)
class Segment:
    index: int
    stream: int
    ops: tuple[int, ...]
    graph: Graph
    waits: tuple[int, ...]
    signals: tuple[int, ...]

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.graph.inputs)

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.graph.outputs)


@dataclass(frozen=True)
class Plan:
    """Segments in a global order that respects every event (a valid single-thread order)."""

    graph: Graph
    segments: tuple[Segment, ...]
    streams: tuple[tuple[int, ...], ...]
    num_events: int

    @property
    def num_streams(self) -> int:
        return len(self.streams)


def make_plan(graph: Graph, schedule: Schedule) -> Plan:
    """Cut each stream into segments at sync points (the schedule is checked first)."""
    check_schedule(graph, schedule)
    index = {node_id(n): i for i, n in enumerate(graph.nodes)}
    runs = segment_runs(schedule)
    seg_of = {op: k for k, (_, ops) in enumerate(runs) for op in ops}
    pairs = sorted({(seg_of[a], seg_of[b]) for a, b in schedule.events})
    waits = {k: [] for k in range(len(runs))}
    signals = {k: [] for k in range(len(runs))}
    for e, (a, b) in enumerate(pairs):
        signals[a].append(e)
        waits[b].append(e)
    order = sorted(range(len(runs)), key=lambda k: min(index[op] for op in runs[k][1]))
    renumber = {old: new for new, old in enumerate(order)}
    segments = []
    for old in order:
        s, ops = runs[old]
        idx = tuple(sorted(index[op] for op in ops))
        sub, _ = extract(graph, idx, name=f"{graph.name}/s{s}.{renumber[old]}")
        segments.append(Segment(renumber[old], s, idx, sub, tuple(waits[old]), tuple(signals[old])))
    streams = tuple(
        tuple(seg.index for seg in segments if seg.stream == s) for s in range(schedule.num_streams)
    )
    return Plan(graph, tuple(segments), streams, len(pairs))
