"""The torch runtime's executor (:mod:`gspo.runtime.torchrt.executor`) on torch's CPU device.

These machines have no GPU. What the CPU can check of the device path is the order of the
stream calls: :class:`~tests.runtime.torchrt.fake_streams.FakeStreams` says it is a device and
records every record, wait, ``use`` and synchronize while the tensors stay on the CPU, and each
segment's program logs the stream it ran on. The outputs are compared with onnxruntime's.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from onnx import TensorProto, helper  # noqa: E402

from gspo import ir  # noqa: E402
from gspo.ir import Graph, Node, Value  # noqa: E402
from gspo.ir.builder import GraphBuilder  # noqa: E402
from gspo.runtime import make_session, random_inputs, run  # noqa: E402
from gspo.runtime.bench import DeviceTime, measure_once  # noqa: E402
from gspo.runtime.cuda.common import CudaError  # noqa: E402
from gspo.runtime.torchrt import ops  # noqa: E402
from gspo.runtime.torchrt.convert import Fallback, StepError, convert  # noqa: E402
from gspo.runtime.torchrt.executor import TorchConfig, TorchExecutor, torch_flags  # noqa: E402
from gspo.streams import Schedule, assign_streams  # noqa: E402
from gspo.zoo import MODELS, build  # noqa: E402
from tests.helpers import branchy  # noqa: E402
from tests.runtime.torchrt.fake_streams import FakeStreams, entries, log_programs  # noqa: E402

CPU = TorchConfig(device="cpu")
F = TensorProto.FLOAT
RTOL, ATOL = 1e-3, 1e-4


def need(*names: str) -> None:
    missing = [n for n in names if ("", n) not in ops.OPS]
    if missing:
        pytest.skip(f"the torch op table lacks {', '.join(missing)} so far")


def parallel(branches: int = 3) -> Graph:
    """x -> ``branches`` parallel Relu -> Add(c_k) -> Relu chains, summed by a chain of Adds."""
    b = GraphBuilder("parallel")
    x = b.input("x", (2, 3))
    outs = []
    for k in range(branches):
        a = b.op("Relu", [b.op("Add", [b.op("Relu", [x]), b.const(f"c{k}", np.full((2, 3), k - 1, np.float32))])])
        outs.append(a)
    y = outs[0]
    for a in outs[1:]:
        y = b.op("Add", [y, a])
    return b.output(y).build()


def fallback_graph() -> Graph:
    """Two branches joined by Add; the first has an ai.onnx.ml Binarizer, which gspo keeps
    opaque and the torch table never runs."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Binarizer", ["r"], ["b"], domain="ai.onnx.ml", threshold=0.5),
             helper.make_node("Add", ["b", "c"], ["a1"]),
             helper.make_node("Relu", ["x"], ["s1"]),
             helper.make_node("Add", ["s1", "c"], ["a2"]),
             helper.make_node("Add", ["a1", "a2"], ["y"])]
    graph = helper.make_graph(nodes, "fallback", [helper.make_tensor_value_info("x", F, [2, 3])],
                              [helper.make_tensor_value_info("y", F, [2, 3])],
                              initializer=[helper.make_tensor("c", F, [3], [-1.0, 0.0, 1.0])],
                              value_info=[helper.make_tensor_value_info("b", F, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 8
    return ir.load_bytes(model.SerializeToString())


def reference(g: Graph, feeds) -> dict[str, np.ndarray]:
    return run(make_session(g), feeds)


def assert_close(got, want) -> None:
    assert list(got) == list(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=RTOL, atol=ATOL, err_msg=name)


def device_values(g: Graph, feeds) -> dict:
    """The feeds as tensors on torch's CPU device (``upload`` synchronizes a CUDA device)."""
    return {v.name: torch.from_numpy(np.ascontiguousarray(feeds[v.name]).copy()) for v in g.inputs}


def faked(g: Graph, schedule: Schedule | None, config: TorchConfig = CPU, **kwargs):
    log: list = []
    fake = FakeStreams(log)
    ex = TorchExecutor(g, schedule, config, streams=fake, **kwargs)
    log_programs(ex, fake)
    return ex, fake, log


# ------------------------------------------------------------------ order of the stream calls
def check_order(log: list, plan, one_stream: bool = False) -> None:
    """Every segment ran once on its own stream; its waits issued on that stream before it ran,
    its signals recorded on it after it ran, each wait after its record; every stream forked
    from the first and joined back to it, then all synchronized."""
    runs = {e[1]: (i, e[2]) for i, e in enumerate(log) if e[0] == "run"}
    assert sorted(runs) == [seg.index for seg in plan.segments], "each segment runs once"
    assert len(entries(log, "run")) == len(plan.segments)
    sid_of: dict[int, int] = {}
    for seg in plan.segments:
        sid = runs[seg.index][1]
        assert sid is not None, f"segment {seg.index} ran outside any use(stream)"
        assert sid_of.setdefault(0 if one_stream else seg.stream, sid) == sid, "a plan stream is one stream"
    assert len(set(sid_of.values())) == len(sid_of), "plan streams are distinct streams"
    runs_on: dict[int, list[int]] = {}
    for i, sid in sorted(runs.values()):
        runs_on.setdefault(sid, []).append(i)

    # fork: the first record, on the first stream, before anything runs; every other stream waits for it
    first_run = min(i for i, _ in runs.values())
    fork_at, fork = next((i, e) for i, e in enumerate(log) if e[0] == "record")
    first = fork[2]
    assert fork_at < first_run and sid_of.get(0, first) == first
    others = sorted(set(sid_of.values()) - {first})
    for sid in others:
        assert any(e == ("wait", sid, fork[1]) and fork_at < i < runs_on[sid][0] for i, e in enumerate(log)), \
            f"stream {sid} is not forked from the first before its first segment"

    waits_on: dict[int, list[tuple[int, int]]] = {}
    records_on: dict[int, list[tuple[int, int]]] = {}
    for i, e in enumerate(log):
        if e[0] == "wait":
            waits_on.setdefault(e[1], []).append((i, e[2]))
        elif e[0] == "record":
            records_on.setdefault(e[2], []).append((i, e[1]))

    def around(seg):
        """(events waited on its stream since its previous segment there, events recorded on it
        after it ran until its next segment there), each with its position."""
        at, sid = runs[seg.index]
        line = runs_on[sid]
        k = line.index(at)
        lo = line[k - 1] if k else -1
        hi = line[k + 1] if k + 1 < len(line) else len(log)
        waits = {eid: i for i, eid in waits_on.get(sid, ()) if lo < i < at}
        records = {eid: i for i, eid in records_on.get(sid, ()) if at < i < hi}
        return waits, records

    matched: dict[int, int] = {}
    for e in range(plan.num_events):
        (src,) = [seg for seg in plan.segments if e in seg.signals]
        (dst,) = [seg for seg in plan.segments if e in seg.waits]
        _, recorded = around(src)
        waited, _ = around(dst)
        both = [eid for eid in recorded if eid in waited and recorded[eid] < waited[eid]]
        assert both, (f"event {e}: no event recorded on segment {src.index}'s stream after it ran and waited on "
                      f"segment {dst.index}'s stream before it ran")
        matched[e] = both[0]
    assert len(set(matched.values())) == len(matched), "each of the plan's events is an event of its own"
    for seg in plan.segments:
        waited, recorded = around(seg)
        assert len(waited) >= len(seg.waits) and len(recorded) >= len(seg.signals)

    # join: each other stream records after its last segment; the first waits for it; then all synchronize
    last_run = max(i for i, _ in runs.values())
    joins = []
    for sid in others:
        rec = [(i, e[1]) for i, e in enumerate(log) if e[0] == "record" and e[2] == sid and i > runs_on[sid][-1]]
        waited = [i for i, e in enumerate(log) if e[0] == "wait" and e[1] == first and i > last_run
                  and any(e[2] == eid and r < i for r, eid in rec)]
        assert waited, f"stream {sid} is not joined back to the first after its last segment"
        joins.append(min(waited))
    synced = [i for i, e in enumerate(log) if e[0] == "sync"]
    assert {log[i][1] for i in synced} >= set(sid_of.values())
    assert all(i > j for i in synced for j in joins), "synchronized after the joins"
    use = [e for e in log if e[0] in ("use", "end_use")]
    assert len(use) % 2 == 0 and all(a[0] == "use" and b == ("end_use", a[1]) for a, b in zip(use[0::2], use[1::2]))


def graphs_for_order():
    yield "parallel2", lambda: parallel(2)
    yield "parallel3", lambda: parallel(3)
    yield "branchy", branchy
    yield "nasnet_mobile", lambda: build("nasnet_mobile", "tiny")


@pytest.mark.parametrize("make", [m for _, m in graphs_for_order()], ids=[n for n, _ in graphs_for_order()])
def test_events_are_recorded_after_and_waited_before_their_segments(make):
    g = make()
    missing = sorted({f.op_type for f in convert(g).fallbacks})
    if missing:
        pytest.skip(f"the torch op table lacks {', '.join(missing)} so far")
    schedule = assign_streams(g, max_streams=3)
    ex, fake, log = faked(g, schedule)
    assert ex.num_streams == schedule.num_streams >= 2 and ex.plan.num_events >= 1
    assert [e for e in log if e[0] == "stream"] == [("stream", k) for k in range(ex.num_streams)]
    del log[:]
    feeds = random_inputs(g)
    out = ex.run_device(device_values(g, feeds))
    check_order(log, ex.plan)
    assert_close({k: v.numpy() for k, v in out.items()}, reference(g, feeds))
    del log[:]
    ex.run_device(device_values(g, feeds))
    check_order(log, ex.plan)  # the same at every run
    ex.close()


def test_the_order_check_catches_events_moved_across_their_segments():
    """The check above fails on a log where a signal is recorded before its segment ran, or a
    wait issued after its segment ran (the executor's log, edited)."""
    g = parallel(3)
    ex, fake, log = faked(g, assign_streams(g, max_streams=3))
    del log[:]
    ex.run_device(device_values(g, random_inputs(g)))
    check_order(log, ex.plan)
    runs = {e[1]: i for i, e in enumerate(log) if e[0] == "run"}
    # a segment's log: its waits, ("use", s), ("run", k, s), ("end_use", s), its records
    src = next(seg.index for seg in ex.plan.segments if seg.signals)
    at = runs[src]
    assert log[at - 1][0] == "use" and log[at + 1][0] == "end_use" and log[at + 2][0] == "record"
    early = log[:at - 1] + [log[at + 2]] + log[at - 1:at + 2] + log[at + 3:]
    with pytest.raises(AssertionError, match="no event recorded"):
        check_order(early, ex.plan)
    dst = next(seg.index for seg in ex.plan.segments if seg.waits)
    at = runs[dst]
    assert log[at - 2][0] == "wait"
    late = log[:at - 2] + log[at - 1:at + 2] + [log[at - 2]] + log[at + 2:]
    with pytest.raises(AssertionError, match="no event recorded"):
        check_order(late, ex.plan)


def test_one_stream_runs_every_segment_on_a_single_stream():
    g = parallel(3)
    schedule = assign_streams(g, max_streams=3)
    ex, fake, log = faked(g, schedule, one_stream=True)
    assert ex.num_streams == 1 and len(fake.streams) == 1
    del log[:]
    feeds = random_inputs(g)
    out = ex.run_device(device_values(g, feeds))
    check_order(log, ex.plan, one_stream=True)
    assert {e[2] for e in entries(log, "run")} == {0}
    assert_close({k: v.numpy() for k, v in out.items()}, reference(g, feeds))


def test_device_timing_pairs_each_segment_on_its_stream():
    g = parallel(3)
    ex, fake, log = faked(g, assign_streams(g, max_streams=3))
    values = device_values(g, random_inputs(g))
    seconds, pieces = ex.time_run(values)
    assert [p.segment for p in pieces] == [seg.index for seg in ex.plan.segments]
    assert [p.stream for p in pieces] == [seg.stream for seg in ex.plan.segments]
    total_ms = seconds * 1e3
    assert total_ms > 0 and all(0 < p.start_ms < p.end_ms < total_ms for p in pieces)
    for a, b in zip(ex.plan.segments, ex.plan.segments[1:]):
        if a.stream == b.stream:
            assert pieces[a.index].end_ms <= pieces[b.index].start_ms
    timing = [e for e in fake.events if e.timing]
    assert len(timing) == 2 + 2 * len(ex.plan.segments)
    run_log = log[log.index(("record", timing[0].id, 0)):]
    check_order([e for e in run_log if not (e[0] == "record" and fake.events[e[1]].timing)], ex.plan)
    again, _ = ex.time_run(values)
    assert again == seconds and len([e for e in fake.events if e.timing]) == len(timing), "timing events reused"


# ------------------------------------------------------------------ CUDA graphs
def test_a_cpu_fallback_refuses_the_cuda_graph_and_runs_eagerly():
    need("Relu", "Add")
    g = fallback_graph()
    ex, fake, log = faked(g, assign_streams(g, max_streams=3), TorchConfig(device="cpu", cuda_graph=True))
    assert ex.graph_refusal is None
    feeds = random_inputs(g)
    del log[:]
    out = ex.run_device(device_values(g, feeds))
    (k, fallback), = ex.fallbacks
    assert ex.graph_refusal and "read back to the host" in ex.graph_refusal
    assert f"segment {k}" in ex.graph_refusal and "Binarizer" in ex.graph_refusal
    assert len(entries(log, "run")) == len(ex.plan.segments), "no warm-up or capture was tried"
    assert_close({n: v.numpy() for n, v in out.items()}, reference(g, feeds))


@pytest.mark.skipif(bool(torch.version.cuda), reason="a CUDA build of torch may capture; this checks the CPU build")
def test_a_failed_capture_is_said_and_the_run_eager(monkeypatch):
    g = parallel(3)
    ex, fake, log = faked(g, assign_streams(g, max_streams=3), TorchConfig(device="cpu", cuda_graph=True))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)  # the CPU build has no CUDA to wait for
    feeds = random_inputs(g)
    del log[:]
    out = ex.run_device(device_values(g, feeds))
    assert ex.graph_refusal and ex.graph_refusal.startswith("capture failed: ")
    assert len(entries(log, "run")) == 3 * len(ex.plan.segments), "two warm-ups, then the eager run"
    assert_close({n: v.numpy() for n, v in out.items()}, reference(g, feeds))
    del log[:]
    ex.run_device(device_values(g, feeds))
    assert len(entries(log, "run")) == len(ex.plan.segments), "the capture is not tried again"


def test_cuda_graphs_need_a_cuda_device():
    g = parallel(2)
    with TorchExecutor(g, None, TorchConfig(device="cpu", cuda_graph=True)) as ex:
        feeds = random_inputs(g)
        assert_close(ex.run(feeds), reference(g, feeds))
        assert ex.graph_refusal == "CUDA graphs need a CUDA device"


# ------------------------------------------------------------------ fallbacks, TF32, lifetime
def test_an_op_the_table_lacks_runs_on_onnxruntime_and_is_reported():
    need("Relu", "Add")
    g = fallback_graph()
    with TorchExecutor(g, assign_streams(g, max_streams=3), CPU) as ex:
        assert ex.num_streams >= 2
        ((k, fallback),) = ex.fallbacks
        assert isinstance(fallback, Fallback) and fallback.op_type == "Binarizer" and fallback.reason
        assert "Binarizer" in str(fallback)
        providers = ex.providers()
        assert len(providers) == len(ex.plan.segments)
        for j, p in enumerate(providers):
            assert p == (["torch:cpu", "onnxruntime:cpu"] if j == k else ["torch:cpu"])
        for seed in (0, 1):
            feeds = random_inputs(g, seed=seed)
            assert_close(ex.run(feeds), reference(g, feeds))


def torch_switches() -> tuple[bool, bool, bool]:
    """torch's process-wide switches an executor's runs set: TF32 in matmuls and in cuDNN, cuDNN's autotuner."""
    return torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark


def set_switches(matmul: bool, cudnn: bool, benchmark: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn
    torch.backends.cudnn.benchmark = benchmark


@pytest.fixture
def switches_kept():
    """torch's switches as they were before the test, put back after it."""
    before = torch_switches()
    yield
    set_switches(*before)


def seeing_switches(ex: TorchExecutor, seen: list, fail: bool = False) -> None:
    """Make each segment program of ``ex`` note torch's switches as it runs (``fail``: then fail)."""
    def watched(program):
        def run(values):
            seen.append(torch_switches())
            if fail:
                raise StepError("a step failed (stand-in)")
            return program(values)
        return run
    ex.programs = [watched(p) for p in ex.programs]


@pytest.mark.parametrize("tf32", [False, True])
def test_tf32_is_set_for_each_run_and_put_back_after_it(tf32, switches_kept):
    """An executor changes none of torch's process-wide switches when it is made; each run (and
    each timed run) has TF32 as asked, and after it, even a failed one, they are as they were."""
    g = parallel(2)
    feeds = random_inputs(g)
    outside = (not tf32, not tf32, False)
    set_switches(*outside)
    ex, fake, _ = faked(g, None, TorchConfig(device="cpu", tf32=tf32))
    assert torch_switches() == outside
    seen: list = []
    seeing_switches(ex, seen)
    out = ex.run_device(device_values(g, feeds))  # the stand-in streams say they are a device
    assert_close({k: v.numpy() for k, v in out.items()}, reference(g, feeds))
    ex.time_run(device_values(g, feeds))  # timed with (stand-in) events
    assert seen == [(tf32, tf32, False)] * 2 and torch_switches() == outside
    seeing_switches(ex, seen, fail=True)
    with pytest.raises(CudaError, match="stand-in"):
        ex.run_device(device_values(g, feeds))
    assert seen[-1] == (tf32, tf32, False) and torch_switches() == outside
    ex.close()


def test_on_cuda_a_run_also_turns_on_cudnns_autotuner_for_itself(switches_kept):
    set_switches(True, True, False)
    with torch_flags(TorchConfig(device="cuda", tf32=False)):  # torch's switches need no GPU to be set
        assert torch_switches() == (False, False, True)
        with torch_flags(TorchConfig(device="cpu", tf32=True)):
            assert torch_switches() == (True, True, True)
        assert torch_switches() == (False, False, True)
    assert torch_switches() == (True, True, False)


def test_run_device_and_the_timed_runner_on_torchs_cpu():
    g = parallel(3)
    feeds = random_inputs(g)
    want = reference(g, feeds)
    ex = TorchExecutor(g, assign_streams(g, max_streams=3), CPU)
    values = ex.upload(feeds)
    assert all(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in values.values())
    out = ex.run_device(values)
    assert list(out) == list(want) and all(isinstance(t, torch.Tensor) for t in out.values())
    assert_close({k: v.numpy() for k, v in out.items()}, want)
    runner = ex.timed_runner(feeds)
    result = runner()
    assert not isinstance(result, DeviceTime) and set(result) == set(want), "the host's clock on the CPU"
    assert measure_once(runner) > 0
    with pytest.raises(CudaError, match="device timing needs a CUDA device"):
        ex.time_run(values)
    ex.close()
    ex.close()
    with pytest.raises(CudaError, match="closed"):
        ex.run(feeds)


def test_close_waits_for_every_stream_once():
    g = parallel(3)
    ex, fake, log = faked(g, assign_streams(g, max_streams=3))
    n = ex.num_streams
    del log[:]
    ex.close()
    ex.close()
    assert log == [("sync", k) for k in range(n)] + [("close",)] and fake.closed == 1
    with pytest.raises(CudaError, match="closed"):
        ex.run_device({})


def test_an_output_that_is_a_weight_is_returned():
    need("Add")
    c = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = Value("x", F, (2, 3))
    add = Node("Add", ("x", "c"), (Value("y", F, (2, 3)),), name="add")
    from gspo.ir.weights import Literal

    g = Graph(inputs=(x,), outputs=(add.outputs[0], Value("c", F, (2, 3))), nodes=(add,),
              weights={"c": Literal.from_array(c)}).check()
    feeds = random_inputs(g)
    with TorchExecutor(g, None, CPU) as ex:
        assert_close(ex.run(feeds), reference(g, feeds))


def test_a_graph_without_ops_returns_its_inputs():
    x = Value("x", F, (2, 3))
    g = Graph(inputs=(x,), outputs=(x,), nodes=(), weights={}).check()
    feeds = random_inputs(g)
    with TorchExecutor(g, None, CPU) as ex:
        assert_close(ex.run(feeds), feeds)


# ------------------------------------------------------------------ the zoo, end to end
@pytest.mark.parametrize("name", sorted(MODELS))
def test_tiny_zoo_models_match_onnxruntime_on_one_and_several_streams(name):
    g = build(name, "tiny")
    missing = sorted({f.op_type for f in convert(g).fallbacks})
    if missing:
        if name in ("nasrnn", "squeezenet"):
            pytest.skip(f"{name} must run once the table has {', '.join(missing)} (missing so far)")
        pytest.skip(f"the torch op table lacks {', '.join(missing)} so far")
    feeds = random_inputs(g)
    want = reference(g, feeds)
    several = assign_streams(g, max_streams=3)
    for schedule, one_stream in ((None, False), (several, False), (several, True)):
        with TorchExecutor(g, schedule, CPU, one_stream=one_stream) as ex:
            assert not ex.fallbacks
            assert_close(ex.run(feeds), want)
