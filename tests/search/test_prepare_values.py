"""Values that reach prepare through the API are checked as the CLI checks them: a seed numpy
cannot take, or more input sets than the memory or the budget holds, is one line (GspoError)."""

from __future__ import annotations

import tracemalloc

import pytest

from gspo.errors import GspoError
from gspo.ir.onnx_io import from_model
from gspo.runtime.inputs import random_inputs
from gspo.search import optimize
from tests.helpers import relu_model

FAST = dict(jobs=1, timing_runs=5, budget=2, backends=("ort",))


@pytest.mark.parametrize("seed", [-1, 1.5, True, "3"])
def test_a_seed_numpy_cannot_take_is_one_line(seed):
    with pytest.raises(GspoError, match=r"the seed must be a non-negative integer \(got "):
        optimize(from_model(relu_model()), seed=seed, **FAST)
    with pytest.raises(GspoError, match="the seed must be"):
        random_inputs(from_model(relu_model()), seed)


def test_a_billion_input_sets_are_refused_before_one_is_made():
    tracemalloc.start()
    try:
        with pytest.raises(GspoError, match="1000000000 sets of the random inputs"):
            optimize(from_model(relu_model()), verify_runs=10**9, **FAST)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 100 * 10**6, peak  # not a billion sets, nor a list of them
