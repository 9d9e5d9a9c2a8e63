"""Every runner and executor the runtime builds has the shape its protocol names."""

from __future__ import annotations

import numpy as np
import pytest

from gspo.ir import serialize
from gspo.ir.builder import GraphBuilder
from gspo.runtime import CpuExecutor, Executor, Runner, make_session, random_inputs
from gspo.runtime.backends import available_backends, load_runner
from gspo.runtime.cuda import CudaExecutor
from gspo.streams import assign_streams
from tests.helpers import branchy
from tests.runtime import fake_cuda


def _two_outputs():
    b = GraphBuilder(seed=1)
    x = b.input("x", (1, 8))
    return b.output(b.op("Relu", [x]), b.op("Neg", [x])).build()


@pytest.mark.parametrize("backend", available_backends())
def test_every_available_backends_runner_is_a_runner_answering_in_the_order_asked(backend):
    g = _two_outputs()
    runner = load_runner(backend, serialize(g))
    assert isinstance(runner, Runner)
    feeds = random_inputs(g, 0)
    relu, neg = (v.name for v in g.outputs)
    got = runner.run([neg, relu], feeds)
    np.testing.assert_allclose(got[0], -feeds["x"], rtol=1e-6)
    np.testing.assert_allclose(got[1], np.maximum(feeds["x"], 0), rtol=1e-6)


def test_the_cuda_runner_is_a_runner(monkeypatch):
    import gspo.runtime.backends as backends

    monkeypatch.setattr(backends, "_cuda_checked", {})
    fake_cuda.install(monkeypatch)
    assert isinstance(load_runner("cuda", serialize(_two_outputs())), Runner)


def _answers_as_an_executor(ex, g, streams: int, computes: bool = True) -> None:
    """``ex`` has the protocol's members and they answer for ``g`` (a protocol check alone sees
    only that the names exist): its outputs by name, as host arrays (``computes``: onnxruntime's
    values; the stand-in CUDA's are not)."""
    assert isinstance(ex, Executor)
    assert ex.graph is g and tuple(ex.outputs) == tuple(g.output_names()) and ex.num_streams == streams
    feeds = random_inputs(g, 0)
    want = make_session(g).run(None, feeds)
    got = ex.run(feeds)
    assert list(got) == list(g.output_names()) and all(isinstance(v, np.ndarray) for v in got.values())
    for name, value in zip(g.output_names(), want if computes else ()):
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6)


def test_both_executors_are_executors_and_a_plain_session_is_not(monkeypatch):
    g = branchy()
    for schedule in (None, assign_streams(g)):
        with CpuExecutor(g, schedule) as ex:
            _answers_as_an_executor(ex, g, schedule.num_streams if schedule else 1)
    fake_cuda.install(monkeypatch)
    with CudaExecutor(g, assign_streams(g)) as ex:
        _answers_as_an_executor(ex, g, 2, computes=False)
    session = make_session(g)
    assert isinstance(session, Runner) and not isinstance(session, Executor)
