"""``optimize(precision=..., max_error=...)`` end to end: the budget holds or fp32 stays, and the
report says which pieces went back and why."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from gspo import ir
from gspo.errors import GspoError
from gspo.precision.accuracy import ErrorBudget, measure
from gspo.precision.screen import screen_label
from gspo.precision.search import outputs_of
from gspo.precision.variants import plain
from gspo.runtime.inputs import random_inputs
from gspo.runtime.npz import write_npz
from gspo.search import optimize
from gspo.search.strategies import Strategies
from tests.helpers import branchy
from tests.search.fakes import ScriptedTimings

OPTIONS = {"time_budget": 40, "backends": ("ort",), "jobs": 1}
#: A script in which static int8 with every piece reduced is faster than fp32 (the screen lets it be fitted).
SCREENED = {screen_label("int8 on onnxruntime"): (0.5,)}


@pytest.fixture(scope="module")
def model():
    return branchy(channels=8, size=8)


def folder(path, graph, seeds):
    path.mkdir()
    for s in seeds:
        with open(path / f"{s}.npz", "wb") as f:
            write_npz(f, random_inputs(graph, seed=s))
    return str(path)


def test_without_precision_the_report_has_no_precision_block(model):
    assert optimize(model, **OPTIONS).report["precision"] is None


def test_a_budget_int8_cannot_hold_keeps_fp32_and_says_which_pieces_went_back(model, tmp_path):
    cal, val = folder(tmp_path / "cal", model, range(4)), folder(tmp_path / "val", model, range(10, 14))
    # The fp32 search measured with a script and held by a count, not the clock: two searches
    # timed for real on a busy machine may choose different rewrites.
    # int8 scripted faster with every piece reduced, so that the screen lets its fit run
    exact = {**OPTIONS, "time_budget": None, "strategies": Strategies(measure=ScriptedTimings(SCREENED))}
    fp32 = optimize(model, **exact)
    result = optimize(model, precision="int8", max_error="nmse=1e-14", calibration=cal, validation=val, **exact)
    block = result.report["precision"]
    assert block["chosen"] == "fp32" and block["speedup_over_fp32"] == 1.0
    assert block["warnings"] == [] and block["data"]["validation"].startswith("user")
    static = next(k for k in block["kinds"] if k["kind"] == "int8 on onnxruntime")
    assert static["dropped"] == "every piece went back to fp32 to hold the budget"
    assert static["pieces_reduced"] == []
    assert all(why.startswith("back to fp32: the calibration data broke the budget") or why.startswith("nothing")
               for why in static["pieces"].values())
    assert any(why.startswith("back to fp32") for why in static["pieces"].values())
    assert result.placement == fp32.placement and result.graph.key == fp32.graph.key
    from gspo.precision.report import PrecisionReport
    from gspo.search.report import Report

    assert isinstance(result.report.precision, PrecisionReport)  # a record; its JSON as above
    assert Report.from_json(json.loads(json.dumps(result.report.to_json()))) == result.report


def test_random_data_warns_and_the_report_records_it(model):
    block = optimize(model, precision="int8", max_error="nmse=1e-14", **OPTIONS).report["precision"]
    assert any("random inputs say little about accuracy" in w for w in block["warnings"])
    assert block["data"]["calibration"].startswith("random") and block["data"]["validation"].startswith("random")


def test_the_validation_data_must_not_be_the_calibration_data(model, tmp_path):
    cal = folder(tmp_path / "cal", model, range(3))
    with pytest.raises(GspoError, match="validation data must not be the calibration data"):
        optimize(model, precision="int8", max_error="nmse=1e-3", calibration=cal, validation=cal, **OPTIONS)


def test_whatever_a_loose_budget_picks_holds_it_on_the_validation_data(model, tmp_path):
    cal, val = folder(tmp_path / "cal", model, range(4)), folder(tmp_path / "val", model, range(10, 14))
    budget = "nmse=1e-2"
    result = optimize(model, precision="bf16,int8", max_error=budget, calibration=cal, validation=val, **OPTIONS,
                      strategies=Strategies(measure=ScriptedTimings(SCREENED)))  # int8 passes the screen
    block = result.report["precision"]
    samples = [random_inputs(model, seed=s) for s in range(10, 14)]
    out = result.save(tmp_path / "o.onnx")
    saved = ir.load(out)
    accuracy = measure(outputs_of(plain(model), samples), outputs_of(saved, samples), ErrorBudget.parse(budget))
    assert accuracy.holds  # measured again here, on the saved file, as users will run it
    # each kind's expected cost, stated before its fit: judgments x seconds each, in its share
    stated = [n for n in block["notes"] if n.startswith("int8 on onnxruntime: about ")]
    assert len(stated) == 1 and " judgments " in stated[0] and re.search(r"in its [0-9.]+ m?s share", stated[0])
    for k in block["kinds"]:
        assert (k["dropped"] is None) == bool(k["pieces_reduced"])
        if k["validation"] is not None:
            assert k["validation"]["holds"]
    if block["chosen"] != "fp32":
        assert block["speedup_over_fp32"] > 1.0
        assert np.isfinite(block["fp32_median_ms"])


def _bf16_here():
    from gspo.runtime.backends import backend_status

    ok, why = backend_status("openvino:bf16")
    if not ok:
        pytest.skip(f"bf16 on OpenVINO cannot run here: {why}")


def test_int8_with_the_rest_at_bf16_starts_from_the_fit_of_bf16():
    from gspo.ir import load_bytes
    from gspo.precision.search import Fitted, Pieces
    from gspo.precision.stage import on_bf16_fit, skipped_for_bf16
    from gspo.precision.variants import Kind, with_placement
    from gspo.streams import Placement
    from tests.precision.test_search import chain

    graph, built = load_bytes(chain()), []

    def build(reduced):  # the QDQ model placed whole on OpenVINO at bf16, as openvino_static builds it
        built.append(reduced)
        return with_placement(graph, Placement.whole(graph, "openvino:bf16"))

    def kind(name, precision, rest="fp32"):
        return Kind(name, precision, "openvino", lambda ops: True, build, rest)

    bf16, mixed, plain_int8 = kind("bf16", "bf16"), kind("int8, the rest at bf16", "int8", "bf16"), kind("int8", "int8")
    pieces = Pieces((frozenset({"m0", "r0"}), frozenset({"m1", "r1"}), frozenset({"y"})))
    whole = Fitted(bf16, (0, 1, 2), pieces={0: "reduced", 1: "reduced", 2: "reduced"})
    part = Fitted(bf16, (1, 2), pieces={0: "back to fp32: the calibration data broke the budget (y: nmse 2e-3 > 1e-3)",
                                        1: "reduced", 2: "reduced"})
    dropped = Fitted(bf16, None, note="every piece went back to fp32 to hold the budget")
    for fitted in ([whole], [part]):
        assert skipped_for_bf16(mixed, fitted) is None
    for fitted in ([dropped], []):
        assert skipped_for_bf16(mixed, fitted).startswith("not fitted: bf16 on openvino does not hold the budget")
    assert skipped_for_bf16(plain_int8, [dropped]) is None
    assert on_bf16_fit(mixed, pieces, [whole]) == (mixed, None)
    assert on_bf16_fit(plain_int8, pieces, [part]) == (plain_int8, None)
    kept, pinned = on_bf16_fit(mixed, pieces, [part])
    assert pinned == {0: "kept at fp32, where the fit of bf16 on openvino sent it: the calibration data broke the "
                         "budget (y: nmse 2e-3 > 1e-3)"}
    g = kept.build(frozenset({"m0", "r0", "y"}))
    assert built[-1] == {"y"}  # the piece kept at fp32 is never quantized
    where = Placement.from_json(g.extras.placement).backend_of()
    assert {op for op, b in where.items() if b == "openvino"} == {"m0", "r0"}
    assert {op for op, b in where.items() if b == "openvino:bf16"} == {"m1", "r1", "y"}


def test_with_bf16_and_int8_the_kinds_at_bf16_are_fitted_or_say_why_not(model, tmp_path):
    _bf16_here()
    cal, val = folder(tmp_path / "cal", model, range(4)), folder(tmp_path / "val", model, range(10, 14))
    # the screen scripted: bf16 and the two kinds at bf16 faster than fp32 with every piece
    # reduced (the three fitted), every other kind as fast as fp32 (dropped before its fit)
    rest = ("int8 on openvino, the rest at bf16", "int8 on openvino, Conv/MatMul/Gemm only, the rest at bf16")
    script = {screen_label("bf16 on openvino"): (0.5,), **{screen_label(name): (0.3,) for name in rest}}
    options = dict(OPTIONS, backends=("ort", "openvino"), strategies=Strategies(measure=ScriptedTimings(script)))
    for budget, fitted in (("nmse=1e-14", False), ("nmse=1e-2", True)):
        block = optimize(model, precision="bf16,int8", max_error=budget, calibration=cal, validation=val,
                         **options).report["precision"]
        at_bf16 = [k for k in block["kinds"] if k["kind"].endswith("the rest at bf16")]
        assert len(at_bf16) == 2 and all(k["backend"] == "openvino:bf16" for k in at_bf16)
        bf16 = next(k for k in block["kinds"] if k["kind"] == "bf16 on openvino")
        assert (bf16["pieces_reduced"] == list(range(block["pieces"]))) == fitted
        for k in at_bf16:
            not_fitted = (k["dropped"] or "").startswith("not fitted: bf16 on openvino does not hold the budget")
            assert not_fitted != fitted
            assert all(not why.startswith("back to fp32") for why in k["pieces"].values())  # back to bf16
            if k["validation"] is not None:
                assert k["validation"]["holds"]


def test_a_top_k_limit_the_data_is_too_small_to_tolerate_is_a_warning():
    from gspo.precision.stage import coarse_limits

    def outs(n, shape):
        return [{"logits": np.zeros(shape, np.float32), "mask": np.zeros((1, 4, 4), np.float32)} for _ in range(n)]

    reference = {"calibration": outs(8, (1, 10)), "validation": outs(16, (1, 10))}
    said = coarse_limits(ErrorBudget.parse("logits:top1=0.99,nmse=1e-3"), reference)
    assert said == ["logits: top1=0.99 on 8 calibration and 16 validation rows allows no row to change its top "
                    "class; 100 rows would allow one"]
    assert coarse_limits(ErrorBudget.parse("logits:top1=0.9"), reference)[0].endswith("10 rows would allow one")
    assert coarse_limits(ErrorBudget.parse("logits:top1=0.8"), reference) == []  # 8 rows allow one change
    # a sequence's rows count: 16 samples of 128 rows each allow 20 changes at 0.99
    seq = {"calibration": outs(8, (1, 128, 10)), "validation": outs(16, (1, 128, 10))}
    assert coarse_limits(ErrorBudget.parse("logits:top1=0.99"), seq) == []


def test_nan_in_a_validation_sample_is_blamed_on_the_data_and_the_sample_left_out(model, tmp_path):
    cal, val = folder(tmp_path / "cal", model, range(4)), folder(tmp_path / "val", model, range(10, 14))
    sample = random_inputs(model, seed=11)
    sample["x"].flat[:5] = np.nan
    with open(tmp_path / "val" / "11.npz", "wb") as f:
        write_npz(f, sample)
    block = optimize(model, precision="int8", max_error="nmse=1e-2", calibration=cal, validation=val,
                     **OPTIONS, strategies=Strategies(measure=ScriptedTimings(SCREENED))).report["precision"]
    said = [w for w in block["warnings"] if "has NaN" in w]
    assert len(said) == 1 and said[0].startswith("validation sample ") and "11.npz has NaN in 5 of" in said[0]
    assert "of input 'x'" in said[0] and "fix or remove it" in said[0]
    assert all(k["validation"] is None or k["validation"]["samples"] == 3 for k in block["kinds"])
    assert any(k["pieces_reduced"] for k in block["kinds"])  # the pieces are not blamed


def test_a_stage_the_time_budget_cannot_begin_is_skipped_and_logged(model):
    from tests.search.fakes import FakeClock

    # every read of the clock takes a second: the exact search spends the budget before the stage
    tools = Strategies(measure=ScriptedTimings(), clock=FakeClock(tick=1.0))
    result = optimize(model, precision="int8", max_error="nmse=1e-3", **{**OPTIONS, "time_budget": 5},
                      strategies=tools)
    block = result.report["precision"]
    assert block["chosen"] == "fp32" and block["kinds"] == []
    assert block["notes"] == ["not searched: the time budget ended before it began: kept fp32"]
    assert result.report["skipped"][-1] == {"stage": "precision", "what": "the reduced-precision search",
                                            "why": "the time budget ended before it began"}
    from gspo.search.report import Report

    assert Report.from_json(json.loads(json.dumps(result.report.to_json()))) == result.report


def test_the_source_session_the_budget_cannot_hold_skips_the_stage(model, monkeypatch):
    import gspo.precision.reference as reference_module
    from gspo.precision.samples import precision_data
    from gspo.precision.stage import _reference
    from gspo.timing.deadline import Deadline
    from tests.search.fakes import FakeClock

    monkeypatch.setattr(reference_module, "SESSION_S_PER_BYTE", 1.0)  # a second a byte of weights
    skips = []
    why = _reference(plain(model), precision_data(model, None, None), Deadline.after(60.0, FakeClock(now=0.0)), skips)
    assert why.startswith("the time budget cannot hold building the source model's session for the reference outputs")
    assert "60.0 s left" in why


def test_the_first_timing_is_cut_to_the_rounds_the_budget_holds_or_skipped():
    from types import SimpleNamespace

    from gspo.precision.stage import MIN_TIMING_RUNS, timing_runs, timing_seconds

    ref = SimpleNamespace(session_s=1.0, sample_s=0.1)
    # 3 runners: 3 sessions and (runs + 3) rounds of 3 runs
    assert timing_seconds(3, 20, ref) == pytest.approx(3.0 + 23 * 0.3)
    assert timing_runs(3, ref, 100.0) == 20  # all the rounds
    assert timing_runs(3, ref, 8.0) == 13  # 3 + 16 * 0.3 = 7.8 s
    assert timing_runs(3, ref, 5.99) is None and timing_runs(3, ref, 6.01) == MIN_TIMING_RUNS == 7  # 3 + 10 * 0.3


def test_a_kind_quantized_once_pays_the_quantization_in_its_first_judgment_only():
    """Static int8 (quantized once) and NNCF: the quantization in the first judgment's cost, not in
    every judgment's; dynamic int8 quantizes at every build."""
    import dataclasses
    from types import SimpleNamespace

    from gspo.precision.kind import Kind
    from gspo.precision.nncf_int8 import NNCF_S
    from gspo.precision.reference import PROBE_S, QUANTIZE_S_PER_BYTE, Reference, weight_bytes
    from gspo.precision.stage import _cost, _first_cost, _once

    g = branchy(channels=8, size=8)
    data = SimpleNamespace(calibration=[{}] * 8, validation=[{}] * 8)
    ref = Reference(data, {}, session_s=0.5, sample_s=0.1)
    quantize = QUANTIZE_S_PER_BYTE * weight_bytes(g)

    def costed(backend="ort", first=""):
        k = Kind("k", "int8", backend, lambda ops: True, lambda r: g, first=first)
        return dataclasses.replace(k, cost=_cost(k, g, ref), once=_once(k, g, ref))

    static, dynamic, nncf = costed(first="quantize"), costed(), costed("openvino", "nncf")
    assert static.cost == pytest.approx(ref.judgment_s(0.0)) and static.once == pytest.approx(quantize)
    assert _first_cost(static) == pytest.approx(ref.judgment_s(quantize))
    assert dynamic.cost == pytest.approx(ref.judgment_s(quantize)) and _first_cost(dynamic) == dynamic.cost
    assert nncf.once >= NNCF_S + 2 * 8 * ref.sample_s and _first_cost(nncf) == pytest.approx(nncf.cost + nncf.once + PROBE_S)
