"""One time value: a :class:`Deadline` on a clock, the only form time takes below the command line.

Example:
    >>> now = iter([0.0, 1.0, 1.0, 7.0]).__next__
    >>> d = Deadline.after(10.0, now)   # at 0: ends at 10
    >>> round(d.remaining(), 1)         # at 1
    9.0
    >>> half = d.share(0.5)             # at 1: half of what is left
    >>> half.at
    5.5
    >>> half.expired()                  # at 7
    True
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["Deadline"]


@dataclass(frozen=True)
class Deadline:
    """The time ``at`` on ``clock`` (seconds, monotonic) by which work must end (``None``: never)."""

    at: float | None
    clock: Callable[[], float] = field(default=time.perf_counter, compare=False)

    @classmethod
    def after(cls, seconds: float | None, clock: Callable[[], float] = time.perf_counter) -> Deadline:
        """``seconds`` from now (``None``: never)."""
        return cls(None if seconds is None else clock() + seconds, clock)

    @property
    def limited(self) -> bool:
        """Whether it ever comes."""
        return self.at is not None

    def now(self) -> float:
        """The clock's time."""
        return self.clock()

    def remaining(self) -> float:
        """Seconds left (never negative; infinite without a limit)."""
        return math.inf if self.at is None else max(0.0, self.at - self.clock())

    def expired(self) -> bool:
        """Whether it has passed."""
        return self.at is not None and self.clock() >= self.at

    def fits(self, seconds: float) -> bool:
        """Whether work expected to take ``seconds`` ends before it."""
        return self.at is None or self.clock() + seconds <= self.at

    def earlier(self, at: float | None) -> Deadline:
        """This deadline or the time ``at`` on its clock, whichever comes first."""
        if at is None:
            return self
        return Deadline(at if self.at is None else min(at, self.at), self.clock)

    def within(self, seconds: float | None) -> Deadline:
        """This deadline, or ``seconds`` from now when that comes first."""
        return self if seconds is None else self.earlier(self.clock() + seconds)

    def share(self, fraction: float) -> Deadline:
        """``fraction`` of the seconds left now (never, without a limit)."""
        if self.at is None:
            return self
        now = self.clock()
        return Deadline(now + fraction * max(0.0, self.at - now), self.clock)
