"""gspo.InferenceSession: an optimized model run as saved, with onnxruntime's call shape."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import gspo
from gspo import ir
from gspo.errors import GspoError
from gspo.streams import assign_streams
from tests.helpers import branchy, random_array


def _feeds(sess):
    return {a.name: random_array(a.shape, seed=1) for a in sess.get_inputs()}


def _same_io(mine, theirs):
    assert [(a.name, a.type, list(a.shape)) for a in mine.get_inputs()] == \
        [(a.name, a.type, list(a.shape)) for a in theirs.get_inputs()]
    assert [(a.name, a.type, list(a.shape)) for a in mine.get_outputs()] == \
        [(a.name, a.type, list(a.shape)) for a in theirs.get_outputs()]


def test_a_model_without_schedule_is_a_bare_onnxruntime_session(tmp_path):
    path = str(ir.save(branchy(), tmp_path / "plain.onnx"))
    sess, bare = gspo.InferenceSession(path), ort.InferenceSession(path)
    assert isinstance(sess.run.__self__, ort.InferenceSession)  # its run is onnxruntime's own
    assert sess.num_streams == 1
    _same_io(sess, bare)
    feeds = _feeds(bare)
    np.testing.assert_array_equal(sess.run(None, feeds)[0], bare.run(None, feeds)[0])


def test_a_saved_two_stream_schedule_is_followed_with_the_same_outputs(tmp_path):
    from gspo.zoo import build

    g = build("inception_v3", "tiny")
    schedule = assign_streams(g, max_streams=2)
    assert schedule.num_streams == 2
    path = str(ir.save(g, tmp_path / "sched.onnx", schedule=schedule.to_json()))
    bare = ort.InferenceSession(path)  # ignores the schedule
    feeds = _feeds(bare)
    want = bare.run(None, feeds)
    with gspo.InferenceSession(path) as sess:
        assert sess.num_streams == 2
        _same_io(sess, bare)
        got = sess.run(None, feeds)
        assert len(got) == len(want)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        name = bare.get_outputs()[0].name
        np.testing.assert_allclose(sess.run([name], feeds)[0], want[0], rtol=1e-5, atol=1e-6)
        with pytest.raises(GspoError, match="'nope' is not an output"):
            sess.run(["nope"], feeds)
    assert gspo.InferenceSession(path, streams=1).num_streams == 1


def test_the_thread_setting_saved_by_optimize_is_applied_unless_options_are_given(tmp_path):
    """gspo.settings ({"threads": 1}) in the model: the deploy API's plain session runs at 1
    intra-op thread, as gspo run does; sess_options given by the caller win."""
    from gspo.runtime.settings import RunSettings, with_settings

    path = ir.save(with_settings(branchy(), RunSettings(1)), tmp_path / "m.onnx")
    sess = gspo.InferenceSession(path)
    assert sess._session.get_session_options().intra_op_num_threads == 1
    theirs = ort.SessionOptions()
    theirs.intra_op_num_threads = 2
    assert gspo.InferenceSession(path, theirs)._session.get_session_options().intra_op_num_threads == 2
    plain = ir.save(branchy(), tmp_path / "plain.onnx")
    assert gspo.InferenceSession(plain)._session.get_session_options().intra_op_num_threads == 0
    np.testing.assert_allclose(sess.run(None, _feeds(sess))[0], gspo.InferenceSession(plain).run(None, _feeds(sess))[0])


def test_a_scheduled_model_checks_its_inputs_as_onnxruntime_does(tmp_path):
    g = branchy()
    path = str(ir.save(g, tmp_path / "sched.onnx", schedule=assign_streams(g, max_streams=2).to_json()))
    x = random_array((1, 4, 8, 8))
    with gspo.InferenceSession(path) as sess:
        assert sess.num_streams == 2
        sess.run(None, {"x": x})
        with pytest.raises(GspoError, match=r"missing: \['x'\]"):
            sess.run(None, {})
        with pytest.raises(GspoError, match=r"unknown: \['y'\]"):
            sess.run(None, {"x": x, "y": x})
        with pytest.raises(GspoError, match="float64"):  # OpenVINO converted it silently; onnxruntime refuses
            sess.run(None, {"x": x.astype(np.float64)})
        with pytest.raises(GspoError, match="x"):
            sess.run(None, {"x": x[:, :, :4]})


def test_on_cuda_each_session_runs_on_the_runtime_it_asks_for(tmp_path, monkeypatch):
    """The runtime is the session's own (``cuda_runtime``), never left for the next one: here the
    stand-in onnxruntime-gpu works and torch does not (tests/runtime/fake_cuda.py)."""
    from gspo.runtime.cuda.executor import CudaExecutor
    from tests.runtime import fake_cuda

    log: list = []
    fake_cuda.install(monkeypatch, fake_cuda.FakeOrt(log, compute=True), fake_cuda.FakeCudart(log), log)
    g = branchy()
    path = str(ir.save(g, tmp_path / "m.onnx"))
    with pytest.raises(GspoError, match=r"^--device cuda --cuda-runtime torch: "):
        gspo.InferenceSession(path, device="cuda", cuda_runtime="torch")
    bare = ort.InferenceSession(path)
    feeds = _feeds(bare)
    for asked in (None, "ort", "auto"):  # None: $GSPO_CUDA_RUNTIME (unset), else auto: ort here
        with gspo.InferenceSession(path, device="cuda", cuda_runtime=asked) as sess:
            assert type(sess._executor) is CudaExecutor
            np.testing.assert_allclose(sess.run(None, feeds)[0], bare.run(None, feeds)[0], rtol=1e-5, atol=1e-6)
