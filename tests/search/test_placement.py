"""Backend placement: pieces timed on every backend (cached), compile failures refused with a
reason, mixed placements only where they pay, placed models run and saved."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from gspo import ir
from gspo.costmodel.db import CalibrationDB
from gspo.ir.builder import GraphBuilder
from gspo.runtime import CpuExecutor, make_executor, make_session, random_inputs, run
from gspo.runtime.backends import backend_status
from gspo.search import optimize
from gspo.search import placement as pl
from gspo.search.strategies import Strategies
from gspo.streams import Placement, node_id
from tests.search.fakes import ScriptedTimings

needs_openvino = pytest.mark.skipif(not backend_status("openvino")[0], reason="OpenVINO is not installed")


def _chain(n=3, size=16):
    b = GraphBuilder(seed=1)
    x = b.input("x", (1, 4, size, size))
    for _ in range(n):
        x = b.op("Relu", [b.op("Conv", [x, b.weight("w", (4, 4, 3, 3))], kernel_shape=[3, 3], pads=[1] * 4)])
    return b.output(x).build()


def test_mixed_placement_only_where_the_crossings_pay():
    from gspo.partition.pieces import make_piece

    g = _chain(2)
    pieces = [make_piece(g, [0, 1]).graph, make_piece(g, [2, 3]).graph]  # the second reads the first's output
    fast_apart = [pl.PieceTimes({"ort": 1e-3, "openvino": 5e-4}), pl.PieceTimes({"ort": 5e-4, "openvino": 1e-3})]
    chosen, est = pl.mixed_placement(pieces, fast_apart, fixed=1e-5, bandwidth=1e10, backends=("ort", "openvino"))
    assert chosen is not None and est.pieces == {"ort": 1, "openvino": 1}
    expensive, est = pl.mixed_placement(pieces, fast_apart, fixed=1e-3, bandwidth=1e10, backends=("ort", "openvino"))
    assert expensive is None and est.mixed_s > min(est.whole_s.values())
    same, _ = pl.mixed_placement(pieces, [pl.PieceTimes({"ort": 1e-3, "openvino": 2e-3})] * 2, 0.0, 1e10,
                                 ("ort", "openvino"))
    assert same is None  # every piece prefers one backend: nothing to mix


def test_piece_times_are_cached_and_a_second_run_measures_nothing(tmp_path):
    g = _chain(2)
    feeds = [[random_inputs(g, 0)]]
    db = CalibrationDB(tmp_path / "c.sqlite", "cpu:test", "ort-test")
    first = pl.time_pieces([g], feeds, ("ort",), db, runs=3)
    assert not first[0].cached and first[0].seconds["ort"] > 0

    def no_measuring(*a, **k):
        raise AssertionError("measured again")

    again = pl.time_pieces([g], feeds, ("ort",), db, runs=3, measure=no_measuring)
    assert again[0].cached and again[0].seconds == first[0].seconds
    db.close()


@needs_openvino
def test_a_model_forced_onto_each_backend_computes_the_same():
    g = _chain(3)
    feeds = random_inputs(g, 0)
    want = run(make_session(g), feeds)
    half = Placement.of({node_id(n): "openvino" for n in g.nodes[2:4]})
    for placement in (None, Placement.whole(g, "openvino"), half):
        with CpuExecutor(g, None, placement=placement) as ex:
            got = ex.run(feeds)
        np.testing.assert_allclose(got[g.outputs[0].name], want[g.outputs[0].name], rtol=1e-4, atol=1e-5)


def _det_model(tmp_path):
    """``Relu -> Reshape -> Det``: OpenVINO has no conversion rule for Det."""
    from onnx import helper

    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Reshape", ["r", "shape"], ["sq"]),
             helper.make_node("Det", ["sq"], ["y"])]
    init = [onnx.numpy_helper.from_array(np.array([3, 3], np.int64), "shape")]
    g = helper.make_graph(nodes, "det", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 9])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], initializer=init)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    p = tmp_path / "det.onnx"
    p.write_bytes(m.SerializeToString())
    return p


@needs_openvino
def test_a_piece_a_backend_cannot_compile_is_refused_with_its_reason_not_fatal(tmp_path):
    g = ir.load(_det_model(tmp_path))
    times = pl.time_pieces([g], [[random_inputs(g, 0)]], ("ort", "openvino"), None, runs=3)
    assert "No conversion rule found for operations: Det" in times[0].refused["openvino"]
    assert times[0].best() == "ort"
    r = optimize(_det_model(tmp_path), budget=2, timing_runs=5, jobs=1, db_path=str(tmp_path / "c.sqlite"),
                 backends=("ort", "openvino"))
    refused = [o for o in r.report["final_candidates"] if o["label"] == "original@openvino"]
    assert refused and "Det" in refused[0]["rejected"] and r.placement is None


@needs_openvino
def test_a_placed_result_is_saved_and_run_as_placed(tmp_path):
    """When the whole model on OpenVINO measures fastest (in every round, twice as fast), the
    output carries that placement and gspo run (make_executor) follows it."""
    src = ir.save(_chain(3), tmp_path / "m.onnx")
    timings = ScriptedTimings({"original": (1.0,) * 30, "original@openvino": (0.5,) * 30})
    r = optimize(src, budget=2, timing_runs=5, jobs=1, db_path=str(tmp_path / "c.sqlite"), backends=("ort", "openvino"),
                 time_budget=None, strategies=Strategies(measure=timings))
    assert r.report["chosen"] == "original@openvino" and r.report["placement"]["chosen"] == {"openvino": 3 * 2}
    out = r.save(tmp_path / "o.onnx")
    g = ir.load(out)
    with make_executor(g) as ex:
        assert ex.placement is not None and {s.backend for s in ex.plan.segments} == {"openvino"}
        got = ex.run(random_inputs(g, 0))
    want = run(make_session(ir.load(src)), random_inputs(g, 0))
    np.testing.assert_allclose(got[g.outputs[0].name], want[g.outputs[0].name], rtol=1e-4, atol=1e-5)


def test_a_piece_onnxruntime_cannot_load_alone_is_refused_on_every_backend_not_fatal(tmp_path):
    from gspo.ir.subgraph import extract
    from tests.ir.control_flow import PINS, feeds, vad_model

    graph = ir.onnx_io.from_model(vad_model(), PINS)
    piece, _ = extract(graph, range(len(graph.nodes)))  # pinned: onnxruntime refuses its 8 kHz branch
    times = pl.time_pieces([piece], [[feeds()]], ("ort",), None, runs=3)
    assert "cannot run the piece alone" in times[0].refused["ort"] and times[0].best() == "ort"
