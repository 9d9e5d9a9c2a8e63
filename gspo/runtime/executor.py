"""Choose a schedule and a backend for a model: what ``gspo run`` and ``gspo bench`` use."""

from __future__ import annotations

import os

from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.runtime.cpu import CpuExecutor
from gspo.runtime.session import SessionConfig
from gspo.streams import Schedule, ScheduleError, assign_streams, check_schedule

__all__ = ["parse_streams", "saved_schedule", "choose_schedule", "make_executor"]


def parse_streams(text: str | int) -> int | None:
    """``"auto"`` -> ``None``; a positive integer -> itself."""
    if isinstance(text, int) or str(text).strip().lower() != "auto":
        try:
            n = int(text)
        except ValueError:
            raise GspoError(f"--streams takes a positive integer or 'auto' (got {text!r})") from None
        if n < 1:
            raise GspoError(f"--streams must be at least 1 (got {n})")
        return n
    return None


def saved_schedule(graph: Graph) -> Schedule | None:
    """The schedule stored in the model's metadata, checked against the graph (or ``None``)."""
    if not graph.extras.schedule:
        return None
    try:
        schedule = Schedule.from_json(graph.extras.schedule)
        check_schedule(graph, schedule)
    except ScheduleError as e:
        raise ScheduleError(f"the schedule saved in the model is invalid: {e}") from None
    return schedule


def choose_schedule(graph: Graph, streams: int | None, device: str = "cpu") -> Schedule:
    """``streams`` None (auto): the saved schedule, else Nimble's capped at what the device runs
    at once (the CPU's cores); an integer: Nimble's capped at that many streams (1 = one session)."""
    if streams is None:
        saved = saved_schedule(graph)
        if saved is not None:
            return saved
        cap = (os.cpu_count() or 1) if device == "cpu" else None
        return assign_streams(graph, max_streams=cap)
    if streams == 1:
        return Schedule.single(graph)
    return assign_streams(graph, max_streams=streams)


def make_executor(graph: Graph, streams: int | None = None, device: str = "cpu", config: SessionConfig = SessionConfig()):
    """An executor (``.run(feeds)``, ``.close()``) for ``graph`` on ``device``."""
    if device == "cuda":
        from gspo.runtime.cuda import CudaExecutor, require_gpu

        require_gpu()
        return CudaExecutor(graph, choose_schedule(graph, streams, device))
    if device != "cpu":
        raise GspoError(f"unknown device {device!r} (use cpu or cuda)")
    return CpuExecutor(graph, choose_schedule(graph, streams, device), config)
