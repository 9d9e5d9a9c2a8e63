"""The reduced-precision fit of ``optimize``: from the exact pick to the reduced-precision
candidates that hold the user's accuracy budget (:mod:`gspo.precision.search`), and the report's
``precision`` block. The fit is one of the whole-model stage's sources of candidates
(:mod:`gspo.search.reduced` calls it, times its candidates with the run's ``measure`` and
confirms them against the exact pick by the same decision as every other candidate).

Everything the fit does counts against its share of the run's time budget (a
:class:`~gspo.timing.deadline.Deadline`): reading the samples (at most :data:`DATA_SHARE` of the
time left, :class:`~gspo.precision.samples.SampleLimits`), the source's reference runs
(:data:`REFERENCE_SHARE`, :mod:`gspo.precision.reference`), the activation ranges, each kind's
judgments (estimated from the weights and the reference's timings:
:attr:`~gspo.precision.variants.Kind.cost`) and the fp32 result's error; the timing gets what
:func:`fits_deadline` leaves. A step estimated to run past the deadline is skipped, logged in the
report's ``skipped`` (stage ``precision``) and, where it drops a kind, said in the block's notes.
What cannot be cut is one step each: reading the first sample of a set, running it, building one
session or one kind.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from gspo.ir import Graph
from gspo.precision.accuracy import Accuracy, ErrorBudget
from gspo.precision.report import KindReport, PrecisionReport
from gspo.precision.screen import MAX_FITTED
from gspo.precision.search import (
    TIMING_RUNS,
    Fitted,
    Pieces,
    evaluate,
    prepare,
    resume,
    thread_settings,
)
from gspo.precision.variants import kinds, plain
from gspo.records import Skip
from gspo.timing.deadline import Deadline

__all__ = ["DATA_SHARE", "FIT_TARGET", "MIN_TIMING_RUNS", "NOT_FITTED", "NOT_HELD", "PrecisionFit", "REFERENCE_SHARE", "TIMING_SHARE",
           "coarse_limits", "fit_kinds", "fit_precision", "fits_deadline", "on_bf16_fit", "reduced", "settings_of",
           "skipped_for_bf16", "timing_runs", "timing_seconds", "within"]


def reduced(cfg) -> bool:
    """Whether ``cfg`` asks for a reduced precision."""
    return any(p != "fp32" for p in cfg.precision.precisions)


#: Why a step is skipped (the report's ``skipped``), and a kind's note when its share of the time
#: cannot hold one judgment of it (:attr:`~gspo.precision.variants.Kind.cost`).
NOT_HELD = "the time budget cannot hold it"
NOT_FITTED = "not fitted: the time budget cannot hold one judgment of it"
#: The shares of the stage's time left for reading the samples, and then for running the source
#: on them (the reference outputs); the fits and the timing get the rest.
DATA_SHARE = 0.2
REFERENCE_SHARE = 0.15
#: The share of each limit of the user's budget the fit and the screen aim within on their data
#: (:func:`within`): the calibration and validation samples
#: are few, and what holds on them exactly at a limit breaks it on others about as often as not
#: (ViT-B/16, 8+8 samples, nmse=1e-3: the fit at 1.00e-3 on pooler_output on its validation
#: samples, 1.01e-3 on 8 held-out ones). The user's own budget still judges the answer.
FIT_TARGET = 0.9


@dataclass
class PrecisionFit:
    """What the fit gives the whole-model stage: what was asked (``requested``, the budget
    ``errors``), the data (its sources and warnings), the source's reference
    (:class:`~gspo.precision.reference.Reference`: its outputs, what a session and a run cost),
    the pieces, each kind fitted, the notes, the exact pick's accuracy on the validation data
    (``fp32``; ``None``: not measured) and the work skipped; ``why``: why nothing was fitted
    (``None``: the fit ran)."""

    requested: list[str]
    errors: ErrorBudget
    data: object | None = None
    ref: object | None = None
    pieces: Pieces | None = None
    fitted: list[Fitted] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skips: list[Skip] = field(default_factory=list)
    fp32: Accuracy | None = None
    why: str | None = None

    @property
    def survivors(self) -> list[Fitted]:
        """The kinds that hold the budget with some piece reduced (the candidates)."""
        return [f for f in self.fitted if f.reduced is not None]

    def without(self, why: str) -> PrecisionFit:
        """This fit as skipped (``why``), the skip logged."""
        self.skips.append(Skip("precision", "the reduced-precision search", why))
        self.why = why
        return self

    def block(self, best: Fitted | None = None, fp32_s: float | None = None) -> PrecisionReport:
        """The report's ``precision`` block: ``best`` the kind chosen (``None``: fp32 kept), each
        kind's median and thread count as timed (set on its :class:`Fitted`), ``fp32_s`` the
        exact pick's median (``None``: not timed)."""
        if self.why is not None:
            data = self.data
            return PrecisionReport(
                requested=self.requested, max_error=str(self.errors), data=dict(data.source) if data else {},
                warnings=list(data.warnings) if data else [], notes=[f"not searched: {self.why}: kept fp32"],
                pieces=0, piece_ops=[], fp32_median_ms=None, fp32_validation=None, kinds=[], chosen="fp32",
                speedup_over_fp32=1.0, validation=None)
        return _block(self, best, fp32_s)


