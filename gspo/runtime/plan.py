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
from gspo.streams import Placement, Schedule, check_schedule, node_id, segment_runs, split_runs
from gspo.streams.placement import kept_f32

__all__ = ["Segment", "Plan", "make_plan"]


@dataclass(frozen=True)
class Segment:
    """A run of ops on one stream and one backend, between sync points, as a standalone graph."""

    index: int
    stream: int
    ops: tuple[int, ...]
    graph: Graph
    waits: tuple[int, ...]
    signals: tuple[int, ...]
    backend: str = "ort"
    #: The values whose ops compute at f32 in a segment on ``openvino:bf16`` (ops placed on
    #: OpenVINO at f32 among bf16 ones: :func:`~gspo.streams.placement.split_runs`).
    keep_f32: tuple[str, ...] = ()

    @property
    def inputs(self) -> tuple[str, ...]:
        """The values the segment reads from outside it."""
        return tuple(v.name for v in self.graph.inputs)

    @property
    def outputs(self) -> tuple[str, ...]:
        """The values the segment produces that are read outside it."""
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
        """Number of streams the segments run on."""
        return len(self.streams)


#: Ops that compute shape arithmetic on constants: a segment computes them again for itself
#: rather than receiving their values from another stream (onnxruntime must see a Resize's
#: sizes or a Slice's bounds as constants to load the segment).
_CONSTANT_OPS = frozenset({"Constant", "ConstantOfShape", "Cast", "Concat", "Unsqueeze", "Squeeze", "Reshape",
                           "Gather", "Slice", "Add", "Sub", "Mul", "Div", "Range", "Equal", "Where", "Expand"})


def constant_nodes(graph: Graph) -> set[int]:
    """Indices of the nodes that compute small constants (shape arithmetic on weights)."""
    const: set[int] = set()
    values: set[str] = set(graph.weights)
    for i, n in enumerate(graph.nodes):
        if n.is_opaque or n.op_type not in _CONSTANT_OPS or not all(r in values for r in n.reads()):
            continue
        const.add(i)
        values.update(v.name for v in n.outputs if v.name)
    return const


def _constants_read(graph: Graph, ops: tuple[int, ...], const: set[int]) -> set[int]:
    """The constant nodes outside ``ops`` (and their constant ancestors) whose values ``ops`` read."""
    producer = {v.name: i for i, n in enumerate(graph.nodes) for v in n.outputs if v.name}
    todo = [r for i in ops for r in graph.nodes[i].reads()]
    found: set[int] = set()
    while todo:
        i = producer.get(todo.pop())
        if i is not None and i in const and i not in ops and i not in found:
            found.add(i)
            todo.extend(graph.nodes[i].reads())
    return found


def _run_events(schedule: Schedule, runs, empty: set[int]) -> set[tuple[int, int]]:
    """The schedule's events between runs (by index in ``runs``), none touching a run in
    ``empty`` (one left with only constant nodes, which no segment runs).

    An event into or out of an empty run still orders what comes before and after it: each one
    is contracted, its waits moved to the next run of its stream that is kept, its signals to
    the previous one, and every run it waited for joined to every run that waited for it. (An
    op's event from a constant node also vouches for the ops before that node on its stream.)
    """
    run_of = {op: k for k, (_, ops, _) in enumerate(runs) for op in ops}
    pairs = {(run_of[a], run_of[b]) for a, b in schedule.events if run_of[a] != run_of[b]}
    by_stream: dict[int, list[int]] = {}
    for k, (stream, _, _) in enumerate(runs):
        by_stream.setdefault(stream, []).append(k)
    for k in sorted(empty):
        line = by_stream[runs[k][0]]
        at = line.index(k)
        before = next((j for j in reversed(line[:at]) if j not in empty), None)
        after = next((j for j in line[at + 1:] if j not in empty), None)
        ins = {a for a, b in pairs if b == k}
        outs = {b for a, b in pairs if a == k}
        pairs -= {(a, k) for a in ins} | {(k, b) for b in outs}
        pairs |= {(a, after) for a in ins if after is not None}
        pairs |= {(before, b) for b in outs if before is not None}
        pairs |= {(a, b) for a in ins for b in outs}
        pairs = {(a, b) for a, b in pairs if a != b and runs[a][0] != runs[b][0]}
    return pairs


def make_plan(graph: Graph, schedule: Schedule, placement: Placement | None = None) -> Plan:
    """Cut each stream into segments at sync points and where the backend changes (the
    schedule and the placement are checked first).

    Nodes that compute constants (:func:`constant_nodes`) belong to no segment: each segment
    computes the constants it reads itself. Their events stay with the segment they were cut
    into, or are contracted where that segment is left empty (:func:`_run_events`).
    """
    check_schedule(graph, schedule)
    if placement is not None:
        placement.check(graph)
    index = {node_id(n): i for i, n in enumerate(graph.nodes)}
    outputs = set(graph.output_names())
    const = {i for i in constant_nodes(graph) if not any(v.name in outputs for v in graph.nodes[i].outputs)}
    cut = split_runs(segment_runs(schedule), placement)
    kept = [(s, [op for op in ops if index[op] not in const], b) for s, ops, b in cut]
    pairs = _run_events(schedule, cut, {k for k, (_, ops, _) in enumerate(kept) if not ops})
    renumber_kept = {k: n for n, k in enumerate(k for k, (_, ops, _) in enumerate(kept) if ops)}
    runs = [r for r in kept if r[1]]
    pairs = sorted({(renumber_kept[a], renumber_kept[b]) for a, b in pairs})
    waits = {k: [] for k in range(len(runs))}
    signals = {k: [] for k in range(len(runs))}
    for e, (a, b) in enumerate(pairs):
        signals[a].append(e)
        waits[b].append(e)
    order = sorted(range(len(runs)), key=lambda k: min(index[op] for op in runs[k][1]))
    renumber = {old: new for new, old in enumerate(order)}
    segments = []
    for old in order:
        s, ops, backend = runs[old]
        idx = tuple(sorted(index[op] for op in ops))
        sub, _ = extract(graph, idx, name=f"{graph.name}/s{s}.{renumber[old]}",
                         copies=_constants_read(graph, idx, const))
        f32 = {index[op] for op in kept_f32(ops, backend, placement)}
        keep = tuple(v.name for i in sorted(f32) for v in graph.nodes[i].outputs if v.name)
        segments.append(Segment(renumber[old], s, idx, sub, tuple(waits[old]), tuple(signals[old]), backend, keep))
    streams = tuple(
        tuple(seg.index for seg in segments if seg.stream == s) for s in range(schedule.num_streams)
    )
    return Plan(graph, tuple(segments), streams, len(pairs))
