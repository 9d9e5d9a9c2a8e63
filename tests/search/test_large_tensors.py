"""Large tensors against the time budget and the memory (issue 51, item 6): the front end's graph
holds no second copy of the model's weights, making large random inputs is estimated with
the memory they are made in (a Relu over [30000, 30000] at --time-budget 30 ran 50 s), and the
budget counts from the command's start (its imports included)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from click.testing import CliRunner
from onnx import helper as h
from onnx import numpy_helper

import gspo.runtime.inputs as inputs_mod
import gspo.search.prepare as prepare_mod
from benchmarks.edges import matmuls
from gspo.cli import cli
from gspo.errors import GspoError
from gspo.ir.onnx_io import from_model
from gspo.search.budget import Timebox
from gspo.search.config import OptimizeConfig
from gspo.search.decide import original_seconds
from gspo.search.driver import optimize
from gspo.search.prepare import prepare
from gspo.search.prepared import Prepared
from gspo.search.strategies import Strategies
from tests.helpers import relu_model
from tests.search.fakes import FakeClock, ScriptedTimings


def test_the_front_ends_graph_shares_the_weights_of_the_model_as_given(tmp_path):
    """Four parallel MatMuls (benchmarks/edges.py, scaled down): the graph searched and the model
    as given hold each weight once (the front end parsed the model again: 400 MB more on 400 MB
    of weights)."""
    m = matmuls(4, 64)
    m.graph.node[0].output[0] = "t0"  # y0 = t0 + c, c a Constant node (which the front end lifts)
    m.graph.node.extend([h.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.ones(64, np.float32))),
                         h.make_node("Add", ["t0", "c"], ["y0"])])
    path = tmp_path / "mm.onnx"
    path.write_bytes(m.SerializeToString())
    prepared = prepare(str(path), None, None, OptimizeConfig(), Timebox.of(None))
    assert prepared.plain is not prepared.original  # the front end's graph, checked and kept
    for k in range(4):
        assert prepared.plain.store.proto(f"w{k}") is prepared.original.store.proto(f"w{k}")
    want = prepared.original.store.array("w2")
    np.testing.assert_array_equal(prepared.plain.store.array("w2"), want)


@pytest.mark.parametrize("touching, refused", [(0.0, False), (20.0, True)])
def test_making_large_inputs_counts_the_first_touch_of_their_memory(monkeypatch, touching, refused):
    """Drawn at the rate of a small draw in memory already mapped, 9 s of touching 3.6 GB for
    the first time were missing from the estimate: the inputs were made past the budget, and
    then every step was skipped. Scripted seconds: no real timing."""
    monkeypatch.setattr(inputs_mod, "available_memory", lambda: 10**12)
    monkeypatch.setattr(prepare_mod, "making_seconds", lambda graph: 10.0)
    touched = []
    monkeypatch.setattr(prepare_mod, "touching_seconds", lambda n: touched.append(n) or touching)
    graph = from_model(relu_model((10000, 10000)))  # 400 MB in, 400 MB out
    timebox = Timebox.of(25.0, clock=FakeClock())
    if refused:
        with pytest.raises(GspoError, match=r"estimated at 30\.\d s here, more than the 25\.0 s left"):
            prepare_mod._check_sizes(graph, 2, timebox)
    else:
        prepare_mod._check_sizes(graph, 2, timebox)
    assert touched == [800 * 10**6]  # the one set of inputs and one run's outputs


def test_a_front_end_that_changed_nothing_is_not_checked_against_the_model(monkeypatch):
    """Checking it ran the model twice (its outputs written to a file, as large as its input):
    a Relu over [30000, 30000] at --time-budget 60 ended after 86.8 s."""
    monkeypatch.setattr(prepare_mod, "Trial", lambda *a, **k: pytest.fail("the front end's graph was checked"))
    graph = from_model(relu_model((4, 8)))
    prepared = prepare(graph, None, None, OptimizeConfig(), Timebox.of(None))
    assert prepared.plain is prepared.original and prepared.run_s > 0


def test_a_run_whose_outputs_the_budget_cannot_hold_is_skipped_before_a_session_is_built(monkeypatch):
    """Its outputs (400 MB, scripted to take 1 s to touch) count, not only the session's build,
    and so does the least timing of the model that must follow it (one run would fit in 5 s,
    nine do not): a Relu over [30000, 30000] at --time-budget 60 ran once after its inputs
    were made, and then skipped everything, at 74 s."""
    monkeypatch.setattr(prepare_mod, "touching_seconds", lambda n: 1.0)
    monkeypatch.setattr(prepare_mod, "make_session", lambda *a, **k: pytest.fail("a session was built"))
    graph = from_model(relu_model((10000, 10000)))
    timebox = Timebox.of(5.0, clock=FakeClock())
    assert prepare_mod._require_runs(graph, {}, timebox, 0) == pytest.approx(1.6e9 / prepare_mod.RUN_RATE + 1.0)
    assert [s.what for s in timebox.log] == ["running the model once with onnxruntime"]


def test_the_final_comparison_is_not_tried_when_the_run_at_load_was_not(monkeypatch):
    """The run skipped at load was counted as 0 s: the final comparison, which builds, runs and
    times the same model, was then estimated as a build alone and begun with 4.7 s left (a Relu
    over [30000, 30000] at --time-budget 30 ended at 41.9 s). The run's estimate stands in."""
    monkeypatch.setattr(prepare_mod, "touching_seconds", lambda n: 1.0)
    monkeypatch.setattr(prepare_mod, "make_session", lambda *a, **k: pytest.fail("a session was built"))
    graph = from_model(relu_model((10000, 10000)))
    timebox = Timebox.of(5.0, clock=FakeClock())
    prepared = Prepared(graph, graph, [{}], [], run_s=prepare_mod._require_runs(graph, {}, timebox, 0))
    assert not timebox.fits(original_seconds(prepared, timebox))


