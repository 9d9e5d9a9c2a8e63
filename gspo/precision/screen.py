"""The CPU's kinds in the order it runs them fastest (:func:`order`), and a screen before any kind
is fitted (:func:`screen`): a kind that is not faster than fp32 with every piece it touches
reduced cannot give a faster model with fewer, and its fit's judgments would be spent for nothing.

Order: weight-only int8 (and int4) first on every CPU: it needs no activation ranges, so its
build is the cheapest and its error does not depend on the data; where it is faster and within the
budget it is a floor the other kinds must beat (on BERT-base it held fully reduced at 1.7x, issue
52). Then with VNNI (``avx512_vnni``, ``avx_vnni``, ``amx_int8``: int8 products summed straight
into 32 bits) static int8 on OpenVINO (the NNCF kind, where made, first of them), then on
onnxruntime, then dynamic int8; without it, dynamic int8 and static int8 after: onnxruntime's u8s8
kernels saturate there
(:mod:`gspo.runtime.cpu_features`), and OpenVINO's int8 was no faster than f32 on BERT-base on an
AVX2-only EPYC (issue 52). The bf16 kinds stay first: the kinds whose rest runs at bf16 start
from the bf16 kind's fit (:func:`~gspo.precision.stage.on_bf16_fit`). The fit gives each kind an
equal share of the time the kinds not yet fitted have left, so a kind that ends early leaves its
time to the ones after it.

Screen: each of the CPU's kinds, in that order, is built with every piece it touches reduced and
timed beside the exact pick (on the fit's executor, as its judgments run) with the run's
``measure`` in :data:`SCREEN_ROUNDS` interleaved rounds after :data:`SCREEN_WARMUP`, on one
sample; a kind whose median is not below fp32's by :data:`SCREEN_MARGIN` is dropped before
fitting, with a note, and so is one that cannot be built or run (its fit would fail the same way).
What its build does once (a quantization, NNCF's) is kept for its fit. The fully reduced build is
also judged by the run's error budget on the calibration samples (a run each: a fraction of its
build): a kind within the budget there is likely to hold it with every piece reduced, one judgment
of its fit (one sample is not enough: NNCF's fully reduced BERT-base held on the first calibration
sample and broke 13 times over on held-out ones). The kinds that pass are fitted those within the budget first, then the others,
fastest first in each, at most :data:`MAX_FITTED` of them: on BERT-base (issue 52) the fastest
fully reduced kind, NNCF's int8 at 2.8x, broke the budget 13 times over on its CLS output and its
fit sent 34 of 86 pieces back (1.23x), while OpenVINO's weight-only int8 held it fully reduced at
1.7x. A kind is screened only where the fits' time can hold its screen and a few judgments of its
fit, and, once a kind has passed within the budget, only within :data:`SCREEN_SHARE` of that time
(one that passed breaking it does not stop the screen: the kinds after it may hold): on BERT-base
(440 MB of weights, 8+8 samples, a 300 s budget) NNCF's quantization alone took 47 s (the 2-core
EPYC with other work on it, not measured alone), and a screen of every kind would leave nothing
to fit them. The torch runtime's kinds (the GPU's) are not screened.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

from gspo.errors import GspoError, first_line
from gspo.ir import Graph
from gspo.precision.accuracy import ErrorBudget
from gspo.precision.accuracy import measure as accuracy_of
from gspo.precision.kind import Kind
from gspo.precision.search import Fitted, Pieces, cpu_executor
from gspo.runtime.cpu_features import VNNI_FLAGS, has_vnni
from gspo.timing.deadline import Deadline

__all__ = ["FIT_JUDGMENTS", "FP32_LABEL", "MAX_FITTED", "SCREEN_MARGIN", "SCREEN_ROUNDS", "SCREEN_SHARE", "SCREEN_WARMUP", "order", "screen",
           "screen_label", "screen_seconds"]

#: Interleaved rounds of a kind's screen beside fp32, and the rounds before them, not counted.
SCREEN_ROUNDS = 5
SCREEN_WARMUP = 1
#: The most of the fits' time the screen may take once a kind has passed it (:func:`_holds`).
SCREEN_SHARE = 0.5
#: The judgments of a fit a kind's screen must leave time for (its first, the ranking's, one more).
FIT_JUDGMENTS = 3
#: The most kinds fitted: the fastest with every piece reduced (a kind slower than three others
#: that hold the budget would rarely win, and each kind fitted takes a share of the time).
MAX_FITTED = 3
#: How much below fp32's median a kind's fully reduced median must be to be fitted.
SCREEN_MARGIN = 0.02
#: The exact pick's label in the screen's timings (a kind's: :func:`screen_label`).
FP32_LABEL = "fp32, screened"
#: The backend of the torch runtime's kinds (:data:`gspo.precision.variants.TORCH`), not screened.
_TORCH = "torch"


def screen_label(name: str) -> str:
    """The label of the kind named ``name`` in the screen's timings."""
    return f"{name}, every piece reduced"


