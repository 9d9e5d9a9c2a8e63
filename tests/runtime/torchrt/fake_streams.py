"""A recording stand-in for the torch runtime's streams (:mod:`gspo.runtime.torchrt.streams`).

:class:`FakeStreams` has the interface of ``CudaStreams`` and says ``on_device = True``, so that
a :class:`~gspo.runtime.torchrt.executor.TorchExecutor` takes its device paths (events, forks and
joins, timing), while the tensors stay on torch's CPU device: build the executor with
``TorchConfig(device="cpu")`` and ``streams=FakeStreams(log)``. Every call goes into ``log``:

- ``("stream", sid)`` and ``("event", eid, timing)`` when made;
- ``("record", eid, sid)``, ``("wait", sid, eid)``, ``("sync", sid)``;
- ``("use", sid)`` when a ``use(stream)`` block is entered, ``("end_use", sid)`` when it is left;
- ``("run", segment, sid)`` from :func:`log_programs`: a segment's program called while ``sid``
  was the stream most recently entered with ``use`` (``None`` outside any);
- ``("close",)``.

``elapsed_ms`` is deterministic: each record stamps its event with the number of records so far,
and the elapsed time between two events is the difference of their stamps, in ms.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass


@dataclass(eq=False)
class FakeStream:
    id: int

    def __repr__(self) -> str:
        return f"stream{self.id}"


@dataclass(eq=False)
class FakeEvent:
    id: int
    timing: bool = False
    stamp: float | None = None

    def __repr__(self) -> str:
        return f"event{self.id}"


class FakeStreams:
    """Streams and events that only record what is done with them (see the module docstring)."""

    on_device = True

    def __init__(self, log: list | None = None):
        self.log = [] if log is None else log
        self.streams: list[FakeStream] = []
        self.events: list[FakeEvent] = []
        self._current: list[FakeStream] = []
        self._clock = itertools.count(1)
        self.closed = 0

    @property
    def current(self) -> int | None:
        """The id of the stream most recently entered with :meth:`use` (``None`` outside any)."""
        return self._current[-1].id if self._current else None

    def stream(self) -> FakeStream:
        s = FakeStream(len(self.streams))
        self.streams.append(s)
        self.log.append(("stream", s.id))
        return s

    def event(self, timing: bool = False) -> FakeEvent:
        e = FakeEvent(len(self.events), timing)
        self.events.append(e)
        self.log.append(("event", e.id, timing))
        return e

    def record(self, event: FakeEvent, stream: FakeStream) -> None:
        assert isinstance(event, FakeEvent) and isinstance(stream, FakeStream), (event, stream)
        event.stamp = float(next(self._clock))
        self.log.append(("record", event.id, stream.id))

    def wait(self, stream: FakeStream, event: FakeEvent) -> None:
        assert isinstance(event, FakeEvent) and isinstance(stream, FakeStream), (stream, event)
        self.log.append(("wait", stream.id, event.id))

    @contextlib.contextmanager
    def use(self, stream: FakeStream):
        assert isinstance(stream, FakeStream), stream
        self._current.append(stream)
        self.log.append(("use", stream.id))
        try:
            yield stream
        finally:
            self._current.pop()
            self.log.append(("end_use", stream.id))

    def synchronize(self, stream: FakeStream) -> None:
        assert isinstance(stream, FakeStream), stream
        self.log.append(("sync", stream.id))

    def elapsed_ms(self, start: FakeEvent, end: FakeEvent) -> float:
        assert start.timing and end.timing, "elapsed time between events made without timing"
        assert start.stamp is not None and end.stamp is not None, "elapsed time of an event never recorded"
        return end.stamp - start.stamp

    def close(self) -> None:
        self.closed += 1
        self.log.append(("close",))


class LoggedProgram:
    """A segment's program that logs ``("run", segment, current stream)`` when called."""

    def __init__(self, program, segment: int, fake: FakeStreams):
        self.program, self.segment, self.fake = program, segment, fake

    def __call__(self, values):
        self.fake.log.append(("run", self.segment, self.fake.current))
        return self.program(values)

    def __getattr__(self, name):
        return getattr(self.program, name)


def log_programs(executor, fake: FakeStreams) -> None:
    """Make each of ``executor``'s segment programs log its runs into ``fake.log``."""
    executor.programs = [LoggedProgram(p, k, fake) for k, p in enumerate(executor.programs)]


def entries(log: list, kind: str) -> list[tuple]:
    """The entries of ``log`` of one kind."""
    return [e for e in log if e[0] == kind]
