"""What ``optimize``'s stages use that a caller may replace: the cost model that ranks the
candidates, the timing function the trials measure with, the clock the deadline is kept on, and
the device that verifies and times them.

Tests pass fakes (a timing function that returns fixed seconds, a clock that advances only when
told), so that what they check does not depend on this machine's speed or load.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gspo.costmodel import CostModel
from gspo.ir import Graph
from gspo.runtime import Timing, interleaved
from gspo.search.device import Device
from gspo.streams import Schedule

__all__ = ["Clock", "Measure", "Strategies"]

#: Seconds, monotonic (:func:`time.perf_counter`).
Clock = Callable[[], float]
#: Times labelled calls interleaved: ``measure(calls, runs, warmup)`` -> one :class:`Timing` per
#: call, in order (:func:`gspo.runtime.interleaved`).
Measure = Callable[[Sequence[tuple[str, Callable[[], object]]], int, int], list[Timing]]


@dataclass(frozen=True)
class Strategies:
    """The cost model (``None``: the one of the profile the options name), the timing function,
    the clock and the device."""

    cost_model: CostModel | None = None
    measure: Measure = interleaved
    clock: Clock = time.perf_counter
    #: The device that verifies and times (``None``: the one ``--device`` names;
    #: :class:`~gspo.search.device.Device`).
    device: Device | None = None

    def cost(self, graph: Graph, schedule: Schedule | None = None) -> float:
        """The cost model's estimate of ``graph`` on ``schedule`` (``None``: one stream)."""
        return self.cost_model.cost(graph, schedule)