def _family(kind: Kind) -> str:
    """What :func:`order` ranks ``kind`` by: ``float`` (bf16, fp16, tf32), ``nncf``, ``static``
    on ``openvino`` or ``ort``, ``dynamic``, ``weights`` (weight-only)."""
    if kind.precision not in ("int8", "int4"):
        return "float"
    if "weights on" in kind.name:
        return "weights"
    if "dynamic" in kind.name:
        return "dynamic"
    if "(NNCF)" in kind.name:
        return "nncf"
    return "openvino" if kind.backend.startswith("openvino") else "ort"


#: The families in the order a CPU with VNNI runs them fastest, and one without.
_WITH_VNNI = ("float", "weights", "nncf", "openvino", "ort", "dynamic")
_WITHOUT_VNNI = ("float", "weights", "dynamic", "nncf", "openvino", "ort")


def order(kinds: Sequence[Kind], flags: Collection[str]) -> tuple[list[Kind], list[str]]:
    """``kinds`` in the order the CPU of ``flags`` (``/proc/cpuinfo``'s, :func:`~gspo.runtime.
    cpu_features.cpu_flags`) runs them fastest (see the module docstring; the order among kinds
    of one family kept), and the note that says why (none where fewer than two int8 families
    are among them)."""
    vnni = has_vnni(flags)
    rank = _WITH_VNNI if vnni else _WITHOUT_VNNI
    out = sorted(kinds, key=lambda k: rank.index(_family(k)))
    families = {_family(k) for k in kinds} - {"float"}
    if len(families) < 2:
        return out, []
    if vnni:
        has = ", ".join(sorted(VNNI_FLAGS.intersection(flags)))
        return out, [f"int8 kinds in the order this CPU runs them fastest: weight-only first (no calibration), then, "
                     f"as it has VNNI ({has}), static int8 (OpenVINO, then onnxruntime), then dynamic"]
    return out, ["int8 kinds in the order this CPU runs them fastest: weight-only first (no calibration), then, as it "
                 "has no VNNI (avx512_vnni, avx_vnni or amx_int8), dynamic int8, static int8 after (onnxruntime's u8s8 "
                 "kernels saturate without VNNI, and OpenVINO's int8 was no faster than f32 on BERT there)"]


def _build_s(kind: Kind, ref) -> float:
    """Seconds building ``kind`` and its session is estimated to take (its cost less a run of the
    data, what its first build does once, :attr:`~gspo.precision.kind.Kind.once`; on OpenVINO its
    probe's compile too)."""
    from gspo.precision.reference import PROBE_S

    runs = max(len(ref.data.calibration), len(ref.data.validation))
    probe = PROBE_S if kind.backend.startswith("openvino") and kind.precision in ("int8", "int4") else 0.0
    return max(kind.cost - runs * ref.sample_s, ref.session_s) + kind.once + probe


def _one_s(kind: Kind, ref) -> float:
    """Seconds the screen of ``kind`` alone is estimated to take: its build and session, a run of
    the judged samples, the rounds."""
    judged = len(getattr(ref.data, _judged(ref)))
    return _build_s(kind, ref) + (judged + 2 * (SCREEN_ROUNDS + SCREEN_WARMUP)) * ref.sample_s


