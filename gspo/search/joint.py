"""The whole model on the streams the pieces chose: the joint search's schedule, merged.

Each piece's search picks its rewrites and its stream assignment together (the paper's joint
optimization); merging the pieces keeps their graphs, and :func:`joint_schedule` keeps their
streams too: an op of piece ``k`` on that piece's stream ``s`` runs on the whole model's stream
``s`` (pieces run one after another, so their streams can be reused), the ops of a piece chosen
on one stream on stream 0, and the sync events are recomputed for the whole model.
"""

from __future__ import annotations

from collections.abc import Sequence

from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.ir.dag import dependencies
from gspo.search.candidate import Candidate, estimate_or
from gspo.streams import Schedule, check_schedule
from gspo.streams.assign import make_events
from gspo.streams.schedule import node_id

__all__ = ["joint_option", "joint_schedule"]


def joint_schedule(merged: Graph, schedules: Sequence[Schedule | None]) -> Schedule | None:
    """``merged``'s schedule from the pieces' ``schedules`` (``None``: the piece on one stream);
    ``None`` when it is one stream or does not fit ``merged`` (an op renamed by the merge)."""
    stream_of: dict[str, int] = {}
    for s in schedules:
        if s is not None:
            stream_of.update(s.stream_of())
    ids = [node_id(n) for n in merged.nodes]
    count = 1 + max((stream_of.get(i, 0) for i in ids), default=0)
    if count < 2:
        return None
    streams: list[list[int]] = [[] for _ in range(count)]
    for v, i in enumerate(ids):  # nodes are in topological order
        streams[stream_of.get(i, 0)].append(v)
    streams = [s for s in streams if s]
    events = make_events(dependencies(merged), streams)
    schedule = Schedule(tuple(tuple(ids[v] for v in s) for s in streams), tuple((ids[a], ids[b]) for a, b in events))
    try:
        check_schedule(merged, schedule)
    except GspoError:
        return None
    return schedule if schedule.num_streams > 1 else None


def joint_option(merged: Graph, chosen: Sequence[Candidate], rules: tuple[str, ...], cost_fn) -> list[Candidate]:
    """The merged model on :func:`joint_schedule` as a whole-model option (none without one)."""
    schedule = joint_schedule(merged, [o.schedule for o in chosen])
    if schedule is None:
        return []
    estimate = estimate_or(cost_fn, merged, schedule, None)
    return [Candidate(merged, schedule, rules, estimate, label="optimized+joint", kind="merged")]
