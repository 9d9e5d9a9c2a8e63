"""The final decision of ``optimize``: which whole-model candidates the final comparison's time
goes to (:func:`by_promise`, :func:`final_seconds`), each verified against the original and timed
with it, and the pick, each contender confirmed in a timing of its own (:func:`confirmed`) and
the pick against the input as a user runs it (:mod:`gspo.search.deployed`)."""

from __future__ import annotations

from collections.abc import Sequence

from gspo.errors import GspoError
from gspo.runtime.backends import DEFAULT_BACKEND
from gspo.search.budget import Timebox
from gspo.search.build_costs import build_depth, build_ops, weight_bytes
from gspo.search.candidate import Candidate, Measured, baseline_refusal, estimated_cost
from gspo.search.config import OptimizeError
from gspo.search.deployed import against_installed, installed_seconds
from gspo.search.prepared import Prepared
from gspo.search.report import FinalChoice
from gspo.search.report_parts import Confirmation
from gspo.search.stats import PAIRED_ALPHA, pick, rounds_faster, speed_verdict
from gspo.search.strategies import Strategies
from gspo.search.threads import option_backend
from gspo.search.trial import (
    BURST_ROUNDS,
    CONFIRM_MAX_ROUNDS,
    CONFIRM_ROUNDS,
    MIN_ROUNDS,
    WARMUP_ROUNDS,
    Trial,
    burst_seconds,
    sample_seconds,
)
from gspo.timing import Deadline

__all__ = ["CONTENDERS", "by_promise", "choose_final", "confirmed", "final_seconds", "original_seconds"]

#: At most this many whole-model options are confirmed against the original, each in a timing
#: of its own (with --time-budget, the first timing and these fit the final comparison's share).
CONTENDERS = 3


def original_seconds(prepared: Prepared, timebox: Timebox) -> float:
    """Seconds that building, checking and timing the original alone is expected to take."""
    build = timebox.rates.estimate(DEFAULT_BACKEND, len(prepared.original.nodes))
    return build + len(prepared.feeds) * prepared.run_s + (MIN_ROUNDS + WARMUP_ROUNDS) * sample_seconds(prepared.run_s)


def choose_final(prepared: Prepared, options: list[Candidate], cfg, tools: Strategies, timebox: Timebox) -> FinalChoice:
    """Verify the whole-model options against the original and pick one (by measurement, each
    contender confirmed by a timing of its own against the original; see :func:`confirmed`).
    Options that ``timebox`` cannot hold are skipped (the original first of all, and then the
    input is handed back unmeasured).

    Raises:
        OptimizeError: the merged model's outputs differ from the original's.
    """
    if not timebox.fits(original_seconds(prepared, timebox)):
        timebox.skip("final", "comparing the whole model's options with the original (the input is returned)",
                     "the time budget could not hold building, checking and timing the original")
        unmeasured = [Measured(options[0])]
        return FinalChoice(unmeasured[0], unmeasured, unmeasured, [])
    cap = cfg.timing.final_timing_budget
    if timebox.limited:
        cap = min(cap, timebox.final_s / 4)
    with Trial(prepared.original, options, prepared.feeds, cfg.tolerance, timebox, "final",
               executor=tools.device.executor(), measure=tools.measure) as trial:
        # an option that compared nothing (outputs all NaN on these inputs) is only rejected
        differs = [o for o in trial.rejected if o.label == "optimized" and any(not d.ok and d.compared for d in o.diffs)]
        if differs:
            raise OptimizeError(f"the optimized model differs from the original: {differs[0].rejected}; nothing written")
        outcomes = trial.time(cfg.timing.runs, timebox.timing(cap, 0.5))
        if not any(o.label == "original" for o in outcomes):  # the trial's budget skipped it (it says so)
            unmeasured = [Measured(next((o for o in options if o.label == "original"), options[0]))]
            return FinalChoice(unmeasured[0], unmeasured, unmeasured, [])
        if refused := baseline_refusal(outcomes, "original"):
            raise GspoError(f"the model as given cannot be measured on {tools.device.name}: {refused}")
        if cfg.timing.select == "estimated":
            best = pick(outcomes, "original", cfg.timing.final_margin, cfg.timing.select, lambda o: estimated_cost(o, tools.cost))
            return FinalChoice(best, outcomes, outcomes, [])
        if tools.device.name != "cpu":
            return confirmed(trial, outcomes, cfg, cap, timebox)
        # the confirmations leave the time of holding their pick against the input as installed
        held = installed_seconds(timebox.rates, prepared.original, trial.run_s)
        choice = confirmed(trial, outcomes, cfg, cap, timebox.keeping(held))
        return against_installed(trial, choice, cfg.timing.final_margin, timebox)  # as a user runs the input


