"""The kinds in the CPU's order (flags injected), and the screen that drops, before any fit, a
kind not faster than fp32 with every piece reduced (a scripted measure, a fake clock)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.ir.builder import GraphBuilder
from gspo.precision import screen as screen_module
from gspo.precision.accuracy import ErrorBudget
from gspo.precision.kind import Kind
from gspo.precision.screen import (
    FP32_LABEL,
    MAX_FITTED,
    SCREEN_ROUNDS,
    SCREEN_SHARE,
    SCREEN_WARMUP,
    order,
    screen,
    screen_label,
)
from gspo.precision.search import Pieces
from gspo.runtime import Timing, random_inputs
from gspo.timing.deadline import Deadline
from tests.search.fakes import FakeClock

AVX2 = frozenset({"sse4_2", "avx2", "fma"})
VNNI = AVX2 | {"avx512f", "avx512_vnni"}


def _kind(name: str, precision: str = "int8", backend: str = "ort", build=None, rest: str = "fp32") -> Kind:
    return Kind(name, precision, backend, lambda ops: bool(ops), build or (lambda reduced: _model()), rest)


KINDS = [_kind("bf16 on openvino", "bf16", "openvino:bf16"), _kind("int8 on onnxruntime"),
         _kind("int8 on openvino", backend="openvino"), _kind("int8-dynamic on onnxruntime"),
         _kind("int8 weights on onnxruntime"), _kind("int8 (NNCF) on openvino", backend="openvino"),
         _kind("int8 on openvino, the rest at bf16", backend="openvino:bf16", rest="bf16")]


def _names(kinds) -> list[str]:
    return [k.name for k in kinds]


def test_with_vnni_weight_only_then_static_int8_on_openvino_nncf_first_of_them():
    found, notes = order(KINDS, VNNI)
    assert _names(found) == ["bf16 on openvino", "int8 weights on onnxruntime", "int8 (NNCF) on openvino",
                             "int8 on openvino", "int8 on openvino, the rest at bf16", "int8 on onnxruntime",
                             "int8-dynamic on onnxruntime"]
    assert len(notes) == 1 and "it has VNNI (avx512_vnni)" in notes[0]


def test_without_vnni_weight_only_and_dynamic_come_first_static_after():
    found, notes = order(KINDS, AVX2)
    assert _names(found) == ["bf16 on openvino", "int8 weights on onnxruntime", "int8-dynamic on onnxruntime",
                             "int8 (NNCF) on openvino", "int8 on openvino", "int8 on openvino, the rest at bf16",
                             "int8 on onnxruntime"]
    assert len(notes) == 1 and "it has no VNNI" in notes[0] and "saturate" in notes[0]


def test_one_family_needs_no_order_note():
    assert order([_kind("bf16 on openvino", "bf16", "openvino:bf16"), _kind("int8 on onnxruntime")], AVX2)[1] == []


def _model() -> Graph:
    b = GraphBuilder("mm", seed=2)
    x = b.input("x", (1, 8))
    return b.output(b.op("Relu", [b.op("MatMul", [x, b.weight("w", (8, 8))])], out="y")).build()


class _Measure:
    """A scripted timing function: each label's seconds per round (fp32: 0.2 s), what it was asked."""

    def __init__(self, seconds: dict[str, float]):
        self.seconds, self.calls = seconds, []

    def __call__(self, calls, runs: int, warmup: int = 3) -> list[Timing]:
        self.calls.append(([label for label, _ in calls], runs, warmup))
        for _, fn in calls:
            fn()  # the executors run, as the real timing's would
        return [Timing(label, (self.seconds.get(label, 0.2),) * runs) for label, _ in calls]


def _ref(session_s: float = 0.01, sample_s: float = 0.001):
    g = _model()
    data = SimpleNamespace(calibration=[random_inputs(g, seed=0)], validation=[random_inputs(g, seed=1)])
    return SimpleNamespace(data=data, session_s=session_s, sample_s=sample_s)


def _screen(kinds, measure, deadline=None, ref=None):
    g = _model()
    return screen(kinds, Pieces.of(g, 8), g, ref or _ref(), (measure, None), deadline)


def test_the_slower_kind_is_dropped_with_its_timing_and_the_faster_kept():
    fast, slow = _kind("int8 weights on onnxruntime"), _kind("int8-dynamic on onnxruntime")
    measure = _Measure({screen_label(fast.name): 0.1, screen_label(slow.name): 0.231, FP32_LABEL: 0.214})
    kept, dropped, notes = _screen([fast, slow], measure)
    assert _names(kept) == [fast.name]
    assert notes == [f"{fast.name}: with every piece reduced 100 ms against 214 ms for fp32"]  # no budget: not judged
    assert [(f.kind.name, f.reduced) for f in dropped] == [(slow.name, None)]
    assert dropped[0].note == "not fitted: with every piece reduced it ran 231 ms against 214 ms for fp32 (not faster)"
    assert measure.calls == [([FP32_LABEL, screen_label(k.name)], SCREEN_ROUNDS, SCREEN_WARMUP) for k in (fast, slow)]