def within(budget: ErrorBudget, fraction: float) -> ErrorBudget:
    """``budget`` with each limit's room cut to ``fraction`` of it: an error bound times
    ``fraction``, a bound on a higher-better metric (cosine, topK) ``1 - (1 - bound) * fraction``
    (an exact agreement, a bound of 1, as it is)."""
    def cut(lim):
        bound = lim.bound * fraction if lim.lower_is_better else 1.0 - (1.0 - lim.bound) * fraction
        return dataclasses.replace(lim, bound=float(f"{bound:.6g}"))
    return ErrorBudget(tuple(cut(lim) for lim in budget.limits))


def fit_precision(original: Graph, fp32: Graph, cfg, backends: Sequence[str], deadline: Deadline | None,
                  say: Callable[[str], None] | None = None, executor: Callable | None = None,
                  measure: Callable | None = None) -> PrecisionFit:
    """Every kind ``cfg.precision.precisions`` asks for fitted to ``cfg.precision.max_error`` on
    the exact pick ``fp32`` (as saved: its schedule and placement in the graph), against the
    source ``original``'s outputs on the calibration and validation data; every step counted
    against ``deadline`` (one estimated to run past it is skipped, and the fit's ``skips`` say
    which and why). The judgments run on ``executor(graph)`` (default: the CPU,
    :func:`~gspo.precision.search.cpu_executor`). The kinds are put in the order this CPU runs
    them fastest and, with the run's ``measure`` (``None``: not), those not faster than fp32 with
    every piece reduced are dropped before fitting (:mod:`gspo.precision.screen`)."""
    from gspo.precision.samples import SampleLimits, precision_data

    say = say or (lambda text: None)
    out = PrecisionFit(list(cfg.precision.precisions), cfg.precision.max_error.budget)  # parsed as it entered
    if deadline is not None and deadline.expired():
        return out.without("the time budget ended before it began")
    limits = SampleLimits(deadline=deadline.share(DATA_SHARE) if deadline is not None else None)
    out.data = precision_data(original, cfg.precision.calibration, cfg.precision.validation,
                              seed=cfg.verify.seed, limits=limits)
    out.skips += [Skip("precision", f"reading {w.split()[0].lstrip('-')} samples", w)
                  for w in out.data.warnings if "the time budget" in w]
    source = plain(original)
    ref = _reference(source, out.data, deadline, out.skips)
    if isinstance(ref, str):
        return out.without(ref)
    out.ref = ref
    data = out.data = dataclasses.replace(ref.data, warnings=ref.data.warnings + tuple(coarse_limits(out.errors, ref.outputs)))
    base = plain(fp32)
    out.pieces = Pieces.of(base, cfg.search.threshold)
    say("calibrating")
    found, out.notes = kinds(base, cfg.precision.precisions, backends, _ranges(base, data, ref, deadline, out.skips),
                             calibration=data.calibration)
    found = [dataclasses.replace(k, cost=_cost(k, base, ref), once=_once(k, base, ref), sample_s=ref.sample_s)
             for k in found]
    aim = within(out.errors, FIT_TARGET)  # what the screen and the fits judge by; the user's budget judges the answer
    out.notes.append(f"the fit aims within {FIT_TARGET:.0%} of each limit on its data ({aim}): "
                     f"samples it never saw then keep within {out.errors}")
    per_kind = len(thread_settings(base))  # each kind is timed at each thread count
    found, dropped = _ordered_and_screened(found, out, fp32, (measure, executor, aim),
                                           fits_deadline(deadline, MAX_FITTED * per_kind, ref.sample_s, ref.session_s))
    out.fitted = fit_kinds(found, out.pieces, (data, ref.outputs, aim),
                           fits_deadline(deadline, len(found) * per_kind, ref.sample_s, ref.session_s), say,
                           lambda n: fits_deadline(deadline, n * per_kind, ref.sample_s, ref.session_s), executor) + dropped
    out.notes += [f.plan for f in out.fitted if f.plan]
    out.skips += [Skip("precision", f"fitting {f.kind.name}", f.note) for f in out.fitted if f.note.startswith(NOT_FITTED)]
    out.fp32 = _fp32_accuracy(fp32, source, ref, out.errors, deadline, out.skips, executor)
    return out