def test_the_budget_counts_from_when_the_run_began():
    """``gspo optimize``'s imports (0.5-0.7 s here) ran before the budget was made and were not
    counted: the budget counts from ``started`` (never later than now)."""
    assert Timebox.of(10.0, clock=FakeClock(100.0), started=97.0).remaining() == 7.0
    assert Timebox.of(10.0, clock=FakeClock(100.0), started=150.0).started == 100.0
    assert Timebox.of(10.0, clock=FakeClock(100.0)).remaining() == 10.0


def test_optimize_counts_the_time_before_the_call_that_started_gives():
    """Begun 20 s before the call on a budget of 15 s: nothing is left, the input is handed back
    unmeasured, and the report's total counts from the start."""
    clock = FakeClock()
    timings = ScriptedTimings()
    r = optimize(from_model(relu_model((4, 8))), time_budget=15.0, backends=("ort",), started=clock() - 20.0,
                 strategies=Strategies(measure=timings, clock=clock))
    assert r.unchanged and r.report["verdict"] == "not measured" and r.report["total_seconds"] == 20.0
    assert timings.whole == []


def test_the_cli_budget_counts_from_the_command_s_start(monkeypatch, tmp_path):
    """The command passes when it began (before its imports) as the run's start."""
    import gspo.search

    seen = {}

    def fake_optimize(model, config=None, **kwargs):
        seen.update(kwargs, returned=time.perf_counter())
        raise GspoError("stopped by the test")

    monkeypatch.setattr(gspo.search, "optimize", fake_optimize)
    p = tmp_path / "m.onnx"
    p.write_bytes(relu_model((2, 3)).SerializeToString())
    before = time.perf_counter()
    res = CliRunner().invoke(cli, ["optimize", str(p), "-o", str(tmp_path / "o.onnx"), "--time-budget", "30"])
    assert res.exit_code == 2 and "stopped by the test" in res.output
    assert before <= seen["started"] <= seen["returned"]
