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


def test_both_executors_are_executors_and_a_plain_session_is_not(monkeypatch):
    g = branchy()
    for schedule in (None, assign_streams(g)):
        with CpuExecutor(g, schedule) as ex:
            assert isinstance(ex, Executor) and isinstance(ex, CpuExecutor)
    fake_cuda.install(monkeypatch)
    with CudaExecutor(g, assign_streams(g)) as ex:
        assert isinstance(ex, Executor)
    session = make_session(g)
    assert isinstance(session, Runner) and not isinstance(session, Executor)