def screen_seconds(kinds: Sequence[Kind], ref) -> float:
    """Seconds the screen of ``kinds`` is estimated to take (``ref``: the source's
    :class:`~gspo.precision.reference.Reference`): the exact pick's session, each kind's build
    and session, and the rounds of both."""
    return ref.session_s + sum(_one_s(k, ref) for k in kinds)


def _ms(seconds: float) -> str:
    ms = 1e3 * seconds
    return f"{ms:.0f} ms" if ms >= 100 else f"{ms:.3g} ms"


def screen(kinds: Sequence[Kind], pieces: Pieces, fp32: Graph, ref, timing, deadline: Deadline | None = None,
           budget: ErrorBudget | None = None) -> tuple[list[Kind], list[Fitted], list[str]]:
    """The kinds of ``kinds`` worth fitting, in the order to fit them, those dropped (each a
    :class:`Fitted` with nothing reduced and the note that says why) and the notes (see the module
    docstring). ``fp32``: the exact pick as saved; ``ref``: the source's reference (its data, its
    outputs, its timings); ``timing``: ``(measure, executor)``, the run's timing function
    (:data:`~gspo.search.strategies.Measure`) and the fit's executor (``None``:
    :func:`~gspo.precision.search.cpu_executor`); ``deadline``: the fits' (:func:`_holds`);
    ``budget``: the run's error budget, each fully reduced build judged by it on the screen's
    samples (``None``: not judged, every kind that passes counts as within it)."""
    measure, executor = timing
    screened = [k for k in kinds if k.backend != _TORCH]
    if not screened:
        return list(kinds), [], []
    samples, expected = _sample(ref, budget)
    make = executor or cpu_executor
    try:
        base = make(fp32)
    except GspoError as e:
        return list(kinds), [], [f"kinds not screened: the exact pick cannot be run: {e}"]
    share = deadline.share(SCREEN_SHARE) if deadline is not None and deadline.limited else None
    dropped: dict[str, Fitted] = {}
    found: dict[str, tuple[float, float]] = {}  # each kind screened: its median over fp32's, its error's excess
    notes: list[str] = []
    try:
        for kind in screened:
            held = _holds(kind, ref, deadline, share if _held_one(found, dropped) else None)
            if held is not None:
                dropped[kind.name] = Fitted(kind, None, note=held)
                continue
            why, found[kind.name], note = _screened(kind, pieces, (base, samples, make, measure), (expected, budget))
            if why is not None:
                dropped[kind.name] = Fitted(kind, None, note=why)
            elif note:
                notes.append(note)
    finally:
        base.close()
    kept = _fastest(kinds, found, dropped)
    return kept, [dropped[k.name] for k in kinds if k.name in dropped], notes


def _judged(ref) -> str:
    """The samples the screen judges the error on and times on the first of: the calibration
    samples, else the validation ones (never both: the fit keeps validation for its answer)."""
    return "calibration" if ref.data.calibration else "validation"


def _sample(ref, budget: ErrorBudget | None):
    """The screen's samples (:func:`_judged`) and the source's outputs on them (``None`` without
    ``budget``: the error is not judged)."""
    which = _judged(ref)
    return getattr(ref.data, which), (ref.outputs[which] if budget is not None else None)


def _held_one(found: dict[str, tuple[float, float]], dropped: dict[str, Fitted]) -> bool:
    """Whether a kind has passed the screen within the budget on its samples."""
    return any(excess <= 1 for name, (_, excess) in found.items() if name not in dropped)


def _holds(kind: Kind, ref, deadline: Deadline | None, share: Deadline | None) -> str | None:
    """Why the time cannot hold screening ``kind`` (``None``: it can): its screen and a fit of
    :data:`FIT_JUDGMENTS` judgments must end by ``deadline``, and, once a kind has passed the
    screen, its screen within ``share`` (:data:`SCREEN_SHARE` of the fits' time): the kinds first
    in the CPU's order may take what they need while none has passed, the later ones not."""
    need = _one_s(kind, ref)
    if deadline is not None and deadline.limited and not deadline.fits(need + FIT_JUDGMENTS * kind.cost):
        return (f"not fitted: the time budget cannot hold timing it with every piece reduced and fitting it (about "
                f"{need + FIT_JUDGMENTS * kind.cost:.1f} s; {deadline.remaining():.1f} s left)")
    if share is not None and not share.fits(need):
        return (f"not fitted: a kind passed the screen within the budget on its samples, and the screen's share cannot "
                f"hold timing this one with every piece reduced (about {need:.1f} s; {share.remaining():.1f} s left of it)")
    return None


