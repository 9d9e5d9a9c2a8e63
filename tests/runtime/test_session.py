"""Session options: one helper builds them, each setting reaches onnxruntime; its parallel execution
mode (a benchmark peer) computes the same."""

from __future__ import annotations

import os

import numpy as np
import onnxruntime as ort
import pytest

from gspo.runtime import SessionConfig, make_session, random_inputs
from gspo.runtime.session import OPTIMIZATION_LEVELS, session_options
from tests.helpers import branchy


def test_parallel_mode_is_set_and_computes_the_same():
    g = branchy()
    feeds = random_inputs(g)
    plain = make_session(g)
    par = make_session(g, SessionConfig(parallel_mode=True))
    assert plain.get_session_options().execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
    assert par.get_session_options().execution_mode == ort.ExecutionMode.ORT_PARALLEL
    for a, b in zip(plain.run(None, feeds), par.run(None, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_session_options_each_option_reaches_the_session_options():
    so = session_options(ort, threads=3, allow_spinning=False, optimization="basic", inter_op_threads=2,
                         parallel=True, log_severity=3, entries={"session.use_env_allocators": "1"})
    assert so.intra_op_num_threads == 3 and so.inter_op_num_threads == 2
    assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    assert so.execution_mode == ort.ExecutionMode.ORT_PARALLEL
    assert so.log_severity_level == 3
    assert so.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert so.get_session_config_entry("session.inter_op.allow_spinning") == "0"
    assert so.get_session_config_entry("session.use_env_allocators") == "1"
    assert session_options(ort, allow_spinning=True).get_session_config_entry("session.intra_op.allow_spinning") == "1"


def test_session_options_left_out_keep_onnxruntimes_defaults():
    default, so = ort.SessionOptions(), session_options(ort)
    for name in ("intra_op_num_threads", "inter_op_num_threads", "graph_optimization_level", "execution_mode",
                 "optimized_model_filepath"):
        assert getattr(so, name) == getattr(default, name), name
    with pytest.raises(RuntimeError, match="does not have configuration"):
        so.get_session_config_entry("session.intra_op.allow_spinning")
    assert so.log_severity_level == 4


@pytest.mark.parametrize("level", sorted(OPTIMIZATION_LEVELS))
def test_every_optimization_level_names_onnxruntimes(level):
    want = getattr(ort.GraphOptimizationLevel, OPTIMIZATION_LEVELS[level])
    assert session_options(ort, optimization=level).graph_optimization_level == want
    assert make_session(branchy(), SessionConfig(optimization=level)).get_session_options().graph_optimization_level == want


def test_make_session_writes_the_graph_onnxruntime_runs_where_asked(tmp_path):
    path = tmp_path / "ort.onnx"
    so = make_session(branchy(), optimized_path=str(path)).get_session_options()
    assert so.optimized_model_filepath == str(path) and path.stat().st_size > 0
    assert make_session(branchy()).get_session_options().optimized_model_filepath == ""


def test_make_session_builds_its_options_from_the_config():
    so = make_session(branchy(), SessionConfig(intra_op_threads=1, allow_spinning=True)).get_session_options()
    assert so.intra_op_num_threads == 1 and so.inter_op_num_threads == 1
    assert so.get_session_config_entry("session.intra_op.allow_spinning") == "1"
    par = make_session(branchy(), SessionConfig(parallel_mode=True)).get_session_options()
    assert par.inter_op_num_threads == (os.cpu_count() or 1)
    assert par.get_session_config_entry("session.inter_op.allow_spinning") == "0"


# ------------------------------------------------------------------ large outputs
def _wide(n=6):
    from gspo.ir.builder import GraphBuilder

    b = GraphBuilder(seed=3)
    x = b.input("x", (n, n))
    return b.output(b.op("Relu", [x]), b.op("Neg", [x])).build()


def test_large_outputs_are_written_into_pooled_arrays_a_caller_keeps(monkeypatch):
    import gspo.runtime.session as session

    monkeypatch.setattr(session, "LARGE_OUTPUT", 16)  # every output here is "large"
    g = _wide()
    sess = make_session(g)
    assert isinstance(sess, session._BoundSession)
    x1 = np.arange(36, dtype=np.float32).reshape(6, 6) - 18
    x2 = -x1
    first = sess.run(None, {"x": x1})
    kept = [a.copy() for a in first]
    second = sess.run(None, {"x": x2})
    np.testing.assert_array_equal(first[0], np.maximum(x1, 0))
    np.testing.assert_array_equal(first[1], -x1)
    np.testing.assert_array_equal(second[0], np.maximum(x2, 0))
    for a, b in zip(first, kept):  # the first run's outputs were not overwritten by the second
        np.testing.assert_array_equal(a, b)
    assert sess.get_outputs()[0].name == g.output_names()[0]  # the rest is the session's own


def test_only_large_outputs_are_bound_and_a_wrong_declared_shape_falls_back(monkeypatch):
    import gspo.runtime.session as session

    assert not isinstance(make_session(_wide()), session._BoundSession)  # 144 B: plain
    monkeypatch.setattr(session, "LARGE_OUTPUT", 16)
    sess = make_session(_wide())
    sess._large = {k: ((3, 3), v[1]) for k, v in sess._large.items()}  # a shape the model does not give
    x = np.ones((6, 6), np.float32)
    out = sess.run(None, {"x": x})
    assert out[0].shape == (6, 6) and sess._large == {}


def test_a_cpu_session_does_not_keep_the_serialized_model_and_still_runs():
    """onnxruntime's Python session kept the model's bytes (its weights) for its whole life, to
    rebuild itself on fallback providers a CPU-only session does not have."""
    import tracemalloc

    from gspo.ir.builder import GraphBuilder

    b = GraphBuilder("big", seed=0)
    x = b.input("x", (1, 1024))
    y = b.op("MatMul", [x, b.weight("w", (1024, 4096))])  # 16 MB of weights
    g = b.output(y).build()
    feeds = random_inputs(g, seed=0)
    tracemalloc.start()
    try:
        held_before = tracemalloc.get_traced_memory()[0]
        session = make_session(g)
        held = tracemalloc.get_traced_memory()[0] - held_before
    finally:
        tracemalloc.stop()
    assert held < 4 * 2**20, held  # the 16 MB serialized model is not held by the session
    (out,) = session.run(None, feeds)
    w = g.weights["w"].evaluate(g.store)
    np.testing.assert_allclose(out, feeds["x"] @ w, rtol=1e-4, atol=1e-4)
