"""The ``Schedule`` value: which stream runs each op, in which order, and the sync events."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import networkx as nx

from gspo.errors import GspoError, clipped, first_line
from gspo.ir import Graph, Node
from gspo.ir.dag import dependencies

__all__ = [
    "Schedule",
    "ScheduleError",
    "node_id",
    "check_schedule",
    "check_bounds",
    "MAX_SAVED_STREAMS",
    "apply_schedule",
    "segment_runs",
    "SCHEMA_VERSION",
]

SCHEMA_VERSION = 1
#: The most streams a schedule read from a model's metadata may have: each is a thread on the
#: CPU (a CUDA stream on the GPU). ``gspo optimize`` saves at most one per core by default
#: (``--max-streams`` raises that); 100,000 tampered ones started ~22,000 threads before failing.
MAX_SAVED_STREAMS = 256


class ScheduleError(GspoError):
    """A schedule that does not fit its graph (missing nodes, broken order, deadlock)."""


def node_id(node: Node) -> str:
    """A node's id in a schedule: the name of its first named output (unique in a graph)."""
    for v in node.outputs:
        if v.name:
            return v.name
    raise ScheduleError(f"node {clipped(node.name or node.op_type, quote=True)} has no named output")


@dataclass(frozen=True)
class Schedule:
    """Streams (node ids in execution order) and events ``(after, before)``.

    An event records when op ``after`` has finished on its stream; op ``before``, on another
    stream, waits for it before it starts.
    """

    streams: tuple[tuple[str, ...], ...]
    events: tuple[tuple[str, str], ...] = ()

    @property
    def num_streams(self) -> int:
        """Number of streams."""
        return len(self.streams)

    def stream_of(self) -> dict[str, int]:
        """Op id -> the stream it runs on."""
        return {op: s for s, ops in enumerate(self.streams) for op in ops}

    def to_json(self) -> dict:
        """The schedule as the JSON saved in the model's metadata."""
        return {
            "version": SCHEMA_VERSION,
            "streams": [list(s) for s in self.streams],
            "events": [list(e) for e in self.events],
        }

    @classmethod
    def from_json(cls, data: Mapping | str) -> Schedule:
        """The schedule saved by :meth:`to_json` (a dict or its JSON text); a bad one raises ``ScheduleError``."""
        try:
            if isinstance(data, str):
                data = json.loads(data)
            if data.get("version") != SCHEMA_VERSION:
                raise ScheduleError(f"schedule version {clipped(data.get('version'), quote=True)} is not {SCHEMA_VERSION}")
            streams = tuple(tuple(str(x) for x in s) for s in data["streams"])
            events = tuple((str(a), str(b)) for a, b in data.get("events", ()))
        except ScheduleError:
            raise
        except RecursionError:
            raise ScheduleError("the schedule is not valid JSON of the expected form (nested too deeply)") from None
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise ScheduleError(f"the schedule is not valid JSON of the expected form ({first_line(e, 80)})") from None
        return cls(streams, events)

    @classmethod
    def single(cls, graph: Graph) -> Schedule:
        """Every op on one stream, in graph order."""
        return cls((tuple(node_id(n) for n in graph.nodes),) if graph.nodes else ())


def happens_before(graph: Graph, schedule: Schedule) -> nx.DiGraph:
    """Stream order plus events, as a graph over node ids."""
    hb = nx.DiGraph()
    for ops in schedule.streams:
        hb.add_nodes_from(ops)
        hb.add_edges_from(zip(ops, ops[1:]))
    hb.add_edges_from(schedule.events)
    return hb


