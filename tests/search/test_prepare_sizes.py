"""Random inputs are sized against the time budget and the memory before they are made: a model
whose inputs (and one run on them) cannot fit is refused in one line, at once, with nothing
allocated; small inputs are made as before whatever the budget."""

from __future__ import annotations

import tracemalloc

import pytest

import gspo.runtime.inputs as inputs_mod
from gspo.errors import GspoError
from gspo.ir.onnx_io import from_model
from gspo.search import optimize
from tests.helpers import relu_model

FAST = dict(jobs=1, timing_runs=5, budget=2, backends=("ort",))


def _refused(graph, **options) -> str:
    tracemalloc.start()
    try:
        with pytest.raises(GspoError) as e:
            optimize(graph, **FAST, **options)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 100 * 10**6, peak  # nothing of the inputs' size was allocated (the refusal came first)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_inputs_the_time_budget_cannot_make_are_refused_before_they_are_made(monkeypatch):
    monkeypatch.setattr(inputs_mod, "available_memory", lambda: 10**12)  # the budget decides, not this machine
    message = _refused(from_model(relu_model((20000, 20000))), time_budget=0.5)
    assert "1.6 GB" in message and "'x'" in message and "--time-budget" in message


def test_inputs_and_outputs_that_do_not_fit_in_memory_are_refused_before_they_are_made(monkeypatch):
    # the input alone (1.6 GB) fits in 2.5 GB; with the output one run makes (1.6 GB) it does not
    monkeypatch.setattr(inputs_mod, "available_memory", lambda: 2_500 * 10**6)
    message = _refused(from_model(relu_model((20000, 20000))), time_budget=None)
    assert "3.2 GB" in message and "2.5 GB" in message


def test_a_160_gb_input_is_refused_at_once():
    message = _refused(from_model(relu_model((200000, 200000))), time_budget=30)
    assert "160.0 GB" in message


def test_small_inputs_are_made_whatever_the_budget():
    r = optimize(from_model(relu_model((2, 3))), time_budget=0.01, **FAST)
    assert r.unchanged
