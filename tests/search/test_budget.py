"""The time budget: the Timebox object, and optimize holding its deadline against slow backends."""

from __future__ import annotations

import doctest
import math
import sys

import onnx
import pytest
from click.testing import CliRunner

import gspo.search.budget as budget_module
import gspo.search.build_costs as build_costs
import gspo.search.decide as decide
from gspo.cli import cli
from gspo.ir import Graph, save
from gspo.ir.builder import GraphBuilder
from gspo.runtime import make_session, random_inputs
from gspo.search import optimize
from gspo.search.budget import Shares, Timebox
from gspo.search.build_costs import BUILD_FLOOR, PRIOR_RATES, QUADRATIC, BuildRates
from gspo.search.candidate import Candidate
from gspo.search.placement import time_pieces
from gspo.search.report_parts import Skip
from gspo.search.strategies import Strategies
from gspo.search.trial import Trial
from gspo.streams import Placement
from gspo.timing import Deadline
from tests.search.fakes import FakeClock, ScriptedTimings


def test_the_module_example_runs():
    assert doctest.testmod(budget_module).failed == 0


def test_a_budget_counts_from_its_start_and_its_children_share_its_deadline_and_record():
    clock = FakeClock()
    b = Timebox.of(10.0, Shares(search=0.5, final=0.2), clock=clock)
    assert b.limited and b.remaining() == 10.0 and not b.expired() and b.fits(10.0) and not b.fits(10.5)
    clock.now += 2
    search = b.share(0.5)
    assert search.end.at == 106.0 and b.end.at == 110.0
    assert b.until_final().end.at == 108.0  # a fifth of the whole budget kept for the final comparison
    assert b.search_seconds(pieces=8, jobs=2) == 0.5 * 8.0 * 2 / 8
    assert b.timing(3.0).remaining() == 3.0 and b.timing(30.0, 0.5).remaining() == 4.0
    search.skip("search", "expanding 3 pieces further", "out of time")
    assert b.log == [Skip("search", "expanding 3 pieces further", "out of time")]
    clock.now += 5
    assert search.expired() and not b.expired() and search.remaining() == 0.0 and b.remaining() == 3.0
    assert search.share(0.5).end.at == 106.0  # a child never outlives its parent
    clock.now += 10
    assert b.expired() and b.remaining() == 0.0 and not b.fits(0.001)


def test_a_final_reserve_beyond_its_share_comes_out_of_the_search_and_the_stages_before_it():
    clock = FakeClock()
    b = Timebox.of(100.0, Shares(search=0.5, final=0.2), clock=clock)
    clock.now += 10  # loading took 10 s: 90 left
    b = b.reserve_final(5.0)  # less than the share: the share stands
    assert b.final_s == 20.0 and b.until_final().end.at == 180.0 and b.search_share().end.at == 155.0
    b = b.reserve_final(50.0)  # 30 s beyond the share, taken from the search's base
    assert b.final_s == 50.0 and b.until_final().end.at == 150.0
    assert b.search_share().end.at == 110.0 + 0.5 * (90.0 - 30.0)
    assert b.search_seconds(pieces=6, jobs=2) == pytest.approx(0.5 * 60.0 * 2 / 6)
    b = b.reserve_final(1000.0)  # never more than MAX_FINAL of what is left
    assert b.final_s == pytest.approx(budget_module.MAX_FINAL * 90.0)
    assert b.share(0.5).final_s == b.final_s  # children see the same reserve
    unlimited = Timebox.of(None, clock=FakeClock())
    unlimited = unlimited.reserve_final(50.0)
    assert unlimited.until_final().end.at is None and unlimited.search_share().end.at is None


def test_with_a_reduced_precision_its_share_is_kept_at_the_end_of_the_one_budget():
    clock = FakeClock()  # at 100
    b = Timebox.of(10.0, Shares(precision=0.5, final=0.2), clock=clock, reduced=True)
    assert b.seconds == 5.0 and b.end.at == 105.0 and b.whole.at == 110.0  # the exact stages end at half
    assert b.final_s == 1.0 and b.until_final().end.at == 104.0  # shared among them as a 5 s budget would be
    assert b.share(0.5).whole.at == 110.0
    clock.now += 6  # the exact stages ran over: what is left of the whole is the precision's
    precision = b.precision_share()
    assert b.expired() and precision.end.at == 110.0 and precision.remaining() == 4.0 and precision.final_s == 4.0
    precision.skip("precision", "timing", "out of time")
    assert b.log == [Skip("precision", "timing", "out of time")]  # one log for the run
    assert Timebox.of(10.0, clock=clock).end.at == Timebox.of(10.0, clock=clock).whole.at  # without: one end
    free = Timebox.of(None, clock=clock, reduced=True)
    assert not free.limited and not free.precision_share().limited


