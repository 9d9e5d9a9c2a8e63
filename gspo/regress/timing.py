"""Paired timing of a model's versions in one process, through gspo's one timing harness.

A :class:`Bench` opens an executor per version (the source as its users run it: one plain
onnxruntime session; the baseline artifact and the candidate with the schedule and placement
saved in them, as ``gspo run`` runs them), checks outputs with the scale-aware criterion of
:mod:`gspo.runtime.verify`, and times all versions interleaved through
:func:`gspo.runtime.interleaved`: round ``r`` times each version once, in an order that cycles
through all orders, so every version's ``r``-th sample is paired with the others'.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np

from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.runtime import VerifyResult, compare_outputs, interleaved, make_executor, timed_runner
from gspo.runtime.verify import OutputDiff, Tolerance, output_steps, worse

__all__ = ["Bench", "WARMUP"]

#: Untimed rounds before the first timed one (sessions allocate on their first runs).
WARMUP = 3
#: A timed sample lasts at least this long: a version of a model of microseconds is called this
#: many seconds' worth of times in a row. On the 2-core EPYC the tiny zoo models' paired ratios
#: moved 18-111% between rounds of one call each and 17-30% with 2 ms samples (the gate's
#: "too noisy to measure"); with 10 ms samples all seven were measured, in two runs of two.
MIN_SAMPLE_S = 0.01
#: The most calls in one sample.
MAX_CALLS = 1000


def _repeated(run, calls: int):
    """``run`` called ``calls`` times in a row, as one sample."""
    def many():
        for _ in range(calls):
            run()
    return many


class Bench:
    """Executors of a model's versions, by label; a context manager that closes them.

    ``versions`` maps a label to ``(graph, streams)``: ``streams`` ``1`` runs one plain session
    (the source as its users run it), ``None`` follows the schedule saved in the model.
    """

    def __init__(self, versions: Mapping[str, tuple[Graph, int | None]]):
        self.executors: dict[str, object] = {}
        #: each version's quantized outputs and their steps (what a version compared to it may differ by)
        self.steps = {label: output_steps(graph) for label, (graph, _) in versions.items()}
        self._round = 0
        try:
            for label, (graph, streams) in versions.items():
                try:
                    self.executors[label] = make_executor(graph, streams)
                except GspoError as e:
                    raise GspoError(f"the {label} cannot be run: {e}") from None
        except BaseException:
            self.close()
            raise

    def check(self, reference: str, label: str, feeds: Sequence[Mapping[str, np.ndarray]],
              tolerance: Tolerance = Tolerance()) -> VerifyResult:
        """``label``'s outputs against ``reference``'s on every input set (the worst per output)."""
        worst: dict[str, OutputDiff] = {}
        for f in feeds:
            want = self.executors[reference].run(f)
            got = self.executors[label].run(f)
            for d in compare_outputs(want, got, tolerance.rtol, tolerance.atol, tolerance.ntol,
                                     self.steps[reference]).outputs:
                if worse(worst.get(d.name), d, by="norm_rel"):
                    worst[d.name] = d
        diffs = tuple(worst.values())
        return VerifyResult(all(d.ok for d in diffs), diffs)

    def rounds(self, feeds: Mapping[str, np.ndarray], count: int, warmup: int = WARMUP) -> dict[str, list[float]]:
        """``count`` interleaved rounds: the seconds of each version per round.

        Round ``r`` runs the versions in the ``r``-th of all their orders (cycling), so that each
        version runs right after each other one equally often (a plain rotation of three runs
        the second right after the first in two rounds of three, and never the other way round).
        """
        runners = [(label, timed_runner(ex, feeds)) for label, ex in self.executors.items()]
        if warmup:
            interleaved(runners, 1, warmup - 1)
        calls = self._calls(runners)
        if calls > 1:
            runners = [(label, _repeated(run, calls)) for label, run in runners]
        orders = list(itertools.permutations(runners)) if len(runners) <= 4 else [runners]
        out: dict[str, list[float]] = {label: [] for label, _ in runners}
        for r in range(count):
            for t in interleaved(list(orders[(self._round + r) % len(orders)]), 1, 0):
                out[t.label].extend(s / calls for s in t.seconds)
        self._round += count
        return out

    def _calls(self, runners) -> int:
        """Calls per timed sample, the same for every version: enough that the fastest version's
        sample lasts :data:`MIN_SAMPLE_S` (one on a device, whose events time each call)."""
        if any(hasattr(ex, "timed_runner") for ex in self.executors.values()):
            return 1
        fastest = min(min(t.seconds) for t in interleaved(runners, 1, 0))
        return max(1, min(MAX_CALLS, math.ceil(MIN_SAMPLE_S / max(fastest, 1e-9))))

    def close(self) -> None:
        """Free every executor."""
        for ex in self.executors.values():
            ex.close()
        self.executors = {}

    def __enter__(self) -> Bench:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
