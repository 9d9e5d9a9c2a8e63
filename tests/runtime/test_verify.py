"""Equivalence checks between models."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from gspo.errors import GspoError
from gspo.ir import Literal
from gspo.runtime import compare_outputs, load_inputs, random_inputs, verify
from gspo.runtime.verify import Tolerance
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
    assert verify(g, h, Tolerance(rtol=1e-3, atol=1e-4)).equivalent
    assert not verify(g, h, Tolerance(rtol=0, atol=0, ntol=0)).equivalent


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


def _big(scale, seed=0):
    return np.random.default_rng(seed).standard_normal(1000) * scale


def test_rounding_that_grows_with_the_output_scale_is_accepted():
    """Outputs of magnitude ~1e12 (a random-weight Inception-v3): an exact rewrite moves them by
    ~3e5, relative 2e-7 of the scale, and by far more than 1e-3 relative at elements near zero."""
    a = _big(1e12)
    a[0] = 1.0  # an element near zero, where fp32 reordering keeps no relative precision
    b = a + _big(3e5, seed=1)
    res = compare_outputs({"y": a.astype(np.float32)}, {"y": b.astype(np.float32)})
    assert res.equivalent and res.outputs[0].norm_rel < 1e-5
    assert not compare_outputs({"y": a.astype(np.float32)}, {"y": b.astype(np.float32)}, ntol=0).equivalent


def test_a_real_bug_is_still_caught_at_any_scale():
    for scale in (1.0, 1e3, 1e12):  # (below ~atol, atol decides, as in any elementwise test)
        a = _big(scale).astype(np.float32)
        b = a.copy()
        b[17] = a[17] * 1.01 + 0.01 * scale  # one element off by a percent of the scale
        res = compare_outputs({"y": a}, {"y": b})
        assert not res.equivalent and res.worst.reason.startswith("max abs error"), scale


def test_integers_and_bools_must_be_equal():
    a = {"i": np.array([1, 2, 3], np.int64), "b": np.array([True, False])}
    assert compare_outputs(a, {"i": np.array([1, 2, 3], np.int64), "b": np.array([True, False])}).equivalent
    res = compare_outputs(a, {"i": np.array([1, 2, 4], np.int64), "b": np.array([True, False])}, rtol=1, atol=1)
    assert not res.equivalent and res.worst.name == "i"
    assert not compare_outputs(a, {"i": a["i"], "b": np.array([True, True])}).equivalent


def test_infinities_must_match_in_place_and_sign():
    a = {"y": np.array([1.0, np.inf, -np.inf], np.float32)}
    assert compare_outputs(a, {"y": np.array([1.0, np.inf, -np.inf], np.float32)}).equivalent
    assert not compare_outputs(a, {"y": np.array([1.0, -np.inf, -np.inf], np.float32)}).equivalent
    assert not compare_outputs(a, {"y": np.array([1.0, np.inf, 5.0], np.float32)}).equivalent


def test_half_precision_outputs_get_half_precision_tolerances():
    a = np.linspace(-4, 4, 101).astype(np.float16)
    b = (a.astype(np.float32) * (1 + 2e-3)).astype(np.float16)  # a few fp16 rounding units
    assert compare_outputs({"y": a}, {"y": b}).equivalent
    assert not compare_outputs({"y": a.astype(np.float32)}, {"y": b.astype(np.float32)}).equivalent


def test_comparing_large_outputs_takes_no_copy_of_them():
    """The comparison works a chunk at a time (whole, it took eight float64 copies of an output)."""
    import tracemalloc

    a = np.random.default_rng(0).standard_normal((2000, 2000)).astype(np.float32)
    b = a * np.float32(1.00001)
    tracemalloc.start()
    try:
        res = compare_outputs({"y": a}, {"y": b})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert res.equivalent and res.outputs[0].max_abs > 0
    assert peak < 0.5 * a.nbytes


def test_the_comparison_in_chunks_is_the_comparison_whole(monkeypatch):
    verify_mod = importlib.import_module("gspo.runtime.verify")  # the package exports a function of that name

    rng = np.random.default_rng(1)
    cases = []
    for _ in range(300):
        a = (rng.standard_normal(20) * 10.0 ** rng.integers(-4, 4)).astype(np.float32)
        b = (a + rng.standard_normal(20) * 10.0 ** rng.integers(-8, 0) * (rng.random(20) < 0.3)).astype(np.float32)
        for arr in (a, b):
            arr[rng.integers(0, 20, rng.integers(0, 3))] = rng.choice([np.nan, np.inf, -np.inf, 0.0])
        cases.append((a, b))
    whole = [compare_outputs({"y": a}, {"y": b}) for a, b in cases]
    monkeypatch.setattr(verify_mod, "_CHUNK", 3)
    assert [compare_outputs({"y": a}, {"y": b}) for a, b in cases] == whole
    assert {w.outputs[0].reason for w in whole} >= {"", "NaN at different places", "infinities at different places"}
    assert any(not w.equivalent and w.outputs[0].reason.startswith("max abs") for w in whole)


def test_verify_makes_its_input_sets_one_at_a_time(monkeypatch):
    """Each set is drawn when it is compared (a list of every set came first, 16 GB for --runs 10**9)."""
    verify_mod = importlib.import_module("gspo.runtime.verify")  # the package exports a function of that name

    events = []
    draw, compare = verify_mod.random_inputs, verify_mod.compare_outputs
    monkeypatch.setattr(verify_mod, "random_inputs", lambda g, seed: events.append("draw") or draw(g, seed))
    monkeypatch.setattr(verify_mod, "compare_outputs", lambda *a: events.append("compare") or compare(*a))
    g = branchy()
    assert verify(g, g, runs=3).equivalent
    assert events == ["draw", "compare"] * 3


def test_verify_lets_each_input_set_go_before_drawing_the_next(monkeypatch):
    import gc
    import weakref

    verify_mod = importlib.import_module("gspo.runtime.verify")
    drawn, alive_at_draw = [], []
    draw = verify_mod.random_inputs

    def watched(g, seed):
        gc.collect()
        alive_at_draw.append(sum(r() is not None for r in drawn))
        feeds = draw(g, seed)
        drawn.extend(weakref.ref(a) for a in feeds.values())
        return feeds

    monkeypatch.setattr(verify_mod, "random_inputs", watched)
    g = branchy()
    assert verify(g, g, runs=3).equivalent
    assert alive_at_draw == [0, 0, 0]


_MAPS = [{0: 0.25, 1: 0.75}, {0: 0.5, 1: 0.5}]


@pytest.mark.parametrize("got, ok, reason", [
    ([{0: 0.25, 1: 0.75}, {0: 0.5, 1: 0.5 + 1e-7}], True, ""),
    ([{0: 0.25, 1: 0.75}, {0: 0.5, 1: 0.6}], False, "[1][1]: max abs error"),
    ([{0: 0.25, 1: 0.75}, {0: 0.5, 2: 0.5}], False, "structure"),
    ([{0: 0.25, 1: 0.75}], False, "structure"),
    (None, False, "structure"),
])
def test_a_sequence_of_maps_is_compared_key_by_key_and_value_by_value(got, ok, reason):
    """ZipMap's output (a list of dicts): the same length and keys, each probability within the
    tolerance; never skipped (compare_outputs took ``.shape`` of the list)."""
    res = compare_outputs({"p": _MAPS}, {"p": got})
    assert res.equivalent is ok
    assert reason in res.outputs[0].reason


def test_a_sequence_of_tensors_is_compared_elementwise():
    a = [np.arange(3, dtype=np.int64), np.ones((2, 2), np.float32)]
    assert compare_outputs({"s": a}, {"s": [a[0].copy(), a[1] + 1e-7]}).equivalent
    assert not compare_outputs({"s": a}, {"s": [a[0] + 1, a[1]]}).equivalent
    assert not compare_outputs({"s": a}, {"s": [a[0], np.ones((2, 3), np.float32)]}).equivalent


# ------------------------------------------------------------------ quantized outputs
def _qdq(tmp_path, scale):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from gspo.ir import load

    s = numpy_helper.from_array(np.asarray(scale, np.float32), "s")
    zp = numpy_helper.from_array(np.zeros(np.shape(scale), np.uint8), "zp")
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], axis=1),
             helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], axis=1),
             helper.make_node("Relu", ["x"], ["r"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 8]) for n in ("y", "r")]
    graph = helper.make_graph(nodes, "qdq", [x], outs, initializer=[s, zp])
    path = tmp_path / f"qdq{np.size(scale)}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    return load(str(path))


def test_an_output_a_dequantize_computes_has_its_step(tmp_path):
    from gspo.runtime.verify import output_steps

    assert output_steps(_qdq(tmp_path, 0.25)) == {"y": 0.25}  # the Relu's output is not quantized
    assert output_steps(_qdq(tmp_path, [0.25] * 8)) == {}  # per-axis scales: no step
    assert output_steps(branchy()) == {}


def test_a_quantized_output_may_be_one_step_off_and_no_more():
    want = {"y": np.arange(16, dtype=np.float32).reshape(2, 8) * np.float32(0.25)}
    one = {"y": want["y"] + np.float32(0.25)}
    two = {"y": want["y"] + np.float32(0.5)}
    steps = {"y": 0.25}
    assert not compare_outputs(want, one).equivalent  # a float output: one step is an error
    assert compare_outputs(want, one, steps=steps).equivalent
    res = compare_outputs(want, two, steps=steps)
    assert not res.equivalent and "2 quantization steps" in res.worst.reason
    assert not compare_outputs(want, one, steps={"other": 0.25}).equivalent  # only the output named