def _ordered_and_screened(found, out: PrecisionFit, fp32: Graph, timing, deadline: Deadline | None):
    """``found`` in the order this CPU runs them fastest, less the kinds the screen drops (with
    ``timing``'s measure, executor and budget aimed at; none without a measure), and those dropped;
    the notes said on ``out``."""
    from gspo.precision.screen import order, screen
    from gspo.runtime.cpu_features import cpu_flags

    found, notes = order(found, cpu_flags())
    out.notes += notes
    measure, executor, aim = timing
    if measure is None:
        return found, []
    found, dropped, notes = screen(found, out.pieces, fp32, out.ref, (measure, executor), deadline, aim)
    out.notes += notes
    return found, dropped


def _reference(source: Graph, data, deadline: Deadline | None, skips: list[Skip]):
    """The source's outputs on ``data`` (:func:`~gspo.precision.reference.reference_outputs`,
    within :data:`REFERENCE_SHARE` of the time left once its session is built), or why the
    time budget cannot hold them (a string)."""
    from gspo.precision.reference import reference_outputs, session_estimate

    need = session_estimate(source)
    if deadline is not None and not deadline.fits(need):
        return (f"the time budget cannot hold building the source model's session for the reference outputs "
                f"(about {_s(need)} for its weights; {_s(deadline.remaining())} left)")
    notes: list[str] = []
    ref = reference_outputs(source, data, deadline, notes, REFERENCE_SHARE)
    skips += [Skip("precision", f"running the source on {kind} samples", n) for n in notes if (kind := _cut_set(n))]
    return dataclasses.replace(ref, data=dataclasses.replace(ref.data, warnings=ref.data.warnings + tuple(notes)))


def _cut_set(note: str) -> str | None:
    """The set (``calibration``, ``validation``) whose runs a note of
    :func:`~gspo.precision.reference.reference_outputs` says the time budget cut, else ``None``."""
    m = re.match(r"used the first \d+ of \d+ (calibration|validation) samples", note)
    return m[1] if m else None


def _ranges(base: Graph, data, ref, deadline: Deadline | None, skips: list[Skip]):
    """``ranges()`` for :func:`~gspo.precision.variants.kinds`: the activation ranges on the
    calibration data, or ``None`` (with a skip) when the time budget cannot hold them (a session
    of the model with every activation an output, run on each sample)."""
    from gspo.runtime.quantize import activation_ranges

    def ranges():
        need = 1.5 * ref.session_s + 2 * len(data.calibration) * ref.sample_s
        if deadline is not None and not deadline.fits(need):
            skips.append(Skip("precision", "static int8 (computing the activation ranges)",
                              f"{NOT_HELD} (about {_s(need)}; {_s(deadline.remaining())} left)"))
            return None
        return activation_ranges(base, data.calibration)

    return ranges


def _cost(kind, base: Graph, ref) -> float:
    """Seconds one judgment of ``kind`` is estimated to take: building it (quantizing the model
    again for dynamic int8: :data:`~gspo.precision.reference.QUANTIZE_S_PER_BYTE` of its weights;
    the kinds quantized once only strip a copy of it, :attr:`~gspo.precision.kind.Kind.first`),
    its session (on OpenVINO, :data:`~gspo.precision.reference.OPENVINO_SESSION_S` more), a run
    of the data."""
    from gspo.precision.reference import OPENVINO_SESSION_S, QUANTIZE_S_PER_BYTE, weight_bytes

    again = kind.precision == "int8" and not kind.first
    build = QUANTIZE_S_PER_BYTE * weight_bytes(base) if again else 0.0
    return ref.judgment_s(build) + (OPENVINO_SESSION_S if kind.backend.startswith("openvino") else 0.0)