def _fastest(kinds: Sequence[Kind], found: dict[str, tuple[float, float]], dropped: dict[str, Fitted]) -> list[Kind]:
    """The kinds that passed the screen, those within the budget on its samples first, then the
    others, fastest first in each (a bf16 kind before the kinds whose rest runs at bf16, which
    start from its fit), at most :data:`MAX_FITTED` of them (the others dropped, said in
    ``dropped``); the kinds not screened (the torch runtime's) after them."""
    passed = sorted((k for k in kinds if k.name in found and k.name not in dropped),
                    key=lambda k: (found[k.name][1] > 1, found[k.name][0]))
    bf16 = [k for k in passed if k.precision == "bf16"][:1]
    if bf16 and any(k.rest == "bf16" for k in passed):
        passed = bf16 + [k for k in passed if k is not bf16[0]]
    for k in passed[MAX_FITTED:]:
        ahead = ", ".join(f.name for f in passed[:MAX_FITTED])
        dropped[k.name] = Fitted(k, None, note=f"not fitted: {MAX_FITTED} kinds came first from the screen ({ahead}: "
                                               f"within the budget on its samples, then the fastest with every piece "
                                               f"reduced), and the fit's time goes to them")
    return passed[:MAX_FITTED] + [k for k in kinds if k.name not in found and k.name not in dropped]


def _screened(kind: Kind, pieces: Pieces, run, judged) -> tuple[str | None, tuple[float, float], str]:
    """Why ``kind`` is dropped, once built with every piece it touches reduced and timed beside the
    exact pick (``run``: its executor, the screen's samples, how to make an executor, the timing
    function; timed on the first sample; ``None``: fit it), its median over fp32's (``inf`` where it
    could not be timed) and its error's excess on the samples
    (:attr:`~gspo.precision.accuracy.Accuracy.excess`; ``judged``: the source's outputs on them and
    the budget; 0 without them), and the note of a kind kept."""
    base, samples, make, measure = run
    sample = samples[0]
    reduced = pieces.union(i for i, ops in enumerate(pieces.ops) if kind.touches(ops))
    try:
        built = make(kind.build(reduced))
    except Exception as e:  # noqa: BLE001 - a build or session the runtime refuses: the fit's would fail too
        return f"not fitted: with every piece reduced it cannot be built here: {first_line(e)}", (math.inf, math.inf), ""
    try:
        excess = _excess([built.run(s) for s in samples] if judged[1] is not None else [], judged)
        fp32, mine = measure([(FP32_LABEL, lambda: base.run(sample)), (screen_label(kind.name),
                                                                     lambda: built.run(sample))],
                             SCREEN_ROUNDS, SCREEN_WARMUP)
    except Exception as e:  # noqa: BLE001 - a run the runtime refuses
        return f"not fitted: with every piece reduced it cannot run here: {first_line(e)}", (math.inf, math.inf), ""
    finally:
        built.close()
    ratio = mine.median / fp32.median if fp32.median > 0 else math.inf
    timed = f"{_ms(mine.median)} against {_ms(fp32.median)} for fp32"
    if mine.median >= (1 - SCREEN_MARGIN) * fp32.median:
        return f"not fitted: with every piece reduced it ran {timed} (not faster)", (ratio, excess), ""
    on = f"on {len(samples)} sample{'s' if len(samples) > 1 else ''}"
    error = "" if judged[1] is None else (f", within the budget {on}" if excess <= 1 else
                                          f", {excess:.3g} times the budget {on}")
    return None, (ratio, excess), f"{kind.name}: with every piece reduced {timed}{error}"


def _excess(outputs, judged) -> float:
    """How far ``outputs`` (of the fully reduced build on the screen's samples) are from the
    budget (``judged``: the source's outputs on them and the budget; 0 without them)."""
    expected, budget = judged
    if budget is None or expected is None:
        return 0.0
    return accuracy_of(expected, [dict(o) for o in outputs], budget).excess