def _contenders(outcomes: list[Measured], margin: float) -> list[Measured]:
    """The options worth confirming, fastest first, at most :data:`CONTENDERS`: on one stream,
    any faster than the original by median in the first timing (the options timed beside each
    other disturb each other: a slow multi-stream option in the same rounds took an exported
    SqueezeNet on OpenVINO from 12% faster than onnxruntime to 1%); on several streams, one
    already faster beyond the spread (see :func:`confirmed`)."""
    original = next(o for o in outcomes if o.label == "original")
    timed = sorted((o for o in outcomes if o.timing is not None and o.label != "original"), key=lambda o: o.median_s)
    return [o for o in timed if o.median_s < original.median_s
            and (not o.candidate.on_streams or _beyond_noise(outcomes, o.label, margin))][:CONTENDERS]


def confirmed(trial: Trial, outcomes: list[Measured], cfg, seconds: float | None,
               timebox: Timebox | None = None) -> FinalChoice:
    """The contender that a timing of its own against the original alone (the same sessions,
    twice the rounds in ``seconds``) finds fastest beyond the noise, else the original; a
    contender whose timing ``timebox`` cannot hold is not confirmed (the budget says so).

    A contender's own timing decides: the first timing ranks several options at once, and the
    fastest of several medians is biased low. Beyond the noise is faster by the margin by median
    and either by more than the timings' spread, or, on one stream, faster in significantly more
    of the interleaved rounds than chance gives (a sign test at :data:`PAIRED_ALPHA` shared among
    the contenders). A schedule on several streams must beat the spread in both timings: its
    speed depends on the other core being free, which the rounds of one timing do not vary (a
    loaded machine once turned an Inception-v3 export's 2-stream "win" by 9% against a 12%
    spread into 18% slower). A contender that fails while timed again is rejected with the reason.
    """
    original = next(o for o in outcomes if o.label == "original")
    contenders = _contenders(outcomes, cfg.timing.final_margin)
    alpha = PAIRED_ALPHA / max(1, len(contenders))
    best, decisive, best_speedup = original, outcomes, 0.0
    failed: dict[str, Measured] = {}
    confirmations: list[Confirmation] = []
    for o in contenders:
        round_s = sample_seconds(original.median_s) + sample_seconds(o.median_s)
        if timebox is not None and not timebox.fits((MIN_ROUNDS + WARMUP_ROUNDS) * round_s):
            timebox.skip("final", f"confirming {o.label} against the original", "the time budget could not hold it")
            continue
        own = None if seconds is None else Deadline.after(seconds)
        if timebox is not None and seconds is not None:  # up to CONFIRM_MAX_ROUNDS, what is left allowing
            own = timebox.timing(max(seconds, CONFIRM_MAX_ROUNDS * round_s))
        again = {x.label: x for x in trial.time(2 * cfg.timing.runs, own, labels=("original", o.label))}
        if again[o.label].timing is None:
            failed[o.label] = again[o.label]
            confirmations.append(Confirmation(o.label, False, rejected=again[o.label].rejected))
            continue
        pair = [again["original"], again[o.label]]
        confirmed = _beyond_noise(pair, o.label, cfg.timing.final_margin, alpha)
        wins, rounds = rounds_faster(pair[0].timing, pair[1].timing)
        confirmations.append(Confirmation(o.label, confirmed, original_ms=pair[0].median_s * 1e3,
                                          measured_ms=pair[1].median_s * 1e3, rounds_faster=[wins, rounds]))
        if confirmed and not o.candidate.settings.is_default:
            burst = _in_bursts(trial, o, original, cfg, alpha, timebox)
            confirmations.append(burst)
            confirmed = burst.confirmed
        speedup = pair[0].median_s / pair[1].median_s
        if confirmed and speedup > best_speedup:
            best, decisive, best_speedup = pair[1], pair, speedup
    return FinalChoice(best, [failed.get(o.label, o) for o in outcomes], decisive, confirmations)


