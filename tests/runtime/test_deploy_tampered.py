"""A schedule or placement read from a model's metadata is checked against bounds the graph gives
(no empty stream, no more streams than ops, no more than MAX_SAVED_STREAMS threads, known
backends, each op placed once) before any thread or session starts: one line, exit 2."""

from __future__ import annotations

import json
import threading

import onnx
import onnxruntime
import pytest
from click.testing import CliRunner

import gspo
from gspo import ir
from gspo.cli import cli
from gspo.errors import GspoError
from gspo.ir.builder import GraphBuilder
from gspo.ir.onnx_io import PLACEMENT_KEY, SCHEDULE_KEY
from gspo.streams import Placement, Schedule, assign_streams, node_id
from gspo.streams.schedule import MAX_SAVED_STREAMS
from tests.helpers import branchy, one_line_error, python_calls


def _tampered(path, key: str, change) -> str:
    """The model at ``path`` with its metadata ``key`` (JSON) passed through ``change``."""
    m = onnx.load(str(path))
    for p in m.metadata_props:
        if p.key == key:
            p.value = json.dumps(change(json.loads(p.value)))
    onnx.save(m, str(path))
    return str(path)


def _two_streams(tmp_path) -> str:
    g = branchy()
    schedule = assign_streams(g, max_streams=2)
    assert schedule.num_streams == 2
    return str(ir.save(g, tmp_path / "m.onnx", schedule=schedule.to_json()))


def _refused(path, match: str) -> tuple[str, int]:
    """The one-line error ``gspo.InferenceSession(path)`` raises before any thread or onnxruntime
    session starts, with no thread left behind; and the Python calls it took (its work)."""
    threads, started = threading.active_count(), []
    real_start = threading.Thread.start

    def refusing():
        with pytest.raises(GspoError, match=match) as e:
            gspo.InferenceSession(path)
        return e

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(threading.Thread, "start", lambda self: started.append(self.name) or real_start(self))
        mp.setattr(onnxruntime, "InferenceSession", lambda *a, **k: started.append("a session") or pytest.fail())
        e, calls = python_calls(refusing)
    assert started == []
    assert threading.active_count() == threads
    assert "\n" not in str(e.value)
    return str(e.value), calls


def test_a_schedule_with_empty_streams_is_refused_before_a_thread_starts(tmp_path):
    path = _tampered(_two_streams(tmp_path), SCHEDULE_KEY, lambda d: {**d, "streams": d["streams"] + [[]] * 1000})
    message, _ = _refused(path, "empty")
    assert "1002 streams" in message


def test_the_issues_100000_empty_streams_are_refused_at_once(tmp_path):
    """At once: a few Python calls per stream saved, no thread or session started."""
    path = _tampered(_two_streams(tmp_path), SCHEDULE_KEY, lambda d: {**d, "streams": d["streams"] + [[]] * 100_000})
    _, calls = _refused(path, "empty")
    assert calls <= 10 * 100_000, calls


def test_a_schedule_with_more_streams_than_the_cap_is_refused(tmp_path):
    b = GraphBuilder("wide")
    x = b.input("x", (1, 4))
    outs = [b.op("Relu", [x]) for _ in range(MAX_SAVED_STREAMS + 1)]
    g = b.output(*outs).build()
    wide = Schedule(tuple((node_id(n),) for n in g.nodes))
    path = ir.save(g, tmp_path / "wide.onnx", schedule=wide.to_json())
    assert f"at most {MAX_SAVED_STREAMS}" in _refused(str(path), "streams")[0]


def test_an_unknown_backend_in_a_saved_placement_is_refused_before_anything_runs(tmp_path):
    g = branchy()
    path = ir.save(g, tmp_path / "p.onnx", placement=Placement.whole(g, "openvino").to_json())
    path = _tampered(path, PLACEMENT_KEY, lambda d: {**d, "backends": {"nope": d["backends"]["openvino"]}})
    assert "'nope'" in _refused(path, "backend")[0]


def test_an_op_placed_on_two_backends_is_refused(tmp_path):
    g = branchy()
    ops = [node_id(n) for n in g.nodes]
    path = ir.save(g, tmp_path / "p.onnx", placement=Placement.whole(g, "openvino").to_json())
    path = _tampered(path, PLACEMENT_KEY, lambda d: {**d, "backends": {"openvino": ops[:2], "cuda": ops[:1]}})
    _refused(path, "twice")


def test_gspo_run_of_a_tampered_schedule_is_one_line_and_exit_2(tmp_path):
    path = _tampered(_two_streams(tmp_path), SCHEDULE_KEY, lambda d: {**d, "streams": d["streams"] + [[]] * 100_000})
    result = CliRunner().invoke(cli, ["run", path], catch_exceptions=False)
    assert "empty" in one_line_error(result)


def test_stream_threads_the_system_refuses_are_one_line_and_none_is_left(monkeypatch):
    from gspo.runtime.cpu import CpuExecutor

    g = branchy()
    schedule = assign_streams(g, max_streams=2)
    started = []
    real = threading.Thread.start

    def start(self):
        if self.name.startswith("gspo-stream-") and started:
            raise RuntimeError("can't start new thread")
        started.append(self)
        real(self)

    threads = threading.active_count()
    monkeypatch.setattr(threading.Thread, "start", start)
    with pytest.raises(GspoError, match="cannot start the 2 stream threads"):
        CpuExecutor(g, schedule)
    monkeypatch.undo()
    assert not any(t.is_alive() for t in started)
    assert threading.active_count() == threads