def _once(kind, base: Graph, ref) -> float:
    """Seconds of what the first build of ``kind`` does once (:attr:`~gspo.precision.kind.Kind.first`):
    onnxruntime's static quantization of the model (as one of dynamic int8's judgments), NNCF's
    (:func:`~gspo.precision.nncf_int8.nncf_seconds`), or nothing."""
    from gspo.precision.reference import QUANTIZE_S_PER_BYTE, weight_bytes

    if kind.first == "quantize":
        return QUANTIZE_S_PER_BYTE * weight_bytes(base)
    if kind.first == "nncf":
        from gspo.precision.nncf_int8 import nncf_seconds

        return nncf_seconds(weight_bytes(base), len(ref.data.calibration), ref)
    return 0.0


def _first_cost(kind) -> float:
    """Seconds the first judgment of ``kind`` is estimated to take: its :attr:`~gspo.precision.kind.Kind.cost`,
    the work done once (:attr:`~gspo.precision.kind.Kind.once`: the quantization) and, with int8
    on OpenVINO, its probe's compile in a process of its own (:data:`~gspo.precision.reference.PROBE_S`)."""
    from gspo.precision.reference import PROBE_S

    probe = kind.precision == "int8" and kind.backend.startswith("openvino")
    return kind.cost + kind.once + (PROBE_S if probe else 0.0)


def _fp32_accuracy(fp32: Graph, source: Graph, ref, budget: ErrorBudget, deadline: Deadline | None,
                   skips: list[Skip], executor: Callable | None = None) -> Accuracy | None:
    """The exact pick's accuracy on the validation data (``fp32``: as saved, its schedule and
    placement in the graph): the reference's own where it is the source as it runs (no run),
    else measured on ``executor`` when the time budget holds it (``None``: skipped)."""
    from gspo.precision.accuracy import measure

    same = not fp32.extras.schedule and not fp32.extras.placement and plain(fp32).key == source.key
    if same:
        return measure(ref.outputs["validation"], ref.outputs["validation"], budget)
    need = ref.judgment_s(0.0)
    if deadline is not None and not deadline.fits(need):
        skips.append(Skip("precision", "measuring the fp32 result's error", f"{NOT_HELD} (about {_s(need)})"))
        return None
    return evaluate(fp32, ref.data.validation, ref.outputs["validation"], budget, executor)


#: The fewest interleaved rounds the first timing is cut to when the time budget holds no more:
#: the fewest in which winning every round rules chance out at 0.01.
MIN_TIMING_RUNS = 7


def timing_runs(runners: int, ref, left: float) -> int | None:
    """The rounds the first timing of ``runners`` (the exact pick and every kind at every thread
    count) gets in ``left`` seconds: :data:`~gspo.precision.search.TIMING_RUNS`, fewer when
    ``left`` holds no more, at the fewest :data:`MIN_TIMING_RUNS` (``None``: not even those)."""
    runs = TIMING_RUNS
    while runs > MIN_TIMING_RUNS and timing_seconds(runners, runs, ref) > left:
        runs -= 1
    return runs if timing_seconds(runners, runs, ref) <= left else None


def timing_seconds(runners: int, runs: int, ref) -> float:
    """Seconds the timing of ``runners`` in ``runs`` rounds (3 more to warm up) is estimated to
    take (``ref``: the source's :class:`~gspo.precision.reference.Reference`)."""
    return runners * ref.session_s + (runs + 3) * runners * ref.sample_s


def _s(seconds: float) -> str:
    """Seconds as the notes show them (``12.3 s``, ``45 ms``)."""
    return f"{seconds:.1f} s" if seconds >= 0.1 else f"{1e3 * seconds:.0f} ms"


def coarse_limits(budget: ErrorBudget, reference) -> list[str]:
    """A warning for each top-K limit that the data is too small to tolerate anything: fewer rows
    (samples, or the rows of a sequence) than one in ``1 - bound`` allow no row to change its class."""
    out = []
    for limit in budget.limits:
        if not limit.metric.startswith("top"):
            continue
        names = [limit.output] if limit.output is not None else list(reference["validation"][0])
        for name in names:
            rows = {which: sum(math.prod(np.shape(o[name])[:-1]) for o in reference[which] if name in o)
                    for which in ("calibration", "validation")}
            fewest = min(rows.values())
            if 0 < fewest and (1 - limit.bound) * fewest < 1:
                more = f"; {math.ceil(1 / (1 - limit.bound) - 1e-9)} rows would allow one" if limit.bound < 1 else ""
                out.append(f"{name}: {limit.metric}={limit.bound:g} on {rows['calibration']} calibration and "
                           f"{rows['validation']} validation rows allows no row to change its top class{more}")
    return out