def check_bounds(graph: Graph, schedule: Schedule, cap: int = MAX_SAVED_STREAMS) -> None:
    """Raise :class:`ScheduleError` when ``schedule`` is beyond what ``graph`` can use, before
    anything is built from it (cheap: counts only): an empty stream, more streams than ops or
    than ``cap``, or more events than one per op and stream (an op named twice or unknown is
    :func:`check_schedule`'s to say)."""
    ops, n = len(graph.nodes), schedule.num_streams
    empty = sum(1 for s in schedule.streams if not s)
    if empty:
        raise ScheduleError(f"the schedule has {n} streams, {empty} of them empty (each stream runs at least one op)")
    if n > ops:
        raise ScheduleError(f"the schedule has {n} streams for a model of {ops} ops")
    if n > cap:
        raise ScheduleError(f"the schedule has {n} streams; gspo runs at most {cap} (one thread each)")
    if len(schedule.events) > ops * n:
        raise ScheduleError(f"the schedule has {len(schedule.events)} events; {ops} ops on {n} streams need "
                            f"at most {ops * n}")


def _name(op: str) -> str:
    """An op's id as a one-line error shows it: quoted, cut at 80 characters (a tampered
    schedule naming an op of 10,000,000 characters made an error "line" of 10 MB)."""
    return clipped(op, quote=True)


def check_schedule(graph: Graph, schedule: Schedule) -> None:
    """Raise :class:`ScheduleError` unless ``schedule`` runs ``graph`` correctly.

    Correct: every op on exactly one stream, events between known ops of different streams, no
    deadlock (stream order plus events is acyclic), and every data dependency ordered by a
    stream or implied by events.
    """
    ids = [node_id(n) for n in graph.nodes]
    known = set(ids)
    where = {}
    for s, ops in enumerate(schedule.streams):
        for op in ops:
            if op not in known:
                raise ScheduleError(f"the schedule names {_name(op)}, which is not an op of the model")
            if op in where:
                raise ScheduleError(f"{_name(op)} is scheduled twice")
            where[op] = s
    missing = [op for op in ids if op not in where]
    if missing:
        raise ScheduleError(f"{len(missing)} ops are not scheduled (first: {_name(missing[0])})")
    for a, b in schedule.events:
        if a not in known or b not in known:
            raise ScheduleError(f"an event names an unknown op ({_name(a)} -> {_name(b)})")
        if where[a] == where[b]:
            raise ScheduleError(f"event {_name(a)} -> {_name(b)} is within one stream")
    hb = happens_before(graph, schedule)
    if not nx.is_directed_acyclic_graph(hb):
        raise ScheduleError("the schedule deadlocks: stream order and events form a cycle")
    deps = dependencies(graph)
    order = list(nx.topological_sort(hb))
    rank = {op: i for i, op in enumerate(order)}
    reach = {op: 1 << rank[op] for op in order}
    for op in reversed(order):
        for nxt in hb.successors(op):
            reach[op] |= reach[nxt]
    for i, ds in enumerate(deps):
        for d in ds:
            if not (reach[ids[d]] >> rank[ids[i]]) & 1:
                raise ScheduleError(f"{_name(ids[i])} may run before {_name(ids[d])}, which it reads")


def segment_runs(schedule: Schedule) -> list[tuple[int, tuple[str, ...]]]:
    """Each stream cut into runs of ops between sync points: a run ends after an op another
    stream waits for and a new one starts before an op that waits. ``(stream, op ids)`` each."""
    srcs = {a for a, _ in schedule.events}
    dsts = {b for _, b in schedule.events}
    runs: list[tuple[int, tuple[str, ...]]] = []
    for s, ops in enumerate(schedule.streams):
        current: list[str] = []
        for op in ops:
            if current and op in dsts:
                runs.append((s, tuple(current)))
                current = []
            current.append(op)
            if op in srcs:
                runs.append((s, tuple(current)))
                current = []
        if current:
            runs.append((s, tuple(current)))
    return runs


def apply_schedule(graph: Graph, schedule: Schedule) -> Graph:
    """``graph`` with each node's ``stream`` set from ``schedule``."""
    where = schedule.stream_of()
    return graph.with_nodes(tuple(n.replace(stream=where[node_id(n)]) for n in graph.nodes))
