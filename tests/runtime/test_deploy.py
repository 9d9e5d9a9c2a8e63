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
