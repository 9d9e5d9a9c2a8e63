"""Models whose weights are kept in external data (any size, past protobuf's 2 GB included):
loaded without reading the weights, run from their files, saved with external data when large
(the size limit lowered here: a test never allocates gigabytes)."""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import external_data_helper

from gspo import ir
from gspo.errors import ModelLoadError
from gspo.ir.onnx_io import external_dir, serialize
from gspo.rules import apply_greedily
from gspo.rules.merge import MergeParallelMatMuls
from gspo.runtime import make_session, run
from gspo.search import optimize
from tests.kinds import mlp_model, save_external

WEIGHT_BYTES = 3 * 32 * 64 * 4


@pytest.fixture
def external(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    return save_external(mlp_model(), d / "mlp.onnx")


def _feeds():
    return {"x": np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)}


def _reference(path):
    return ort.InferenceSession(path).run(None, _feeds())[0]


def test_weights_in_external_data_are_not_read_at_load(external):
    """They stay references to their file (a 2.4 GB model loaded into memory could not be
    checked: onnx's checker serializes an in-memory model, 'Failed to serialize proto')."""
    g = ir.load(external)
    for name in ("w_gate", "w_up", "w_down"):
        proto = g.store.proto(name)
        assert external_data_helper.uses_external_data(proto) and not proto.raw_data
    assert external_dir(g) == os.path.dirname(external)
    assert len(serialize(g, inline=False)) < WEIGHT_BYTES / 10  # what a session is given
    out = run(make_session(g), _feeds())  # onnxruntime reads the weights from their file
    np.testing.assert_allclose(out["y"], _reference(external), rtol=1e-6)


def test_external_data_shorter_than_its_tensor_is_refused_in_one_line(external):
    data = external + ".data"
    with open(data, "r+b") as f:
        f.truncate(os.path.getsize(data) - 4)
    with pytest.raises(ModelLoadError, match="shorter than 'w_down' needs"):
        ir.load(external)


@pytest.mark.parametrize("threshold, external_out", [(1000, True), (10**9, False)])
def test_an_optimized_external_model_saves_its_own_weights(external, tmp_path, monkeypatch, threshold,
                                                           external_out):
    """Over the threshold the result gets its own ``.data`` (originals copied from their file,
    merged weights written); under it the file holds every weight. Either way it no longer
    needs the input's data file."""
    want = _reference(external)
    r = optimize(external, budget=4, timing_runs=5, backends=("ort",), jobs=1, time_budget=30)
    greedy = [c for c in r.report["pieces_detail"][0]["candidates"] if c["label"] == "greedy"]
    assert greedy[0]["rules"] == ["MergeParallelMatMuls"] and greedy[0]["rejected"] is None
    monkeypatch.setattr(ir.onnx_io, "_EXTERNAL_THRESHOLD", threshold)
    merged, counts = apply_greedily(ir.load(external), [MergeParallelMatMuls()])
    assert counts == {"MergeParallelMatMuls": 1}  # a new weight, and an original one in the file
    out = tmp_path / "out.onnx"
    ir.save(merged, out)
    os.remove(external + ".data")
    assert (tmp_path / "out.onnx.data").exists() is external_out
    saved = onnx.load(str(out), load_external_data=False)
    assert any(external_data_helper.uses_external_data(t) for t in saved.graph.initializer) is external_out
    got = ort.InferenceSession(str(out)).run(None, _feeds())[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_serialize_appends_each_weight_without_building_a_model_of_them_all(monkeypatch):
    """The serialized model parses as the model with its weights (a computed one included),
    and the original weights are not copied into a model first (400 MB more, and its time, for
    every session of a model of 400 MB)."""
    from gspo.ir.builder import GraphBuilder
    from gspo.ir.onnx_io import to_model

    b = GraphBuilder(seed=0)
    x = b.input("x", (1, 64))
    g = b.output(b.op("MatMul", [x, b.weight("w", (64, 32))]), b.op("MatMul", [x, b.weight("v", (64, 32))])).build()
    merged, counts = apply_greedily(ir.load_bytes(serialize(g)), [MergeParallelMatMuls()])
    assert counts == {"MergeParallelMatMuls": 1}
    real, copied = ir.onnx_io.materialize, []
    for graph in (ir.load_bytes(serialize(g)), merged):
        want = to_model(graph)
        monkeypatch.setattr(ir.onnx_io, "materialize", lambda name, *a, **k: copied.append(name) or real(name, *a, **k))
        got = onnx.ModelProto.FromString(serialize(graph))
        monkeypatch.undo()
        assert got == want and not copied
        feeds = {"x": np.ones((1, 64), np.float32)}
        np.testing.assert_array_equal(ort.InferenceSession(got.SerializeToString()).run(None, feeds)[0],
                                      ort.InferenceSession(want.SerializeToString()).run(None, feeds)[0])