def test_a_kind_as_fast_as_fp32_is_not_faster():
    same = _kind("int8 on onnxruntime")
    kept, dropped, _ = _screen([same], _Measure({screen_label(same.name): 0.199, FP32_LABEL: 0.2}))
    assert kept == [] and dropped[0].note.endswith("ran 199 ms against 200 ms for fp32 (not faster)")


def test_a_kind_that_cannot_be_built_is_dropped_with_the_reason():
    def refuse(reduced):
        raise GspoError("OpenVINO cannot compile the model: no")

    bad = _kind("int8 weights on openvino", backend="openvino", build=refuse)
    kept, dropped, _ = _screen([bad], _Measure({}))
    assert kept == [] and dropped[0].note == ("not fitted: with every piece reduced it cannot be built here: "
                                              "OpenVINO cannot compile the model: no")


def test_every_touched_piece_is_reduced_in_the_screened_build():
    seen = []
    kind = _kind("int8 on onnxruntime", build=lambda reduced: seen.append(reduced) or _model())
    _screen([kind], _Measure({screen_label(kind.name): 0.1}))
    g = _model()
    assert seen == [Pieces.of(g, 8).union(range(len(Pieces.of(g, 8).ops)))]


def test_kinds_are_screened_in_order_while_none_passed_then_only_within_the_screens_share():
    kinds = [_kind("int8 on onnxruntime"), _kind("int8-dynamic on onnxruntime"), _kind("int8 weights on onnxruntime")]
    ref = _ref(session_s=1.0, sample_s=0.1)
    need = [screen_module._one_s(k, ref) for k in kinds]
    limit = 1.05 * max(need)  # holds any one screen; its share (the clock does not move) no other
    assert SCREEN_SHARE * limit < min(need)
    # the first kinds are screened all the same while none has passed (the first two are as slow
    # as fp32), then the third is
    slow = {FP32_LABEL: 0.2, screen_label(kinds[2].name): 0.1}
    clock = FakeClock()
    measure = _Measure(slow)
    kept, dropped, _ = _screen(kinds, measure, Deadline.after(limit, clock), ref)
    assert _names(kept) == [kinds[2].name] and len(measure.calls) == 3
    # once a kind passed, the next is screened only within the share
    fast = {FP32_LABEL: 0.2, screen_label(kinds[0].name): 0.1, screen_label(kinds[1].name): 0.05}
    measure = _Measure(fast)
    kept, dropped, _ = _screen(kinds, measure, Deadline.after(limit, clock), ref)
    assert _names(kept) == [kinds[0].name] and len(measure.calls) == 1
    assert [f.kind.name for f in dropped] == _names(kinds[1:])
    assert dropped[0].note.startswith("not fitted: a kind passed the screen within the budget on its samples, and the "
                                      "screen's share cannot hold")
    # with time enough, both faster kinds are kept, the fastest first
    measure = _Measure(fast)
    kept, dropped, _ = _screen(kinds, measure, Deadline.after(100 * limit, clock), ref)
    assert _names(kept) == [kinds[1].name, kinds[0].name] and [f.kind.name for f in dropped] == [kinds[2].name]


def test_a_kind_whose_screen_and_fit_the_time_cannot_hold_is_not_screened():
    kind = dataclasses.replace(_kind("int8 (NNCF) on openvino", backend="openvino"), once=50.0, cost=2.0)
    ref = _ref(session_s=1.0, sample_s=0.1)
    measure = _Measure({screen_label(kind.name): 0.1})
    kept, dropped, _ = _screen([kind], measure, Deadline.after(40.0, FakeClock()), ref)
    assert kept == [] and measure.calls == []
    assert dropped[0].note.startswith("not fitted: the time budget cannot hold timing it with every piece reduced and "
                                      "fitting it (about 61.2 s; 40.0 s left)")


def test_at_most_max_fitted_kinds_go_on_to_be_fitted_the_fastest():
    kinds = [_kind(f"int8 kind {i}") for i in range(MAX_FITTED + 2)]
    seconds = {FP32_LABEL: 1.0, **{screen_label(k.name): 0.5 - 0.01 * i for i, k in enumerate(kinds)}}
    kept, dropped, _ = _screen(kinds, _Measure(seconds))
    assert _names(kept) == _names(kinds[::-1][:MAX_FITTED])
    assert _names(f.kind for f in dropped) == _names(kinds[:2])
    assert all(f.note.startswith(f"not fitted: {MAX_FITTED} kinds came first from the screen") for f in dropped)


def _other_model() -> Graph:
    """The shape of :func:`_model` with other weights: far from its outputs."""
    b = GraphBuilder("mm", seed=7)
    x = b.input("x", (1, 8))
    return b.output(b.op("Relu", [b.op("MatMul", [x, b.weight("w", (8, 8))])], out="y")).build()