def test_a_whole_model_on_another_backend_is_estimated_from_its_weights_until_a_session_was_built_there():
    rates = BuildRates()
    size = 350 * 2**20  # NASNet-A Large's weights, 1,242 ops
    by_weights = BUILD_FLOOR + max(build_costs.PRIOR_BYTE_RATES["openvino"] * size, QUADRATIC["openvino"] * 1242**2)
    assert rates.estimate("openvino", 1242, size) == pytest.approx(by_weights)
    slow = BuildRates()
    slow.record("ort", 1242, BUILD_FLOOR + 12.42)  # onnxruntime took 10 ms per op: twice that says more
    assert slow.estimate("openvino", 1242, size) == pytest.approx(BUILD_FLOOR + build_costs.ORT_FACTOR * 12.42)
    assert rates.estimate("openvino", 1242) > 2 * by_weights  # the prior per op, for pieces
    rates.record("openvino", 100, BUILD_FLOOR + 2.0)  # once a session was built there: its rate per op
    assert rates.estimate("openvino", 1242, size) == pytest.approx(BUILD_FLOOR + max(0.02 * 1242, QUADRATIC["openvino"] * 1242**2))


def test_without_a_limit_everything_fits_and_every_share_is_unlimited():
    b = Timebox.of(None, clock=FakeClock())
    assert not b.limited and b.remaining() == math.inf and not b.expired() and b.fits(1e9)
    assert b.share(0.1).end.at is None and b.until_final().end.at is None
    assert b.search_seconds(10, 2) is None and b.timing(8.0, 0.5).remaining() == 8.0


def test_build_estimates_learn_from_the_largest_session_and_grow_faster_than_the_ops():
    rates = BuildRates()
    assert rates.estimate("openvino", 10) == pytest.approx(BUILD_FLOOR + PRIOR_RATES["openvino"] * 10)
    assert rates.estimate("ort", 100_000) == pytest.approx(BUILD_FLOOR + QUADRATIC["ort"] * 1e10)
    rates.record("ort", 400, BUILD_FLOOR + 40.0)  # 100 ms per op
    rates.record("ort", 40, BUILD_FLOOR + 400.0)  # a smaller one does not replace the largest
    assert rates.rate("ort") == pytest.approx(0.1)
    assert rates.rate("openvino") == pytest.approx(0.1)  # at least onnxruntime's on the same model
    rates.record("openvino", 50, BUILD_FLOOR + 10.0)
    assert rates.estimate("openvino", 400) == pytest.approx(BUILD_FLOOR + 0.2 * 400)


def test_a_deep_graph_is_estimated_to_compile_slower_than_a_wide_one_of_as_many_ops():
    """OpenVINO compiled 5,000 parallel Relus in 13.3 s and a chain of 2,000 Adds in 15.2 s: the
    floor grows with the depth; the exported NASNet-A Large (1,907 ops, depth 357) took 3.4 s."""
    from gspo.search.build_costs import DEEP, WIDE

    rates = BuildRates()
    wide = rates.estimate("openvino", 5000, 0, depth=2)  # no weights: the floor decides
    deep = rates.estimate("openvino", 2000, 0, depth=2000)
    assert wide == pytest.approx(BUILD_FLOOR + WIDE["openvino"] * 5000 ** 2 + DEEP["openvino"] * 5000 * 2)
    assert deep == pytest.approx(BUILD_FLOOR + 2000 * (WIDE["openvino"] * 2000 + DEEP["openvino"] * 2000))
    assert 13.3 < wide < 4 * 13.3 and 15.2 < deep < 4 * 15.2  # above what was measured, within 4x
    nasnet = rates.estimate("openvino", 1907, 355_000_000, depth=357)  # its weights: 355 MB
    assert 3.4 < nasnet < 15 and nasnet < rates.estimate("openvino", 1907, 355_000_000) / 1.5
    # depth unknown: the plain square, as before
    assert rates.estimate("openvino", 2000) == pytest.approx(BUILD_FLOOR + max(PRIOR_RATES["openvino"] * 2000,
                                                                               QUADRATIC["openvino"] * 2000 ** 2))


def test_constants_and_identities_cost_no_build_time_and_no_depth():
    from gspo.search.build_costs import build_depth, build_ops

    b = GraphBuilder("chain")
    y = b.input("x", (1, 4))
    for _ in range(5):
        y = b.op("Identity", [b.op("Relu", [y])])
    g = b.output(y).build()
    assert len(g.nodes) == 10 and build_ops(g) == 5 and build_depth(g) == 5
    wide = _relus(6)
    assert build_ops(wide) == 13 and build_depth(wide) == 3


