"""Choose a schedule and a backend for a model: what ``gspo run`` and ``gspo bench`` use."""

from __future__ import annotations

from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.runtime.cpu import CpuExecutor
from gspo.runtime.session import SessionConfig
from gspo.streams import (
    Placement,
    PlacementError,
    Schedule,
    ScheduleError,
    assign_streams,
    check_schedule,
)

__all__ = ["parse_streams", "saved_schedule", "saved_placement", "choose_schedule", "make_executor", "device_executor"]


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


def saved_placement(graph: Graph) -> Placement | None:
    """The placement (backend per op) stored in the model's metadata, checked (or ``None``)."""
    if not graph.extras.placement:
        return None
    try:
        placement = Placement.from_json(graph.extras.placement)
        placement.check(graph)
    except PlacementError as e:
        raise PlacementError(f"the placement saved in the model is invalid: {e}") from None
    return placement


def choose_schedule(graph: Graph, streams: int | None, device: str = "cpu") -> Schedule:
    """``streams`` None (auto): the schedule saved by ``gspo optimize``, else one stream (streams
    pay only where the optimizer measured them paying); an integer: Nimble's assignment capped
    at that many streams (1 = one session)."""
    if streams is None:
        saved = saved_schedule(graph)
        return saved if saved is not None else Schedule.single(graph)
    if streams == 1:
        return Schedule.single(graph)
    return assign_streams(graph, max_streams=streams)


def make_executor(graph: Graph, streams: int | None = None, device: str = "cpu", config: SessionConfig = SessionConfig()):
    """An executor (``.run(feeds)``, ``.close()``) for ``graph`` on ``device``, with the model's
    saved placement (backend per op) on the CPU."""
    if device == "cuda":
        from gspo.runtime.cuda import CudaExecutor, require_gpu

        require_gpu()  # before anything else, so that a missing GPU is the error reported
        return CudaExecutor(graph, choose_schedule(graph, streams, device))
    if device != "cpu":
        raise GspoError(f"unknown device {device!r} (use cpu or cuda)")
    return CpuExecutor(graph, choose_schedule(graph, streams, device), config, saved_placement(graph))


def device_executor(graph: Graph, schedule: Schedule | None, device: str, one_stream: bool = False):
    """An executor of ``graph`` with exactly ``schedule`` (``None``: one session) on ``device``;
    ``one_stream`` (CUDA): the schedule's pieces one after another on a single stream."""
    if device == "cuda":
        from gspo.runtime.cuda import CudaExecutor

        return CudaExecutor(graph, schedule, one_stream=one_stream)
    if device != "cpu":
        raise GspoError(f"unknown device {device!r} (use cpu or cuda)")
    if one_stream:
        raise GspoError("one_stream is a CUDA setting (on the CPU, time the pieces in order)")
    return CpuExecutor(graph, schedule)
