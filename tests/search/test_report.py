"""optimize's report: the verdict on a speedup, with its noise; the record and its JSON."""

from __future__ import annotations

import json

import pytest

from gspo import ir
from gspo.runtime import Timing
from gspo.search import optimize
from gspo.search.candidate import Candidate, Measured
from gspo.search.report import Report
from gspo.search.stats import consistently_faster, speed_verdict
from gspo.search.strategies import Strategies
from gspo.streams import Schedule
from tests.helpers import branchy, documented_report_keys
from tests.search.fakes import ScriptedTimings

_GRAPH = ir.builder.GraphBuilder()
_GRAPH = _GRAPH.output(_GRAPH.op("Relu", [_GRAPH.input("x", (1, 4))], out="y")).build()
# a +-20% drift over 30 rounds that both options feel alike
_DRIFT = tuple(1.0 + 0.2 * ((7 * i) % 11 - 5) / 5 for i in range(30))


def _outcome(label: str, factor: float, schedule: Schedule | None = None) -> Measured:
    return Measured(Candidate(_GRAPH, schedule, label=label), Timing(label, tuple(factor * t for t in _DRIFT)))


def test_a_steady_gain_within_the_spread_is_faster_on_one_stream_only():
    base, one = _outcome("original", 1.0), _outcome("optimized", 0.92)
    two = _outcome("optimized+streams", 0.92, Schedule((("y",), ())))
    outcomes = [base, one, two]
    speedup, noise, verdict = speed_verdict(outcomes, one, 0.02)
    assert noise > speedup - 1 > 0.02  # within the spread of the runs
    assert verdict == "faster" and consistently_faster(base, one)
    # streams: the rounds of one timing do not vary the other core's load, so the spread rules
    assert speed_verdict(outcomes, two, 0.02)[2] == "no measurable change"
    assert not consistently_faster(base, two)


def test_a_gain_below_the_margin_is_no_measurable_change():
    base, small = _outcome("original", 1.0), _outcome("optimized", 0.99)
    assert consistently_faster(base, small)  # in every round, but by less than the margin
    assert speed_verdict([base, small], small, 0.02)[2] == "no measurable change"
    assert speed_verdict([base, small], base, 0.02)[2] == "unchanged"


def test_a_gain_beyond_the_spread_is_faster_even_in_few_rounds():
    base = Measured(Candidate(_GRAPH, label="original"), Timing("original", (1.0, 1.01, 0.99, 1.0, 1.02)))
    fast = Measured(Candidate(_GRAPH, label="optimized"), Timing("optimized", (0.8, 0.81, 0.79, 0.8, 0.82)))
    assert speed_verdict([base, fast], fast, 0.02)[2] == "faster"


def test_the_report_is_one_record_whose_json_has_the_documented_keys_in_order():
    """``gspo optimize --report``'s keys and their order are the documented ones; the record
    reads its fields as attributes and, as the JSON does, by key."""
    r = optimize(branchy(), select="estimated", budget=2, timing_runs=5, jobs=1, backends=("ort",)).report
    assert isinstance(r, Report)
    data = json.loads(json.dumps(r.to_json(), indent=1, default=str))
    assert list(data) == documented_report_keys() == list(r.keys())
    assert data["chosen"] == r.chosen == r["chosen"] and r["speedup"] == r.speedup and r.get("skipped") == [s.to_json() for s in r.skipped]
    assert "verdict" in r and "nothing" not in r and r.get("nothing", 1) == 1
    with pytest.raises(KeyError):
        r["nothing"]
    assert Report.from_json(r.to_json()) == r
    assert r.config.search.max_streams is None and r["config"]["jobs"] == 1  # the options as given, not as resolved


def test_the_input_chosen_on_another_backend_is_estimated_as_the_input(tmp_path):
    """The file as exported, whole on OpenVINO (timed twenty times as fast), is estimated as the
    input after the front end (the cost model read the raw export of NASNet-A Large as 2,272 s)."""
    pytest.importorskip("openvino")
    b = ir.builder.GraphBuilder()
    x = b.op("Identity", [b.op("Relu", [b.input("x", (1, 8, 16, 16))])])  # the front end drops the Identity
    src = ir.save(b.output(b.op("Sigmoid", [x], out="y")).build(), tmp_path / "in.onnx")
    timings = ScriptedTimings({"original": (1.0,) * 30, "original@openvino": (0.05,) * 30})
    r = optimize(src, budget=2, timing_runs=5, backends=("ort", "openvino"), jobs=1, use_streams=False,
                 time_budget=None, strategies=Strategies(measure=timings))
    assert r.report["chosen"] == "original@openvino" and r.report["frontend"]["used"]
    assert r.report["estimated_after_ms"] == r.report["estimated_before_ms"]