def _relus(n: int):
    b = GraphBuilder(f"relus{n}")
    x = b.input("x", (1, 4))
    return b.output(b.op("Concat", [b.op("Sigmoid", [b.op("Relu", [x])]) for _ in range(n)], axis=1)).build()


def test_a_trial_skips_an_option_whose_build_its_budget_cannot_hold():
    g = _relus(8)
    clock = FakeClock()
    timebox = Timebox.of(1.0, clock=clock)
    timebox.rates.record("openvino", len(g.nodes), 50.0 * len(g.nodes))  # 50 s per op on a model of its size
    options = [Candidate(g, label="original"), Candidate(g, placement=Placement.whole(g, "openvino"), label="original@openvino")]
    with Trial(g, options, [random_inputs(g, 0)], timebox=timebox, stage="final") as trial:
        assert [o.label for o in trial.equivalent] == ["original"] and trial.rejected == []
    assert [(s.stage, s.what) for s in timebox.log] == [("final", "original@openvino")]
    assert "were left" in timebox.log[0].why


def test_pieces_the_placement_budget_cannot_hold_stay_on_onnxruntime_and_are_reported():
    g = _relus(4)
    timebox = Timebox.of(0.5, clock=FakeClock())
    timebox.rates.record("openvino", 1, 10.0)
    times = time_pieces([g, g], [[random_inputs(g, 0)]] * 2, ("ort", "openvino"), None, runs=3, timebox=timebox)
    assert [t.seconds for t in times] == [{}, {}] and [t.best() for t in times] == ["ort", "ort"]
    assert timebox.log == [Skip("placement", "timing 2 of 2 pieces on ort, openvino",
                                   "the time budget could not hold it (those pieces stay on onnxruntime)")]


class SlowCompiler:
    """``load_runner`` with a backend that compiles ``seconds_per_op`` per op on ``clock`` (it
    runs on onnxruntime underneath, so its outputs are right)."""

    def __init__(self, seconds_per_op: float, clock: FakeClock):
        self.seconds_per_op, self.clock, self.compiled = seconds_per_op, clock, []

    def __call__(self, name, model, config=None, keep_f32=()):
        session = make_session(model) if config is None else make_session(model, config)
        if name != "ort":
            ops = len(model.nodes) if isinstance(model, Graph) else len(onnx.load_from_string(model).graph.node)
            self.clock.advance(self.seconds_per_op * ops)
            self.compiled.append(ops)
        return session


@pytest.fixture
def slow_openvino(monkeypatch):
    """A fake OpenVINO taking 20 ms per op to compile on the run's clock (the real one need not
    be installed), which only compiling moves."""
    compiler = SlowCompiler(0.02, FakeClock())
    backends = sys.modules["gspo.runtime.backends"]
    real_status = backends.backend_status
    monkeypatch.setattr(backends, "backend_status", lambda n: (True, "slow") if n == "openvino" else real_status(n))
    monkeypatch.setattr(backends, "backend_versions", lambda names: "slow")
    monkeypatch.setattr(backends, "load_runner", compiler)
    monkeypatch.setattr(sys.modules["gspo.runtime.cpu"], "load_runner", compiler)
    return compiler


def test_the_deadline_holds_when_compiling_for_another_backend_is_slow(slow_openvino, tmp_path):
    """300 ops, each compile 20 ms per op: the whole model on the slow backend would take 6 s
    (twice: the original and the optimized model), and every piece 0.1-1 s. Only what the
    budget holds is compiled; the rest is skipped and reported. Timings are scripted and the
    clock moves only as the fake backend compiles, so the seconds are the compiles'."""
    g = _relus(150)
    clock = slow_openvino.clock
    started = clock()
    r = optimize(g, time_budget=3.0, jobs=1, budget=2, timing_runs=5, backends=("ort", "openvino"), frontend=False,
                 db_path=str(tmp_path / "cal.sqlite"), strategies=Strategies(measure=ScriptedTimings(), clock=clock))
    assert slow_openvino.compiled  # the pieces the budget held were compiled
    assert clock() - started < 3.0 + 0.02 * 100  # at most one compile (of a piece) past its estimate
    assert max(slow_openvino.compiled, default=0) < 100  # never the whole model
    skipped = {(s["stage"], s["what"]) for s in r.report["skipped"]}
    assert ("final", "original@openvino") in skipped
    assert r.report["total_seconds"] == clock() - started


def _model_file(tmp_path):
    p = tmp_path / "m.onnx"
    save(_relus(6), p)
    return p