#: The share of the precision stage's time kept for timing the fitted kinds at the least, and at
#: the most (the rest is the fits'). At the least a quarter: on BERT-base a fit that held the
#: budget in 81 s left 9 s of the 15 s its timing beside the exact pick (sessions at each thread
#: count, the check, the rounds) needed with 15%, and the kind was not timed.
TIMING_SHARE = (0.25, 0.5)


def fits_deadline(deadline: Deadline | None, n_timed: int, sample_s: float,
                  session_s: float = 0.0) -> Deadline | None:
    """When the fits must end: early enough to leave the timing its time, an estimate from
    ``sample_s`` (one run of the source) and ``session_s`` (building its session) of the
    sessions and interleaved rounds of fp32 and ``n_timed`` other runners (every kind at every
    thread count), within :data:`TIMING_SHARE` of the time left (``None``: no limit)."""
    if deadline is None or not deadline.limited:
        return deadline
    left = deadline.remaining()
    rounds = (TIMING_RUNS + 3) * (n_timed + 1) * sample_s + (n_timed + 1) * session_s
    low, high = TIMING_SHARE
    return deadline.within(left - min(high * left, max(low * left, 2 * rounds)))


def fit_kinds(found, pieces: Pieces, judged, deadline: Deadline | None, say,
              again: Callable[[int], Deadline | None] | None = None, executor: Callable | None = None) -> list[Fitted]:
    """Every kind fitted in turn, each until an equal share of the time left for the kinds not yet
    fitted (one kind cannot take the others' time), its expected cost said first
    (:func:`~gspo.precision.search.prepare`, kept in :attr:`Fitted.plan` for the notes);
    ``judged``: the data, the source's outputs on it and the budget. A kind whose rest runs at bf16
    starts from the bf16 kind's fit (:func:`on_bf16_fit`). Then, until ``again(n)`` (the deadline
    that leaves time to time ``n`` kinds; ``deadline`` without it), a second round, the kinds
    whose rest runs at bf16 first, each in an equal share again: a kind whose share ran out goes
    on from where it stopped (:func:`~gspo.precision.search.resume`, no judgment made again), and
    a survivor's pieces sent back are tried reduced again one at a time, the least harmful first
    (:func:`~gspo.precision.search.reduce_again`). Every judgment runs on ``executor(graph)``
    (:func:`~gspo.precision.search.outputs_of`)."""
    from gspo.precision.search import OUT_OF_TIME, reduce_again, resume

    data, reference, budget = judged
    fitted: list[Fitted] = []
    for i, k in enumerate(found):
        say(f"fitting {k.name}")
        mine = deadline.share(1 / (len(found) - i)) if deadline is not None else None
        fitted.append(_fit_one(k, pieces, judged, mine, fitted, executor, say))
    second = sorted((j for j, f in enumerate(fitted) if f.note == OUT_OF_TIME or f.to_refine),
                    key=lambda j: (fitted[j].kind.rest != "bf16", j))
    later = again(sum(f.reduced is not None or f.note == OUT_OF_TIME for f in fitted)) if again else deadline
    for n, j in enumerate(second):
        mine = later.share(1 / (len(second) - n)) if later is not None else None
        f = fitted[j]
        if f.note == OUT_OF_TIME:
            say(f"fitting {f.kind.name}, on from where its share ended")
            f = fitted[j] = resume(f, pieces, data, reference, budget, mine, executor)
        if f.to_refine:
            say(f"fitting {f.kind.name} piece by piece")
            fitted[j] = reduce_again(f, pieces, data, reference, budget, mine, executor)
    return fitted


def _fit_one(kind, pieces: Pieces, judged, deadline: Deadline | None, before: list[Fitted],
             executor: Callable | None = None, say: Callable[[str], None] | None = None) -> Fitted:
    """``kind`` fitted until ``deadline``, after the kinds ``before`` it (the bf16 kind's fit among
    them), its expected cost said (``say``) first; not at all when ``deadline`` cannot hold one
    judgment of it (:data:`NOT_FITTED`)."""
    skip = skipped_for_bf16(kind, before)
    if skip:
        return Fitted(kind, None, note=skip)
    if deadline is not None and not deadline.fits(_first_cost(kind)):
        return Fitted(kind, None, note=f"{NOT_FITTED} (about {_s(_first_cost(kind))}: building it, its session and a run "
                                       f"of the data; its share of the time left: {_s(deadline.remaining())})")
    kind, pinned = on_bf16_fit(kind, pieces, before)
    fitted = prepare(kind, pieces, judged[0], deadline, pinned)
    if fitted.progress is None:
        return fitted
    (say or (lambda text: None))(fitted.plan)
    return resume(fitted, pieces, *judged, deadline, executor)


