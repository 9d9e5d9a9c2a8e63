"""The CPU multi-stream executor computes what plain onnxruntime computes, and never hangs."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gspo.errors import GspoError
from gspo.ir.builder import GraphBuilder
from gspo.runtime import CpuExecutor, make_plan, make_session, random_inputs, run
from gspo.streams import Schedule, assign_streams
from gspo.zoo import MODELS, build
from tests.helpers import random_dag_graph


def assert_same_as_onnxruntime(graph, schedule, seed=0):
    feeds = random_inputs(graph, seed)
    ref = run(make_session(graph), feeds)
    with CpuExecutor(graph, schedule) as ex:
        for _ in range(2):  # a second run reuses the persistent workers
            got = ex.run(feeds)
    assert list(got) == list(ref)
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("cap", [None, 2])
def test_zoo_models_match_plain_onnxruntime(name, cap):
    g = build(name, "tiny")
    assert_same_as_onnxruntime(g, assign_streams(g, max_streams=cap))


@st.composite
def dags(draw):
    return random_dag_graph(draw, st, 20, shape=(2, 3))


@settings(max_examples=25, deadline=None)
@given(dags(), st.sampled_from([None, 2, 3]))
def test_random_dags_match_plain_onnxruntime(graph, cap):
    assert_same_as_onnxruntime(graph, assign_streams(graph, max_streams=cap))


def test_one_stream_is_one_plain_session():
    g = build("resnet50", "tiny")
    with CpuExecutor(g, Schedule.single(g)) as ex:
        assert ex.plan is None and ex.num_streams == 1


def test_plan_events_pair_one_signal_with_one_wait():
    g = build("nasnet_mobile", "tiny")
    plan = make_plan(g, assign_streams(g))
    signals = [e for seg in plan.segments for e in seg.signals]
    waits = [e for seg in plan.segments for e in seg.waits]
    assert sorted(signals) == sorted(set(signals)) == list(range(plan.num_events))
    assert sorted(set(waits)) == list(range(plan.num_events))
    for seg in plan.segments:
        for e in seg.waits:
            src = next(s for s in plan.segments if e in s.signals)
            assert src.stream != seg.stream and src.index < seg.index
    assert sorted(i for seg in plan.segments for i in seg.ops) == list(range(len(g.nodes)))


def test_a_failing_stream_does_not_deadlock_the_others():
    b = GraphBuilder()
    idx = b.input("idx", (2,), dtype=7)
    x = b.input("x", (2, 3))
    table = b.weight("table", (4, 3))
    gathered = b.op("Gather", [table, idx])  # fails at run time for an index >= 4
    slow = x
    for _ in range(4):
        slow = b.op("Tanh", [slow])
    g = b.output(b.op("Add", [b.op("Relu", [gathered]), slow])).build()
    schedule = assign_streams(g)
    assert schedule.num_streams == 2
    ex = CpuExecutor(g, schedule)
    result = {}

    def go():
        try:
            ex.run({"idx": np.array([0, 9]), "x": np.ones((2, 3), np.float32)})
        except GspoError as e:
            result["error"] = str(e)

    t = threading.Thread(target=go)
    t.start()
    t.join(timeout=30)
    assert not t.is_alive(), "the executor hung"
    assert "onnxruntime failed on stream" in result["error"]
    ok = ex.run({"idx": np.array([0, 3]), "x": np.ones((2, 3), np.float32)})  # still usable
    assert ok[g.outputs[0].name].shape == (2, 3)
    ex.close()


def test_trace_records_every_segment():
    g = build("inception_v3", "tiny")
    with CpuExecutor(g, assign_streams(g, max_streams=2)) as ex:
        trace: list = []
        ex.run(random_inputs(g), trace=trace)
        assert sorted(t.segment for t in trace) == list(range(len(ex.plan.segments)))
        assert all(t.wait_start <= t.start <= t.end for t in trace)


def test_a_weight_returned_as_a_graph_output_comes_back_from_streams():
    b = GraphBuilder()
    x = b.input("x", (2, 4))
    w = b.const("w", np.arange(8, dtype=np.float32).reshape(2, 4))
    b.output(b.op("Relu", [x]), b.op("Neg", [x]), w)
    g = b.build()
    schedule = assign_streams(g, max_streams=2)
    assert schedule.num_streams == 2
    with CpuExecutor(g, schedule) as ex:
        out = ex.run({"x": np.ones((2, 4), np.float32)})
    assert np.array_equal(out[w], np.arange(8, dtype=np.float32).reshape(2, 4))
