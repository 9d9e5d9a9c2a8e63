"""The CPU's kinds in the order it runs them fastest (:func:`order`), and a screen before any kind
is fitted (:func:`screen`): a kind that is not faster than fp32 with every piece it touches
reduced cannot give a faster model with fewer, and its fit's judgments would be spent for nothing.

Order: with VNNI (``avx512_vnni``, ``avx_vnni``, ``amx_int8``: int8 products summed straight into
32 bits) static int8 on OpenVINO first (the NNCF kind, where made, first of them), then on
onnxruntime, then dynamic and weight-only int8; without it, dynamic and weight-only int8 first
and static int8 after: onnxruntime's u8s8 kernels saturate there
(:mod:`gspo.runtime.cpu_features`), and OpenVINO's int8 was no faster than f32 on BERT-base on an
AVX2-only EPYC (issue 52). The bf16 kinds stay first: the kinds whose rest runs at bf16 start
from the bf16 kind's fit (:func:`~gspo.precision.stage.on_bf16_fit`). The fit gives each kind an
equal share of the time the kinds not yet fitted have left, so a kind that ends early leaves its
time to the ones after it.

Screen: each of the CPU's kinds is built with every piece it touches reduced and timed beside the
exact pick (on the fit's executor, as its judgments run) with the run's ``measure`` in
:data:`SCREEN_ROUNDS` interleaved rounds after :data:`SCREEN_WARMUP`, on one sample; a kind whose
median is not below fp32's by :data:`SCREEN_MARGIN` is dropped before fitting, with a note, and
so is one that cannot be built or run (its fit would fail the same way). The screen takes at
most :data:`SCREEN_SHARE` of the time left, estimated from the source's timings and each kind's
:attr:`~gspo.precision.kind.Kind.cost`; where that cannot hold it, no kind is screened (a note
says so). The torch runtime's kinds (the GPU's) are not screened.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from gspo.errors import GspoError, first_line
from gspo.ir import Graph
from gspo.precision.kind import Kind
from gspo.precision.search import Fitted, Pieces, cpu_executor
from gspo.runtime.cpu_features import VNNI_FLAGS, has_vnni
from gspo.timing.deadline import Deadline

__all__ = ["FP32_LABEL", "SCREEN_MARGIN", "SCREEN_ROUNDS", "SCREEN_SHARE", "SCREEN_WARMUP", "order", "screen",
           "screen_label", "screen_seconds"]

#: Interleaved rounds of a kind's screen beside fp32, and the rounds before them, not counted.
SCREEN_ROUNDS = 5
SCREEN_WARMUP = 1
#: The most of the precision time left the screen may take.
SCREEN_SHARE = 0.1
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
_WITH_VNNI = ("float", "nncf", "openvino", "ort", "dynamic", "weights")
_WITHOUT_VNNI = ("float", "dynamic", "weights", "nncf", "openvino", "ort")


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
        return out, [f"int8 kinds in the order this CPU runs them fastest: it has VNNI ({has}): static int8 first "
                     f"(OpenVINO, then onnxruntime), then dynamic and weight-only"]
    return out, ["int8 kinds in the order this CPU runs them fastest: it has no VNNI (avx512_vnni, avx_vnni or "
                 "amx_int8): dynamic and weight-only int8 first, static int8 after (onnxruntime's u8s8 kernels "
                 "saturate without VNNI, and OpenVINO's int8 was no faster than f32 on BERT there)"]


def _build_s(kind: Kind, ref) -> float:
    """Seconds building ``kind`` and its session is estimated to take (its cost less a run of the
    data; on OpenVINO its probe's compile too)."""
    from gspo.precision.reference import PROBE_S

    runs = max(len(ref.data.calibration), len(ref.data.validation))
    probe = PROBE_S if kind.backend.startswith("openvino") and kind.precision in ("int8", "int4") else 0.0
    return max(kind.cost - runs * ref.sample_s, ref.session_s) + probe


def screen_seconds(kinds: Sequence[Kind], ref) -> float:
    """Seconds the screen of ``kinds`` is estimated to take (``ref``: the source's
    :class:`~gspo.precision.reference.Reference`): the exact pick's session, each kind's build
    and session, and the rounds of both."""
    rounds = 2 * (SCREEN_ROUNDS + SCREEN_WARMUP) * ref.sample_s
    return ref.session_s + sum(_build_s(k, ref) + rounds for k in kinds)


def _ms(seconds: float) -> str:
    ms = 1e3 * seconds
    return f"{ms:.0f} ms" if ms >= 100 else f"{ms:.3g} ms"


def screen(kinds: Sequence[Kind], pieces: Pieces, fp32: Graph, ref, timing,
           deadline: Deadline | None = None) -> tuple[list[Kind], list[Fitted], list[str]]:
    """The kinds of ``kinds`` worth fitting, those dropped (each a :class:`Fitted` with nothing
    reduced and the note that says why) and the notes (see the module docstring). ``fp32``: the
    exact pick as saved; ``ref``: the source's reference (its data, its timings); ``timing``:
    ``(measure, executor)``, the run's timing function (:data:`~gspo.search.strategies.Measure`)
    and the fit's executor (``None``: :func:`~gspo.precision.search.cpu_executor`)."""
    measure, executor = timing
    screened = [k for k in kinds if k.backend != _TORCH]
    if not screened:
        return list(kinds), [], []
    need = screen_seconds(screened, ref)
    if deadline is not None and deadline.limited and need > SCREEN_SHARE * deadline.remaining():
        return list(kinds), [], [f"kinds not screened: timing each with every piece reduced beside fp32 would take "
                                 f"about {need:.1f} s, more than {SCREEN_SHARE:.0%} of the time left "
                                 f"({deadline.remaining():.1f} s): each is fitted"]
    sample = (ref.data.calibration or ref.data.validation)[0]
    make = executor or cpu_executor
    try:
        base = make(fp32)
    except GspoError as e:
        return list(kinds), [], [f"kinds not screened: the exact pick cannot be run: {e}"]
    dropped: dict[str, Fitted] = {}
    try:
        for kind in screened:
            why = _screened(kind, pieces, (base, sample, make, measure))
            if why is not None:
                dropped[kind.name] = Fitted(kind, None, note=why)
    finally:
        base.close()
    return [k for k in kinds if k.name not in dropped], list(dropped.values()), []


def _screened(kind: Kind, pieces: Pieces, run) -> str | None:
    """Why ``kind`` is dropped, once built with every piece it touches reduced and timed beside the
    exact pick (``run``: its executor, the sample, how to make an executor, the timing function);
    ``None``: fit it."""
    base, sample, make, measure = run
    reduced = pieces.union(i for i, ops in enumerate(pieces.ops) if kind.touches(ops))
    try:
        built = make(kind.build(reduced))
    except Exception as e:  # noqa: BLE001 - a build or session the runtime refuses: the fit's would fail too
        return f"not fitted: with every piece reduced it cannot be built here: {first_line(e)}"
    try:
        fp32, mine = measure([(FP32_LABEL, lambda: base.run(sample)), (screen_label(kind.name),
                                                                     lambda: built.run(sample))],
                             SCREEN_ROUNDS, SCREEN_WARMUP)
    except Exception as e:  # noqa: BLE001 - a run the runtime refuses
        return f"not fitted: with every piece reduced it cannot run here: {first_line(e)}"
    finally:
        built.close()
    if mine.median < (1 - SCREEN_MARGIN) * fp32.median:
        return None
    return f"not fitted: with every piece reduced it ran {_ms(mine.median)} against {_ms(fp32.median)} for fp32 (not faster)"
