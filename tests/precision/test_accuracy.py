"""The accuracy budget: the spec parser, every metric against values worked out by hand, the
rules for integer outputs, NaN, mismatches, and judging two model files."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from gspo.errors import GspoError
from gspo.precision.accuracy import Accuracy, ErrorBudget, Limit, check_metric_name, judge, measure
from tests.helpers import perturbed_pair

f32 = np.float32


def one(ref: dict, cand: dict, spec: str) -> Accuracy:
    """``measure`` on a single sample."""
    return measure([ref], [cand], ErrorBudget.parse(spec))


# ------------------------------------------------------------------ the spec
@pytest.mark.parametrize("spec, limits", [
    ("nmse=1e-3", [Limit("nmse", 1e-3)]),
    ("cosine=0.999,top1=0.99", [Limit("cosine", 0.999), Limit("top1", 0.99)]),
    ("logits:top5=0.99,boxes:nmse=1e-4", [Limit("top5", 0.99, "logits"), Limit("nmse", 1e-4, "boxes")]),
    (" NMSE = 1e-3 , top100=0.5 ", [Limit("nmse", 1e-3), Limit("top100", 0.5)]),
    ("logits:0:maxrel=0.01", [Limit("maxrel", 0.01, "logits:0")]),  # names with ':' (TF exports)
    ("nmse=1e-3,a:nmse=1e-4", [Limit("nmse", 1e-3), Limit("nmse", 1e-4, "a")]),
    ("rel_l2=0,cosine=-1,top1=1", [Limit("rel_l2", 0.0), Limit("cosine", -1.0), Limit("top1", 1.0)]),
])
def test_parse(spec, limits):
    assert ErrorBudget.parse(spec).limits == tuple(limits)


@pytest.mark.parametrize("spec", ["nmse=1e-3", "cosine=0.999,top1=0.99", "logits:top5=0.99,boxes:nmse=1e-4",
                                  "nmse=0.123456789012,maxrel=1e-05", "a:b:rel_l2=3", "top7=0.3333333333333333"])
def test_str_is_a_canonical_spec_that_parses_back(spec):
    budget = ErrorBudget.parse(spec)
    assert ErrorBudget.parse(str(budget)) == budget
    assert str(ErrorBudget.parse(str(budget))) == str(budget)
    assert str(ErrorBudget.parse("nmse=1e-3, top1 = 0.990")) == "nmse=0.001,top1=0.99"


@pytest.mark.parametrize("spec, expected", [
    ("", "--max-error is empty"),
    ("   ", "--max-error is empty"),
    ("mse=1e-3", "unknown metric 'mse'"),
    ("top0=0.5", "unknown metric 'top0'"),
    ("top101=0.5", "unknown metric 'top101'"),
    ("top05=0.5", "unknown metric 'top05'"),
    ("nmse", "has no '=value'"),
    ("nmse=", "is not a finite number"),
    ("nmse=abc", "'abc' is not a finite number"),
    ("nmse=nan", "is not a finite number"),
    ("cosine=inf", "is not a finite number"),
    ("nmse=-1e-3", "nmse must be at least 0"),
    ("cosine=1.5", "cosine must be in [-1, 1]"),
    ("top1=1.01", "top1 must be in [0, 1]"),
    ("top5=-0.1", "top5 must be in [0, 1]"),
    ("nmse=1e-3,nmse=1e-4", "nmse is given twice for every output"),
    ("a:top1=0.9,a:top1=0.8", "top1 is given twice for output 'a'"),
    ("nmse=1e-3,,top1=1", "an empty item between commas"),
    ("nmse=1e-3,", "an empty item between commas"),
    (":nmse=1e-3", "empty output name"),
    ('"out,1:nmse=1e-2', "a double quote is not closed"),
    ('"out,1"nmse=1e-2', "a quoted output name must be followed by ':'"),
    ('"":nmse=1e-2', "an empty output name"),
])
def test_bad_specs_are_one_line_errors(spec, expected):
    with pytest.raises(GspoError) as e:
        ErrorBudget.parse(spec)
    assert expected in str(e.value) and "\n" not in str(e.value)
    assert str(e.value).endswith("(write [output:]metric=value, e.g. nmse=1e-3, an output name with ',' or '=' "
                                 "in double quotes: \"out,1\":nmse=1e-3; metrics: nmse, rel_l2, maxrel, cosine, "
                                 "top1 ... top100)")


def test_check_metric_name():
    assert check_metric_name("Top17") == "top17"
    with pytest.raises(GspoError, match="metrics: nmse, rel_l2"):
        check_metric_name("l2")


# ---------------------------------------------------------------- the metrics
def test_float_metrics_worked_by_hand():
    acc = one({"y": np.array([[3, 4]], f32)}, {"y": np.array([[3, 5]], f32)}, "rel_l2=1,top1=0")
    m = acc.outputs["y"]
    assert list(m) == ["nmse", "rel_l2", "cosine", "maxrel", "top1"]
    assert m["nmse"] == pytest.approx(1 / 25)                    # |b-a|^2 = 1, |a|^2 = 9 + 16
    assert m["rel_l2"] == pytest.approx(1 / 5)
    assert m["maxrel"] == pytest.approx(1 / 4)                   # max|b-a| = 1, max|a| = 4
    assert m["cosine"] == pytest.approx(29 / (5 * math.sqrt(34)))  # (9 + 20) / (|a| |b|)
    assert m["top1"] == 1.0                                      # class 1 is the top of both
    assert acc.holds and acc.broken == () and acc.samples == 1


def test_metrics_aggregate_over_samples():
    ref = [{"y": np.array([1, 0], f32)}, {"y": np.array([0, 2], f32)}]
    cand = [{"y": np.array([1, 1], f32)}, {"y": np.array([0, 2], f32)}]
    m = measure(ref, cand, ErrorBudget.parse("nmse=1")).outputs["y"]
    assert m["nmse"] == pytest.approx((1 + 0) / (1 + 4))         # sums over samples, then the ratio
    assert m["maxrel"] == pytest.approx(1 / 2)                   # max error 1, max magnitude 2
    assert m["cosine"] == pytest.approx(1 / math.sqrt(2))        # the worse sample's: 1 / (1 * sqrt 2)
    assert "rel_l2" not in m and "top1" not in m                 # only what applies


def test_top_k_agreement_over_rows_and_samples():
    a = np.array([[[0.1, 0.9, 0.0], [0.5, 0.2, 0.3]]], f32)      # rows' top classes: 1, 0
    b = np.array([[[0.9, 0.1, 0.0], [0.5, 0.2, 0.3]]], f32)      # row 0: class 1 second, row 1: first
    c = np.array([[[0.0, 0.1, 0.9], [0.1, 0.2, 0.3]]], f32)      # row 0: class 1 second; row 1: class 0 last
    acc = measure([{"y": a}, {"y": a}], [{"y": b}, {"y": c}], ErrorBudget.parse("y:top1=0,top2=0,top3=0"))
    m = acc.outputs["y"]
    assert m["top1"] == pytest.approx(1 / 4)                     # 4 rows: only sample 0's row 1
    assert m["top2"] == pytest.approx(3 / 4)                     # all but sample 1's row 1
    assert m["top3"] == 1.0                                      # 3 classes: always


def test_zero_reference():
    zeros = {"y": np.zeros(3, f32)}
    same = one(zeros, zeros, "nmse=0,maxrel=0,cosine=1").outputs["y"]
    assert same == {"nmse": 0.0, "cosine": 1.0, "maxrel": 0.0}
    off = one(zeros, {"y": np.array([0, 1, 0], f32)}, "nmse=1").outputs["y"]
    assert off == {"nmse": math.inf, "cosine": 0.0, "maxrel": math.inf}


def test_nan_or_inf_in_the_candidate_fails_every_metric():
    for bad in (np.nan, np.inf, -np.inf):
        acc = one({"y": np.array([1, 2], f32)}, {"y": np.array([1, bad], f32)}, "nmse=1,top1=0,rel_l2=10")
        assert acc.outputs["y"] == {"nmse": math.inf, "rel_l2": math.inf, "cosine": -math.inf,
                                    "maxrel": math.inf, "top1": 0.0}
        assert not acc.holds and acc.excess == math.inf
        assert len(acc.broken) == 3 and all("NaN or infinity where the reference is finite" in b for b in acc.broken)


def test_nan_where_the_reference_has_nan_is_left_out():
    ref, cand = {"y": np.array([np.nan, 2, 4], f32)}, {"y": np.array([np.nan, 2, 5], f32)}
    m = one(ref, cand, "nmse=1").outputs["y"]
    assert m["nmse"] == pytest.approx(1 / 20) and m["maxrel"] == pytest.approx(1 / 4)
    acc = one(ref, {"y": np.array([1, 2, 4], f32)}, "nmse=1")
    assert not acc.holds and "where the reference is NaN or infinite" in acc.broken[0]


def test_a_half_precision_candidate_is_measured():
    m = one({"y": np.array([1, 2], f32)}, {"y": np.array([1, 2.5], np.float16)}, "nmse=1").outputs["y"]
    assert m["nmse"] == pytest.approx(0.25 / 5)


# ------------------------------------------------------------ limits and lines
def test_broken_lines_and_excess():
    ref, cand = {"y": np.array([3, 4], f32)}, {"y": np.array([3, 5], f32)}   # nmse 0.04, cosine 0.99469
    ok = one(ref, cand, "nmse=0.08,cosine=0.98")
    assert ok.holds and ok.excess == pytest.approx(max(0.04 / 0.08, (1 - 29 / (5 * math.sqrt(34))) / 0.02))
    bad = one(ref, cand, "nmse=0.01,cosine=0.999")
    assert not bad.holds
    assert bad.broken == ("y: nmse 4.0e-02 > 0.01", "y: cosine 0.99469 < 0.999")
    assert bad.excess == pytest.approx((1 - 29 / (5 * math.sqrt(34))) / 0.001)  # cosine's 5.3 beats nmse's 4
    assert one(ref, cand, "top1=1").excess <= 1                  # top1 met at a bound of 1
    assert one(ref, {"y": np.array([5, 4], f32)}, "top1=1").excess == math.inf


def test_a_broken_line_shows_enough_digits():
    ref, cand = {"y": np.array([1.0], f32)}, {"y": np.array([1.0 + 1.04e-2], np.float64)}
    line = one(ref, {"y": cand["y"].astype(f32)}, "maxrel=0.0104").broken[0]
    value = float(line.split()[2])
    assert value > 0.0104 and line.endswith("> 0.0104")          # not "1.0e-02 > 0.0104"


def test_a_named_limit_applies_to_its_output_only():
    ref = {"a": np.array([3, 4], f32), "b": np.array([3, 4], f32)}
    cand = {"a": np.array([3, 5], f32), "b": np.array([3, 5], f32)}
    acc = one(ref, cand, "nmse=1,a:nmse=0.01,a:top1=1")
    assert acc.broken == ("a: nmse 4.0e-02 > 0.01",)
    assert "top1" in acc.outputs["a"] and "top1" not in acc.outputs["b"]


def test_budget_that_does_not_fit_the_outputs():
    ref = {"logits": np.array([1, 2], f32), "label": np.array([1], np.int64)}
    with pytest.raises(GspoError, match=r"names output\(s\) 'boxes' .*its outputs: 'logits', 'label'"):
        one(ref, ref, "boxes:nmse=1")
    with pytest.raises(GspoError, match="'label' is int64, not floating-point: only top1"):
        one(ref, ref, "nmse=1,label:nmse=1")
    with pytest.raises(GspoError, match="no limit for the output.* 'logits'"):
        one(ref, ref, "label:top1=1")


# ----------------------------------------------------------- integer outputs
def test_integer_outputs_must_be_equal_without_a_limit():
    ref = {"y": np.array([1.0], f32), "label": np.array([1, 2, 3, 4], np.int64)}
    same = one(ref, dict(ref), "nmse=1,cosine=0.5")
    assert same.holds and same.outputs["label"] == {"exact": 1.0}
    acc = one(ref, {**ref, "label": np.array([1, 2, 3, 0], np.int64)}, "nmse=1,cosine=0.5")
    assert not acc.holds and acc.outputs["label"] == {"exact": 0.0} and acc.excess == math.inf
    assert len(acc.broken) == 1 and acc.broken[0].startswith("label: differs from the reference")
    flags = {"m": np.array([True, False])}
    assert not one(flags, {"m": np.array([True, True])}, "nmse=1").holds


def test_top1_is_element_agreement_on_integer_outputs():
    ref = {"label": np.array([[1, 2], [3, 4]], np.int64)}
    cand = {"label": np.array([[1, 2], [0, 0]], np.int64)}
    assert one(ref, cand, "top1=0.5").outputs["label"] == {"top1": 0.5}
    assert one(ref, cand, "top1=0.5").holds
    assert one(ref, cand, "label:top1=0.75").broken == ("label: top1 0.500 < 0.75",)


def test_mismatches_fail_with_a_reason():
    ref = {"y": np.zeros((2, 3), f32)}
    acc = one(ref, {"y": np.zeros((3, 2), f32)}, "nmse=1")
    assert not acc.holds and "shape [3, 2] instead of [2, 3]" in acc.broken[0]
    acc = one(ref, {"y": np.zeros((2, 3), np.int32)}, "nmse=1")
    assert not acc.holds and "type int32 instead of float32" in acc.broken[0]
    acc = one({"k": np.zeros(2, np.int64)}, {"k": np.zeros(3, np.int64)}, "nmse=1")
    assert not acc.holds and "shape [3] instead of [2]" in acc.broken[0]


def test_measure_refuses_what_cannot_be_compared():
    y = {"y": np.ones(2, f32)}
    budget = ErrorBudget.parse("nmse=1")
    with pytest.raises(GspoError, match="no samples"):
        measure([], [], budget)
    with pytest.raises(GspoError, match="1 reference samples but 2"):
        measure([y], [y, y], budget)
    with pytest.raises(GspoError, match="different outputs"):
        measure([y], [{"z": y["y"]}], budget)


def test_to_json_is_strict_json():
    acc = one({"y": np.array([1, 2], f32)}, {"y": np.array([1, np.nan], f32)}, "nmse=1")
    data = json.loads(json.dumps(acc.to_json(), allow_nan=False))
    assert data["holds"] is False and data["excess"] == "inf" and data["samples"] == 1
    assert data["outputs"]["y"] == {"nmse": "inf", "cosine": "-inf", "maxrel": "inf"}
    assert data["broken"] == list(acc.broken)


def test_lines():
    ref = {"logits": np.array([[3, 4]], f32), "label": np.array([1], np.int64)}
    acc = one(ref, {**ref, "logits": np.array([[3, 5]], f32)}, "nmse=1,top1=0.5")
    assert acc.lines() == ["logits  nmse 4.0e-02  cosine 0.99469  maxrel 2.5e-01  top1 1.000",
                           "label   top1 1.000"]


# --------------------------------------------------------------- two models
def test_judge_runs_two_model_files(tmp_path):
    a, b, g = perturbed_pair(tmp_path)
    samples = [{"x": np.random.default_rng(i).standard_normal((1, 4, 8, 8)).astype(f32)} for i in range(2)]
    same = judge(str(a), str(a), ErrorBudget.parse("nmse=0,maxrel=0"), samples)
    assert same.holds and same.samples == 2 and same.outputs[g.outputs[0].name]["nmse"] == 0.0
    close = judge(str(a), str(b), ErrorBudget.parse("nmse=1e-3"), samples)
    assert close.holds and 0 < close.outputs[g.outputs[0].name]["nmse"] < 1e-3
    assert not judge(str(a), str(b), ErrorBudget.parse("nmse=1e-12"), samples).holds
    with pytest.raises(GspoError, match="no samples"):
        judge(str(a), str(b), ErrorBudget.parse("nmse=1"), [])


def test_a_budget_within_a_share_of_its_limits_cuts_each_limits_room():
    b = ErrorBudget.parse("nmse=1e-3,logits:cosine=0.99,top1=0.98,exact:top1=1")
    from gspo.precision.stage import within

    assert str(within(b, 0.9)) == "nmse=0.0009,logits:cosine=0.991,top1=0.982,exact:top1=1"
    assert str(within(b, 1.0)) == str(b)
