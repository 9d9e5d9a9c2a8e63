"""Fakes that ``optimize`` takes as its strategies (:class:`~gspo.search.strategies.Strategies`):
a timing function that returns scripted seconds instead of timing, and a clock the test moves.

With them a test of what ``optimize`` decides does not depend on this machine's speed or load:
which candidate wins a timing, and when the time budget runs out, are the test's to say.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from gspo.runtime import Timing
from gspo.search.deployed import INSTALLED_LABEL

#: Seconds a round of a piece's candidates (all the same: none beats the piece as given by the
#: margin unless scripted), and of a whole-model candidate not scripted (slower than any
#: scripted, so that it never wins: thread settings, streams, the greedy whole model).
PIECE_S = 1.0
UNSCRIPTED_S = 100.0


class FakeClock:
    """A clock the test moves by hand (``advance``), or by ``tick`` seconds each time it is read."""

    def __init__(self, now: float = 100.0, tick: float = 0.0):
        self.now, self.tick = now, tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


Script = Mapping[str, Sequence[float] | Callable[[int], Sequence[float]]]


class ScriptedTimings:
    """A timing function (``measure(calls, runs, warmup)``, as :func:`gspo.runtime.interleaved`)
    that calls nothing and gives each label the seconds per round its ``script`` holds: a tuple,
    or a function of the number of the whole-model timing (1: the first, 2: the first
    confirmation, ...). A whole-model timing is one that times the ``"original"``; in the
    pieces' timings every candidate takes :data:`PIECE_S` a round but those the script names.
    ``whole`` records the labels of each whole-model timing, ``installed`` those of each timing
    of the pick against the input as installed (:data:`~gspo.search.deployed.INSTALLED_LABEL`,
    unscripted :data:`UNSCRIPTED_S`: the pick holds)."""

    def __init__(self, script: Script | None = None, piece_s: float = PIECE_S, rounds: int = 30):
        self.script = dict(script or {})
        self.piece_s, self.rounds = piece_s, rounds
        self.whole: list[tuple[str, ...]] = []
        self.pieces: list[tuple[str, ...]] = []
        self.installed: list[tuple[str, ...]] = []

    def __call__(self, calls, runs: int, warmup: int = 3) -> list[Timing]:
        labels = tuple(label for label, _ in calls)
        whole = "original" in labels or INSTALLED_LABEL in labels
        (self.installed if INSTALLED_LABEL in labels else self.whole if whole else self.pieces).append(labels)
        return [Timing(label, self.seconds(label, whole)) for label in labels]

    def seconds(self, label: str, whole: bool) -> tuple[float, ...]:
        given = self.script.get(label)
        if callable(given):
            given = given(len(self.whole))
        if given is not None:
            return tuple(given)
        return (UNSCRIPTED_S if whole else self.piece_s,) * self.rounds
