"""Drawing large random inputs stops at the time budget's deadline, and the input is then handed
back unchanged with the skip reported (issue 51, item 6: a Relu over [30000, 30000] drew its
3.6 GB for 36 s at --time-budget 30). The clock is a fake one that each chunk drawn moves: no
real timing."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

import gspo.runtime.inputs as inputs_mod
import gspo.search.prepare as prepare_mod
from gspo.cli import cli
from gspo.ir.onnx_io import from_model
from gspo.runtime.inputs import InputsOutOfTime, random_input_sets, random_inputs
from gspo.search.driver import optimize
from gspo.search.strategies import Strategies
from gspo.timing import Deadline
from tests.helpers import relu_model
from tests.search.fakes import FakeClock, ScriptedTimings

CHUNK = inputs_mod._CHUNK
#: Seconds of the fake clock each chunk drawn takes.
CHUNK_S = 10.0


class _SlowDraws:
    """A random generator that draws what numpy's draws and moves ``clock`` by :data:`CHUNK_S`
    for each chunk of normals drawn, counting the chunks."""

    def __init__(self, seed, clock: FakeClock):
        self.rng, self.clock, self.chunks = np.random.default_rng(seed), clock, 0

    def standard_normal(self, n):
        self.chunks += 1
        self.clock.advance(CHUNK_S)
        return self.rng.standard_normal(n)


class _Numpy:
    """numpy as :mod:`gspo.runtime.inputs` sees it, its generators :class:`_SlowDraws` (``made``)."""

    def __init__(self, clock: FakeClock):
        self.clock, self.made = clock, []
        self.random = SimpleNamespace(default_rng=self.default_rng)

    def default_rng(self, seed):
        self.made.append(_SlowDraws(seed, self.clock))
        return self.made[-1]

    def __getattr__(self, name):
        return getattr(np, name)


@pytest.fixture
def slow_draws(monkeypatch) -> _Numpy:
    """Each chunk of random data drawn in gspo.runtime.inputs takes :data:`CHUNK_S` of a fake
    clock (``.clock``)."""
    fake = _Numpy(FakeClock())
    monkeypatch.setattr(inputs_mod, "np", fake)
    return fake


def test_filling_stops_at_the_deadline_and_draws_no_further_chunk(slow_draws):
    clock = slow_draws.clock
    gen = slow_draws.default_rng(0)
    with pytest.raises(InputsOutOfTime, match="the time budget ended while the random inputs were drawn"):
        inputs_mod._filled((4 * CHUNK,), np.dtype(np.float32), gen.standard_normal, Deadline.after(5.0, clock))
    assert gen.chunks == 1  # the first chunk took the deadline's 5 s and more: none after it


def test_a_deadline_that_does_not_pass_changes_no_value():
    """The same seed gives the same inputs with a deadline as without (it draws nothing)."""
    graph = from_model(relu_model((3, CHUNK // 2 + 5)))  # two chunks, the second partial
    clock = FakeClock()
    with_deadline = random_input_sets(graph, 7, 2, until=Deadline.after(1.0, clock))
    without = random_input_sets(graph, 7, 2)
    assert len(with_deadline) == 2
    for a, b in zip(with_deadline, without):
        np.testing.assert_array_equal(a["x"], b["x"])
    np.testing.assert_array_equal(without[0]["x"], random_inputs(graph, 7)["x"])


def _model_file(tmp_path, shape=(4, CHUNK)):
    p = tmp_path / "relu.onnx"
    p.write_bytes(relu_model(shape).SerializeToString())
    return p


def test_optimize_hands_the_input_back_when_the_budget_ends_while_drawing_inputs(slow_draws, tmp_path):
    """Four chunks of 10 s each against a budget of 15 s: two are drawn, then the input is
    handed back unchanged, unmeasured, with the skip named; nothing is built or timed."""
    timings = ScriptedTimings()
    p = _model_file(tmp_path)
    r = optimize(p, time_budget=15.0, backends=("ort",), strategies=Strategies(measure=timings, clock=slow_draws.clock))
    assert sum(g.chunks for g in slow_draws.made) == 2
    assert r.unchanged and r.source == p.read_bytes()
    assert r.report["latency_before_ms"] is None and r.report["verdict"] == "not measured"
    skipped = [(s["stage"], s["what"]) for s in r.report["skipped"]]
    assert skipped[0] == ("load", prepare_mod.MAKING_INPUTS)
    assert [stage for stage, _ in skipped] == ["load", "search", "final"]
    assert skipped[-1][1] == "comparing the whole model's options with the original (the input is returned)"
    assert timings.whole == [] and timings.pieces == []


def test_the_cli_writes_the_input_unchanged_and_names_the_skip(monkeypatch, tmp_path):
    """The deadline passing while the inputs are drawn (scripted: the draw raises as it would)
    ends with exit 0, the input's bytes written and the skip named."""

    def out_of_time(graph, seed, runs, until=None):
        assert until is not None and until.limited  # drawn against the budget's deadline
        raise InputsOutOfTime("the time budget ended while the random inputs were drawn")

    monkeypatch.setattr(prepare_mod, "random_input_sets", out_of_time)
    p, out = _model_file(tmp_path, (2, 3)), tmp_path / "o.onnx"
    res = CliRunner().invoke(cli, ["optimize", str(p), "-o", str(out), "--time-budget", "30", "--backends", "ort"])
    assert res.exit_code == 0, res.output
    assert out.read_bytes() == p.read_bytes()
    assert "latency  not measured" in res.output
    assert f"skipped to hold the time budget: load: {prepare_mod.MAKING_INPUTS}; search: " in res.output
    assert "final: comparing the whole model's options with the original (the input is returned)" in res.output