def _bf16_fit(fitted: list[Fitted]) -> Fitted | None:
    return next((f for f in fitted if f.kind.precision == "bf16"), None)


def skipped_for_bf16(kind, fitted: list[Fitted]) -> str | None:
    """Why ``kind``, whose unquantized pieces run at bf16, is not fitted: the bf16 kind (fitted
    earlier in ``fitted``) holds the budget with no piece at bf16; ``None``: fit it."""
    if kind.rest != "bf16":
        return None
    whole = _bf16_fit(fitted)
    if whole is not None and whole.reduced is not None:
        return None
    return ("not fitted: bf16 on openvino does not hold the budget with any piece at bf16, and this kind runs "
            "every piece it does not quantize at bf16")


def on_bf16_fit(kind, pieces: Pieces, fitted: list[Fitted]):
    """``kind`` and the pieces its fit leaves alone: for a kind whose rest runs at bf16, the pieces
    the bf16 kind's fit sent back to fp32 stay at fp32 (OpenVINO at f32 in the same model)
    untouched, with the reason; any other kind as it is."""
    from gspo.precision.variants import keeping_f32

    whole = _bf16_fit(fitted)
    if kind.rest != "bf16" or whole is None:
        return kind, None
    back = {i: why for i, why in whole.pieces.items() if why.startswith("back to")}
    if not back:
        return kind, None
    pinned = {i: f"kept at fp32, where the fit of bf16 on openvino sent it: {why.split(': ', 1)[1]}"
              for i, why in back.items()}
    return keeping_f32(kind, pieces.union(back)), pinned


def settings_of(best: Fitted):
    """The report's ``settings`` for the chosen kind: its thread count, saved in its graph, and
    how to run it without gspo where one plain backend runs it as chosen (a QDQ model on
    onnxruntime or OpenVINO at f32)."""
    from gspo.records import SettingsReport
    from gspo.runtime.settings import RunSettings

    s = RunSettings(best.threads)
    plain_backend = {"ort": "onnxruntime", "openvino": "OpenVINO"}.get(best.kind.backend)
    advice = None
    if plain_backend and not s.is_default:
        advice = f"run it with {plain_backend}: {s.describe(best.kind.backend)}"
    return SettingsReport(s.threads, best.kind.backend, not s.is_default, advice)


def _kind_report(f: Fitted, fp32_s: float | None) -> KindReport:
    return KindReport(
        kind=f.kind.name, precision=f.kind.precision, backend=f.kind.backend,
        pieces_reduced=list(f.reduced) if f.reduced is not None else [], dropped=f.note or None,
        median_ms=_ms(f.median_s), threads=f.threads,
        speedup_over_fp32=round(fp32_s / f.median_s, 4) if fp32_s and f.median_s else None,
        calibration=f.calibration, validation=f.validation,
        pieces={str(i): why for i, why in sorted(f.pieces.items())})


def _ms(s: float | None) -> float | None:
    return None if s is None else round(1e3 * s, 4)


def _block(fitted: PrecisionFit, best: Fitted | None, fp32_s: float | None) -> PrecisionReport:
    """The report's ``precision`` block of a fit that ran (:meth:`PrecisionFit.block`)."""
    data, pieces, fp32_acc = fitted.data, fitted.pieces, fitted.fp32
    return PrecisionReport(
        requested=fitted.requested, max_error=str(fitted.errors), data=dict(data.source), warnings=list(data.warnings),
        notes=fitted.notes, pieces=len(pieces.ops), piece_ops=[len(p) for p in pieces.ops], fp32_median_ms=_ms(fp32_s),
        fp32_validation=fp32_acc, kinds=[_kind_report(f, fp32_s) for f in fitted.fitted],
        chosen="fp32" if best is None else best.kind.name,
        speedup_over_fp32=round(fp32_s / best.median_s, 4) if best is not None else 1.0,
        validation=best.validation if best is not None else fp32_acc)
