"""Equivalence checks between models."""

from __future__ import annotations

import numpy as np
import pytest

from gspo.errors import GspoError
from gspo.ir import Literal
from gspo.runtime import compare_outputs, load_inputs, random_inputs, verify
from tests.helpers import branchy


def _perturbed(g, factor):
    name = next(n for n in g.weights if "w3" in n)
    arr = g.weights[name].evaluate(g.store) * factor
    return g.replace_nodes(weights={name: Literal.from_array(arr.astype(np.float32))})


def test_a_model_is_equivalent_to_itself():
    g = branchy()
    res = verify(g, g, runs=2)
    assert res.equivalent and all(d.max_abs == 0 for d in res.outputs)


def test_a_changed_weight_is_caught_and_named():
    g = branchy()
    res = verify(g, _perturbed(g, 1.01))
    assert not res.equivalent
    assert res.worst.name == g.outputs[0].name and res.worst.max_abs > 0


def test_tolerance_is_respected():
    g = branchy()
    h = _perturbed(g, 1 + 1e-6)
    assert verify(g, h, rtol=1e-3, atol=1e-4).equivalent
    assert not verify(g, h, rtol=0, atol=0).equivalent


def test_nan_positions_must_match():
    a = {"y": np.array([1.0, np.nan], np.float32)}
    assert compare_outputs(a, {"y": np.array([1.0, np.nan], np.float32)}, 0, 0).equivalent
    assert not compare_outputs(a, {"y": np.array([1.0, 2.0], np.float32)}, 1, 1).equivalent
    assert not compare_outputs(a, {"y": np.array([1.0], np.float32)}, 1, 1).equivalent


def test_inputs_file_is_checked(tmp_path):
    g = branchy()
    good = tmp_path / "good.npz"
    np.savez(good, **random_inputs(g))
    assert set(load_inputs(str(good), g)) == {"x"}
    wrong_name = tmp_path / "n.npz"
    np.savez(wrong_name, y=np.zeros((1, 4, 8, 8), np.float32))
    with pytest.raises(GspoError, match="missing"):
        load_inputs(str(wrong_name), g)
    wrong_shape = tmp_path / "s.npz"
    np.savez(wrong_shape, x=np.zeros((1, 4, 8, 9), np.float32))
    with pytest.raises(GspoError, match="the model wants"):
        load_inputs(str(wrong_shape), g)
    wrong_dtype = tmp_path / "d.npz"
    np.savez(wrong_dtype, x=np.zeros((1, 4, 8, 8), np.float64))
    with pytest.raises(GspoError, match="the model wants"):
        load_inputs(str(wrong_dtype), g)
    not_npz = tmp_path / "x.npz"
    not_npz.write_text("nope")
    with pytest.raises(GspoError, match="cannot read inputs"):
        load_inputs(str(not_npz), g)


def test_random_inputs_are_deterministic():
    g = branchy()
    np.testing.assert_array_equal(random_inputs(g, 5)["x"], random_inputs(g, 5)["x"])
    assert not np.array_equal(random_inputs(g, 5)["x"], random_inputs(g, 6)["x"])