def test_with_no_time_left_the_input_is_handed_back_unmeasured_and_the_cli_says_what_was_skipped(tmp_path):
    p = _model_file(tmp_path)
    out = tmp_path / "o.onnx"
    res = CliRunner().invoke(cli, ["optimize", str(p), "-o", str(out), "--time-budget", "1e-6", "--backends", "ort",
                                   "--report", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    assert out.read_bytes() == p.read_bytes()
    assert "latency  not measured" in res.output
    lines = [line for line in res.output.splitlines() if line.startswith("skipped to hold the time budget: ")]
    assert len(lines) == 1 and "final: comparing the whole model's options with the original" in lines[0]
    r = optimize(p, time_budget=1e-6, backends=("ort",))
    assert r.unchanged and r.report["latency_before_ms"] is None and r.report["verdict"] == "not measured"
    assert [s["stage"] for s in r.report["skipped"]][-1] == "final"


class _NeverTimed:
    """A Trial stand-in that fails the test if asked to time anything."""

    def time(self, runs, seconds=None, labels=None):
        raise AssertionError(f"timed {labels} past the deadline")


def test_a_confirmation_the_budget_cannot_hold_is_skipped_and_the_input_kept():
    from gspo.runtime import Timing
    from gspo.search import OptimizeConfig
    from gspo.search.candidate import Measured
    from gspo.zoo import build

    g = build("squeezenet", "tiny")
    first = [Measured(Candidate(g, label="original"), Timing("original", (1.0,) * 30)),
             Measured(Candidate(g, label="optimized"), Timing("optimized", (0.5,) * 30))]
    timebox = Timebox.of(6.0, clock=FakeClock())  # 5 rounds of the two take 7.5 s
    choice = decide.confirmed(_NeverTimed(), first, OptimizeConfig(), 8.0, timebox)
    assert choice.best.label == "original" and choice.confirmations == []
    assert timebox.log == [Skip("final", "confirming optimized against the original",
                                   "the time budget could not hold it")]


@pytest.mark.parametrize("jobs", [1, 2])
def test_the_search_ends_with_its_share_and_says_which_pieces_it_cut(jobs):
    """A search share already over: every piece gets only its first expansion, and each piece
    with something to rewrite reports that the clock, not the expansion budget, stopped it."""
    from gspo.costmodel import CostModel, device_description, load_profile
    from gspo.partition import partition
    from gspo.runtime import runtime_version
    from gspo.search.config import OptimizeConfig
    from gspo.search.pool import search_pieces
    from gspo.zoo import build

    cost_model = CostModel(load_profile("cpu", device_description("cpu"), runtime_version(), force=True))
    parts = partition(build("inception_v3", "tiny"), 16)
    cfg = OptimizeConfig.of(budget=40, max_streams=2, jobs=jobs)
    searched = search_pieces(parts.pieces, lambda g, s: cost_model.cost(g, s), cfg, None, None,
                             deadline=Deadline(0.0, clock=lambda: 1.0))
    assert len(parts.pieces) > 2 and all(r.expanded <= 1 for r in searched)
    assert any(r.out_of_time for r in searched)


class _Seconds:
    """A Trial stand-in that records the seconds each timing is given and times the contender
    faster in every round."""

    def __init__(self, graph):
        self.graph, self.given = graph, []

    def time(self, runs, seconds=None, labels=None):
        from gspo.runtime import Timing
        from gspo.search.candidate import Measured

        self.given.append(None if seconds is None else seconds.remaining())
        return [Measured(Candidate(self.graph, label=label), Timing(label, (1.0 if label == "original" else 0.5,) * 20))
                for label in labels]


@pytest.mark.parametrize("left, given", [(100.0, 23 * 1.5), (20.0, 20.0)])
def test_a_confirmation_takes_the_time_of_its_most_rounds_when_the_budget_has_it(left, given):
    """Beyond the final comparison's timing cap, up to CONFIRM_MAX_ROUNDS rounds of the two (a
    sign test steadier against this machine's shifts of speed), and never past the deadline."""
    from gspo.runtime import Timing
    from gspo.search import OptimizeConfig
    from gspo.search.candidate import Measured
    from gspo.search.trial import CONFIRM_MAX_ROUNDS
    from gspo.zoo import build

    assert CONFIRM_MAX_ROUNDS == 23
    g = build("squeezenet", "tiny")
    first = [Measured(Candidate(g, label="original"), Timing("original", (1.0,) * 30)),
             Measured(Candidate(g, label="optimized"), Timing("optimized", (0.5,) * 30))]
    trial = _Seconds(g)
    choice = decide.confirmed(trial, first, OptimizeConfig(), 8.0, Timebox.of(left, clock=FakeClock()))
    assert trial.given == [pytest.approx(given)] and choice.best.label == "optimized"
