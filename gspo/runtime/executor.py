"""From a device to its executor (:func:`device_executor`, the one dispatcher), and the schedule and
placement ``gspo run`` and ``gspo bench`` give it (:func:`make_executor`)."""

from __future__ import annotations

from collections.abc import Callable

from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.runtime.backends import RUNNABLE_BACKENDS
from gspo.runtime.cpu import CpuExecutor
from gspo.runtime.protocols import Executor
from gspo.runtime.session import SessionConfig
from gspo.runtime.settings import applied
from gspo.streams import (
    Placement,
    PlacementError,
    Schedule,
    ScheduleError,
    assign_streams,
    check_schedule,
)
from gspo.streams.schedule import check_bounds

__all__ = ["DEVICES", "check_device", "choose_schedule", "device_executor", "device_runtime", "make_executor",
           "saved_placement", "saved_schedule"]


def saved_schedule(graph: Graph) -> Schedule | None:
    """The schedule stored in the model's metadata, checked against the graph (first against
    the bounds it gives, :func:`~gspo.streams.schedule.check_bounds`) before anything is
    built or started from it (or ``None``)."""
    if not graph.extras.schedule:
        return None
    try:
        schedule = Schedule.from_json(graph.extras.schedule)
        check_bounds(graph, schedule)
        check_schedule(graph, schedule)
    except ScheduleError as e:
        raise ScheduleError(f"the schedule saved in the model is invalid: {e}") from None
    return schedule


def saved_placement(graph: Graph) -> Placement | None:
    """The placement (backend per op) stored in the model's metadata, checked against the
    graph and the backends gspo knows before anything is built from it (or ``None``)."""
    if not graph.extras.placement:
        return None
    try:
        placement = Placement.from_json(graph.extras.placement)
        placement.check(graph, RUNNABLE_BACKENDS)
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


def _cpu_executor(graph: Graph, schedule: Schedule | None, config: SessionConfig, placement: Placement | None,
                  one_stream: bool, runtime: str | None) -> Executor:
    if one_stream:
        raise GspoError("one_stream is a CUDA setting (on the CPU, time the pieces in order)")
    return CpuExecutor(graph, schedule, config, placement)


def _cuda_executor(graph: Graph, schedule: Schedule | None, config: SessionConfig, placement: Placement | None,
                   one_stream: bool, runtime: str | None) -> Executor:
    from gspo.runtime.cuda.choice import cuda_executor

    if placement is not None and not placement.is_default:
        raise GspoError("a placement (backend per op) runs on the cpu device; on cuda the whole model runs on the GPU")
    return cuda_executor(graph, schedule, runtime=runtime, one_stream=one_stream)


def _cpu_runtime(runtime: str | None) -> str | None:
    return None


def _cuda_runtime(runtime: str | None) -> str:
    from gspo.runtime.cuda.choice import require_cuda

    return require_cuda(runtime)


#: Each device's executor: what ``device_executor`` dispatches on.
_EXECUTORS: dict[str, Callable[..., Executor]] = {"cpu": _cpu_executor, "cuda": _cuda_executor}
#: Each device's runtime chosen for the one asked for, before its executor is worth building
#: (raises with the reason when none runs).
_RUNTIMES: dict[str, Callable[[str | None], str | None]] = {"cpu": _cpu_runtime, "cuda": _cuda_runtime}
#: The devices an executor runs on.
DEVICES = tuple(_EXECUTORS)


def check_device(device: str) -> None:
    """Raise :class:`GspoError` unless ``device`` is one of :data:`DEVICES`."""
    if device not in _EXECUTORS:
        raise GspoError(f"unknown device {device!r} (use {' or '.join(DEVICES)})")


def device_runtime(device: str, runtime: str | None = None) -> str | None:
    """The runtime ``device`` runs on for ``runtime`` asked for: on ``cuda`` the one chosen
    (:func:`~gspo.runtime.cuda.choice.require_cuda`: ``ort`` or ``torch``; ``None`` asks for
    ``$GSPO_CUDA_RUNTIME``, else ``auto``), on ``cpu`` none (``runtime`` is not read).

    Raises:
        GspoError: an unknown device, or none of the device's runtimes runs here (one line).
    """
    check_device(device)
    return _RUNTIMES[device](runtime)


def device_executor(graph: Graph, schedule: Schedule | None, device: str, one_stream: bool = False, *,
                    runtime: str | None = None, config: SessionConfig = SessionConfig(),
                    placement: Placement | None = None) -> Executor:
    """The executor of ``device`` running ``graph`` with exactly ``schedule`` (``None``: one
    session), the one dispatcher from a device to its executor: :class:`CpuExecutor` on ``cpu``
    (``config`` for its sessions, each piece on the backend ``placement`` gives it), on ``cuda``
    the executor of ``runtime`` (:func:`~gspo.runtime.cuda.choice.cuda_executor`: ``ort`` or
    ``torch`` as chosen, or a request chosen here, ``None``: ``$GSPO_CUDA_RUNTIME``, else auto)
    (``one_stream``: the schedule's pieces one after another on a single stream).

    Raises:
        GspoError: an unknown device, or a setting the device's executor does not take.
    """
    check_device(device)
    return _EXECUTORS[device](graph, schedule, config, placement, one_stream, runtime)


def make_executor(graph: Graph, streams: int | None = None, device: str = "cpu",
                  config: SessionConfig = SessionConfig(), runtime: str | None = None) -> Executor:
    """The executor ``gspo run`` and ``gspo bench`` use for ``graph`` on ``device``: the schedule
    :func:`choose_schedule` picks; on the CPU, the model's saved placement (backend per op); on
    CUDA, ``runtime`` (``--cuda-runtime``: :func:`device_runtime`), chosen before anything else so
    that a missing GPU is the error reported."""
    chosen = device_runtime(device, runtime)
    placement = saved_placement(graph) if device == "cpu" else None
    if device == "cpu":
        config = applied(graph, config)  # the thread setting gspo optimize saved
    return device_executor(graph, choose_schedule(graph, streams, device), device, runtime=chosen, config=config,
                           placement=placement)
