"""The pick held against the input as a user runs it without gspo (issue 51).

optimize times its options against the input on onnxruntime with idle threads not spinning
(:class:`~gspo.runtime.session.SessionConfig`), so that no runner's spinning threads starve
the next one on a machine of few cores. But a user runs the input on onnxruntime as installed
(:data:`~gspo.runtime.session.AS_INSTALLED`: its default threads, spinning on), and on some
models that is what wins: a CRNN's OpenVINO pick, 5% faster than the input without spinning,
ran 1.22x slower than the input as installed (benchmarks/placement). So the confirmed pick is
timed once more, against the input as installed (:func:`against_installed`), and written only
when faster there by the margin (by median); else the input is handed back unchanged.

Like with like: each runs as it deploys. A pick on onnxruntime alone on one stream is a plain
file, which onnxruntime (and ``gspo.InferenceSession``, at the thread count saved in it) runs
as installed, spinning on: it is timed so too; a pick placed on other backends or on streams is
timed as gspo runs it (the trial's own executor). Both are timed in bursts after idle
(:meth:`~gspo.search.trial.Trial.time_apart` with ``bursts``): each round, each runner's own
block of calls after a pause longer than onnxruntime's spin (20-50 ms), the runners' order
rotating. The pause is what makes the timing fair: a spinning runner's threads have gone to
sleep before the other's block starts, so they take no core from it, and its own block still
gets what spinning gives (the calls after the first find its threads awake) and pays what it
costs (the first call after idle wakes them), as a served model's burst does.
"""

from __future__ import annotations

import dataclasses

from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.runtime import CpuExecutor
from gspo.runtime.backends import DEFAULT_BACKEND
from gspo.runtime.session import AS_INSTALLED
from gspo.runtime.settings import RunSettings
from gspo.search.budget import Timebox
from gspo.search.build_costs import BuildRates, build_ops
from gspo.search.candidate import Candidate
from gspo.search.report import FinalChoice
from gspo.search.report_parts import Confirmation
from gspo.search.stats import rounds_faster
from gspo.search.threads import option_backend
from gspo.search.trial import BURST_ROUNDS, Trial, burst_seconds

__all__ = ["INSTALLED_LABEL", "against_installed", "deploys_as_installed", "installed_executor", "installed_seconds"]

#: The label the input as installed is timed under (the timing function sees it).
INSTALLED_LABEL = "original as installed"


def deploys_as_installed(option: Candidate) -> bool:
    """Whether ``option`` is written as a plain file that onnxruntime runs as installed (the
    whole model on onnxruntime, on one stream: no placement or schedule for gspo to follow)."""
    return option_backend(option) == DEFAULT_BACKEND


def installed_executor(graph: Graph, settings: RunSettings = RunSettings()) -> CpuExecutor:
    """``graph`` in one onnxruntime session as installed (:data:`AS_INSTALLED`: spinning on),
    at ``settings``' thread count (default: onnxruntime's)."""
    return CpuExecutor(graph, None, settings.session_config(AS_INSTALLED))


def installed_seconds(rates: BuildRates, graph: Graph, run_s: float) -> float:
    """Seconds that holding a pick of ``graph``, whose call takes about ``run_s``, against the
    input as installed is expected to take: two sessions built and a timing in bursts."""
    return 2 * rates.estimate(DEFAULT_BACKEND, build_ops(graph)) + burst_seconds(run_s)


def against_installed(trial: Trial, choice: FinalChoice, margin: float, timebox: Timebox | None = None) -> FinalChoice:
    """``choice`` as it stands when its pick times faster than the input as installed by
    ``margin`` (by median); else the input, the choice's confirmations saying why (a timing
    ``timebox`` cannot hold is skipped, and the budget says so). A choice of the input itself
    stands as it is.

    The pick has already been confirmed faster than the input beyond the noise
    (:func:`~gspo.search.decide.confirmed`); this check asks only that it is not slower than the
    input as a user runs it, by median and the margin. Asking it to be faster beyond the noise
    again, in this timing's few rounds of bursts, handed back a Llama-style decoder whose
    OpenVINO pick was 13% faster than the input as installed (3.43 against 3.96 ms, 7 of 11
    rounds) and 18% faster back to back (benchmarks/placement)."""
    pick = choice.best
    if pick.label == "original" or pick.timing is None:
        return choice
    label = f"{pick.label} against the input as installed"
    need = installed_seconds(timebox.rates, pick.candidate.graph, trial.run_s) if timebox is not None else 0.0
    if timebox is not None and not timebox.fits(need):
        timebox.skip("final", f"timing {pick.label} against the input as installed (onnxruntime's defaults, "
                             "idle threads spinning)", "the time budget could not hold it")
        why = "not timed against the input as installed: the time budget could not hold it"
        return _input(choice, Confirmation(label, False, rejected=why))
    original = next(o for o in choice.decisive if o.label == "original")
    trial.release([pick.label])  # the other options' sessions freed before two more are built
    opened: list[CpuExecutor] = []
    try:
        opened.append(installed_executor(original.candidate.graph))
        if deploys_as_installed(pick.candidate):
            opened.append(installed_executor(pick.candidate.graph, pick.candidate.settings))
        runners = [(dataclasses.replace(original.candidate, label=INSTALLED_LABEL), opened[0]),
                   (pick.candidate, opened[1] if len(opened) > 1 else None)]
        own = timebox.timing(burst_seconds(trial.run_s)) if timebox is not None and timebox.limited else None
        base, mine = trial.time_apart(runners, BURST_ROUNDS, own, bursts=True)
    except GspoError as e:
        return _input(choice, Confirmation(label, False, rejected=f"onnxruntime as installed refused it: {e}"))
    finally:
        for ex in opened:
            ex.close()
    if base.timing is None or mine.timing is None:
        return _input(choice, Confirmation(label, False, rejected=mine.rejected or base.rejected))
    wins, rounds = rounds_faster(base.timing, mine.timing)
    held = Confirmation(label, mine.median_s < base.median_s * (1 - margin), original_ms=base.median_s * 1e3,
                        measured_ms=mine.median_s * 1e3, rounds_faster=[wins, rounds])
    if not held.confirmed:
        return _input(choice, held)
    return dataclasses.replace(choice, confirmations=[*choice.confirmations, held])


def _input(choice: FinalChoice, why: Confirmation) -> FinalChoice:
    """The input handed back unchanged in place of ``choice``'s pick, ``why`` among its
    confirmations; the first timing decided, as when no contender is confirmed."""
    original = next(o for o in choice.outcomes if o.label == "original")
    return FinalChoice(original, choice.outcomes, choice.outcomes, [*choice.confirmations, why])