def _judged_ref(session_s: float = 0.01, sample_s: float = 0.001):
    """:func:`_ref` with the source's outputs on its samples, so that the screen judges the error."""
    from gspo.precision.search import outputs_of

    ref = _ref(session_s, sample_s)
    ref.outputs = {which: outputs_of(_model(), getattr(ref.data, which)) for which in ("calibration", "validation")}
    return ref


def _judged_screen(kinds, measure, deadline=None, ref=None):
    g = _model()
    return screen(kinds, Pieces.of(g, 8), g, ref or _judged_ref(), (measure, None), deadline, ErrorBudget.parse("nmse=1e-3"))


def test_a_kind_within_the_budget_on_the_sample_is_fitted_before_faster_kinds_that_break_it():
    breaks = _kind("int8 on openvino", backend="openvino", build=lambda reduced: _other_model())
    fastest = _kind("int8 (NNCF) on openvino", backend="openvino", build=lambda reduced: _other_model())
    holds = _kind("int8 weights on openvino", backend="openvino")  # its build: the source's own computation
    seconds = {FP32_LABEL: 1.0, screen_label(fastest.name): 0.3, screen_label(breaks.name): 0.4,
               screen_label(holds.name): 0.6}
    kept, dropped, notes = _judged_screen([fastest, breaks, holds], _Measure(seconds))
    assert _names(kept) == [holds.name, fastest.name, breaks.name] and dropped == []
    assert notes[2] == f"{holds.name}: with every piece reduced 600 ms against 1000 ms for fp32, within the budget on 1 sample"
    assert "times the budget on 1 sample" in notes[0] and notes[0].startswith(fastest.name)


def test_a_kind_that_passed_breaking_the_budget_does_not_stop_the_screen_one_within_it_does():
    ref = _judged_ref()
    breaks = _kind("int8 (NNCF) on openvino", backend="openvino", build=lambda reduced: _other_model())
    holds = _kind("int8 weights on openvino", backend="openvino")
    after = _kind("int8 on openvino, Conv/MatMul/Gemm only", backend="openvino")
    need = max(screen_module._one_s(k, ref) for k in (breaks, holds, after))
    limit = 1.05 * need  # holds any one screen; its share (the clock does not move) no other
    assert SCREEN_SHARE * limit < need
    seconds = {FP32_LABEL: 1.0, screen_label(breaks.name): 0.3, screen_label(holds.name): 0.6,
               screen_label(after.name): 0.5}
    measure = _Measure(seconds)
    kept, dropped, _ = _judged_screen([breaks, holds, after], measure, Deadline.after(100 * limit, FakeClock()), ref)
    assert len(measure.calls) == 3  # time for all: all screened
    measure = _Measure(seconds)
    kept, dropped, _ = _judged_screen([breaks, holds, after], measure, Deadline.after(limit, FakeClock()), ref)
    assert [c[0][1] for c in measure.calls] == [screen_label(breaks.name), screen_label(holds.name)]
    assert _names(kept) == [holds.name, breaks.name]
    assert _names(f.kind for f in dropped) == [after.name]
    assert dropped[0].note.startswith("not fitted: a kind passed the screen within the budget on its samples, and the "
                                      "screen's share cannot hold")


def test_a_bf16_kind_is_fitted_before_the_kinds_whose_rest_runs_at_bf16():
    bf16 = _kind("bf16 on openvino", "bf16", "openvino:bf16")
    rest = _kind("int8 on openvino, the rest at bf16", backend="openvino:bf16", rest="bf16")
    kept, _, _ = _screen([bf16, rest], _Measure({FP32_LABEL: 1.0, screen_label(bf16.name): 0.6,
                                                 screen_label(rest.name): 0.3}))
    assert _names(kept) == [bf16.name, rest.name]


def test_the_torch_runtimes_kinds_are_not_screened():
    kinds = [_kind("fp16 on torch", "fp16", "torch")]
    measure = _Measure({})
    assert _screen(kinds, measure) == (kinds, [], []) and measure.calls == []


def test_optimize_reports_the_kind_the_screen_dropped_and_fits_the_other(tmp_path):
    from gspo.search import optimize
    from gspo.search.strategies import Strategies
    from tests.helpers import branchy
    from tests.precision.test_stage import folder
    from tests.search.fakes import ScriptedTimings

    model = branchy(channels=8, size=8)
    cal, val = folder(tmp_path / "cal", model, range(4)), folder(tmp_path / "val", model, range(10, 14))
    script = {screen_label("int8 on onnxruntime"): (2.0,), FP32_LABEL: (1.0,)}
    result = optimize(model, precision="int8", max_error="nmse=1e-2", calibration=cal, validation=val,
                      time_budget=None, backends=("ort",), jobs=1, strategies=Strategies(measure=ScriptedTimings(script)))
    block = result.report["precision"]
    static = next(k for k in block["kinds"] if k["kind"] == "int8 on onnxruntime")
    assert static["dropped"] == "not fitted: with every piece reduced it ran 2000 ms against 1000 ms for fp32 (not faster)"
    assert static["pieces_reduced"] == [] and block["chosen"] == "fp32"