def _in_bursts(trial: Trial, option: Measured, original: Measured, cfg, alpha: float,
               timebox: Timebox | None) -> Confirmation:
    """A thread setting's second confirmation: the option against the original in bursts after
    idle (:meth:`Trial.time` with ``bursts``), as a served model is called. A setting that wins
    only back to back (its threads fast once awake, slow to wake) is not saved: it must be faster
    beyond the noise here too. Its pauses come out of ``timebox``; a budget that cannot hold them
    leaves the setting unconfirmed (it says so)."""
    label = f"{option.label} in bursts"
    need = burst_seconds(trial.run_s)  # the reference's run, as the trial's other estimates
    if timebox is not None and not timebox.fits(need):
        timebox.skip("final", f"confirming {option.label}'s thread setting in bursts after idle",
                     "the time budget could not hold it")
        return Confirmation(label, False, rejected="not timed in bursts: the time budget could not hold it")
    own = timebox.timing(need) if timebox is not None and timebox.limited else None
    again = {x.label: x for x in trial.time(BURST_ROUNDS, own, labels=("original", option.label), bursts=True)}
    if again[option.label].timing is None:
        return Confirmation(label, False, rejected=again[option.label].rejected)
    pair = [again["original"], again[option.label]]
    wins, rounds = rounds_faster(pair[0].timing, pair[1].timing)
    return Confirmation(label, _beyond_noise(pair, option.label, cfg.timing.final_margin, alpha),
                        original_ms=pair[0].median_s * 1e3, measured_ms=pair[1].median_s * 1e3,
                        rounds_faster=[wins, rounds])


def _beyond_noise(outcomes: Sequence[Measured], label: str, margin: float, alpha: float = PAIRED_ALPHA) -> bool:
    """Whether ``label`` measured faster than the original beyond the margin and the noise
    (:func:`~gspo.search.report.speed_verdict`); never for an option without a timing."""
    chosen = next(o for o in outcomes if o.label == label)
    if chosen.timing is None:
        return False
    return speed_verdict(list(outcomes), chosen, margin, alpha)[2] == "faster"


def final_seconds(prepared: Prepared, backends: Sequence[str], timebox: Timebox) -> float:
    """What the final comparison needs to measure the options most likely to win on a CPU: the
    original built on onnxruntime and whole on every other backend (at the build rates the
    budget knows), each checked on the input sets and timed in the first timing and in a
    confirmation (their least rounds and warm-up), as the final comparison counts it when it
    takes them in (``Trial``), and the pick held against the input as installed
    (:func:`~gspo.search.deployed.installed_seconds`)."""
    ops, size, deep = build_ops(prepared.original), weight_bytes(prepared.original), build_depth(prepared.original)
    builds = sum(timebox.rates.estimate(b, ops, size, deep) for b in backends)
    n, rounds = len(backends), MIN_ROUNDS + WARMUP_ROUNDS
    samples = rounds * sum(k + 2 for k in range(n)) + CONFIRM_ROUNDS * 2
    held = installed_seconds(timebox.rates, prepared.original, prepared.run_s)  # the pick against the input as installed
    return builds + n * len(prepared.feeds) * prepared.run_s + samples * sample_seconds(prepared.run_s) + held


def by_promise(options: list[Candidate]) -> list[Candidate]:
    """The CPU's whole-model options in the order the final comparison's time goes to them (an
    option the time budget cannot hold is skipped, and every option kept makes each timing
    round longer): the original, then each result on one stream and one backend (onnxruntime
    first, then each whole model on another backend, which ran most real models 1.1-1.8x
    faster here), then schedules on several streams (never faster than one stream on a whole
    model on these 2-core machines), then splits across backends. Ties keep their order."""
    def rank(o: Candidate) -> int:
        backend = option_backend(o)  # None: several backends or streams
        if o.on_streams:
            return 3
        if backend is None:
            return 4
        if backend == DEFAULT_BACKEND:
            return 0 if o.kind == "original" else 1
        return 2

    return sorted(options, key=rank)


# ----------------------------------------------------------------- optimize
