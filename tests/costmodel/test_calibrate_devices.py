"""Calibration measures the same variants on every device kind: a fork-join graph or parallel
piece on streams, as one session, and its pieces in order (the fit needs all three)."""

from __future__ import annotations

import pytest

import gspo.costmodel.calibrate as cal
from gspo.costmodel.calibrate import CalibrationConfig
from gspo.costmodel.microbench import Bench, chains, multi_branch
from gspo.runtime import DeviceTime


class FakeDeviceExecutor:
    """Stands for the CUDA executor: times itself (DeviceTime) by what it was built to run."""

    def __init__(self, made: list, graph, schedule, one_stream: bool):
        self.num_streams = 1 if schedule is None or one_stream else schedule.num_streams
        self.kind = "one_session" if schedule is None else ("in_order" if one_stream else "streams")
        made.append(self.kind)

    def timed_runner(self, feeds):
        seconds = {"one_session": 0.004, "in_order": 0.005, "streams": 0.003}[self.kind]
        return lambda: DeviceTime(seconds)

    def close(self) -> None:
        pass


def _cfg(backend: str, tmp_path) -> CalibrationConfig:
    return CalibrationConfig(f"{backend}:test", "x", str(tmp_path / "db.sqlite"), min_runs=2, max_runs=2, target_s=0,
                             backend=backend, cuda_runtime="torch" if backend == "cuda" else None)


@pytest.fixture
def fake_cuda_executor(monkeypatch):
    made: list = []

    def device_executor(graph, schedule, device, one_stream=False, *, runtime=None):
        assert device == "cuda" and runtime == "torch"  # the runtime calibrate --gpu chose, passed on
        return FakeDeviceExecutor(made, graph, schedule, one_stream)

    monkeypatch.setattr(cal, "device_executor", device_executor)
    return made


FORKED = [Bench("branches", multi_branch(count=4)[0].spec), Bench("piece", {"label": "x", "parallel": True})]


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_a_fork_join_graph_is_also_timed_as_one_session_on_every_device(backend, tmp_path, monkeypatch,
                                                                       fake_cuda_executor):
    bench = FORKED[0]
    d = cal._measure_bench(bench, _cfg(backend, tmp_path))
    assert {"seconds", "one_session", "segments_in_order", "streams"} <= set(d)
    assert d["streams"] >= 2 and all(d[k] > 0 for k in ("seconds", "one_session", "segments_in_order"))
    if backend == "cuda":
        assert sorted(fake_cuda_executor) == ["in_order", "one_session", "streams"]
        assert (d["seconds"], d["one_session"], d["segments_in_order"]) == (0.003, 0.004, 0.005)


def test_a_parallel_piece_on_cuda_is_timed_as_one_session_too(tmp_path, monkeypatch, fake_cuda_executor):
    graph = FORKED[0].build()  # a fork-join graph stands for the zoo piece
    monkeypatch.setattr(Bench, "build", lambda self: graph)
    d = cal._measure_bench(FORKED[1], _cfg("cuda", tmp_path))
    assert d["one_session"] == 0.004 and d["seconds"] == 0.003


def test_a_chain_on_cuda_is_one_session_timed_on_the_device(tmp_path, fake_cuda_executor):
    d = cal._measure_bench(chains(count=1)[0], _cfg("cuda", tmp_path))
    assert fake_cuda_executor == ["one_session"] and d == {"seconds": 0.004, "streams": 1}
