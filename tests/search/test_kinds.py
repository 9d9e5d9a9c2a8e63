"""optimize on the kinds of models users bring besides float32 exports: onnxruntime contrib
ops, classical ML with ZipMap (a sequence of maps), ... Each comes out equivalent, its opaque
parts untouched. The timings are scripted (:class:`~tests.search.fakes.ScriptedTimings`): a
test that can end both ways checks both, the optimized graph written and the input kept."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from gspo.ir import save
from gspo.search import Strategies, optimize
from tests.kinds import MS, contrib_model, zipmap_model
from tests.kinds import save as save_model
from tests.search.fakes import ScriptedTimings

FAST = dict(budget=4, timing_runs=5, backends=("ort",), time_budget=None, jobs=1)
#: Scripts for each outcome: the pieces' rewrites and the optimized model measure twice as fast
#: as the input (it is written), or nothing beats the input (it is kept).
WINS = {"optimized": {"candidate0": (0.5,) * 30, "greedy": (0.5,) * 30, "original": (1.0,) * 30,
                      "optimized": (0.5,) * 30},
        "original": {}}


def _optimize(path: str, chosen: str):
    """``optimize`` on ``path`` with the timings of :data:`WINS`'s ``chosen``, which it chose."""
    r = optimize(path, **FAST, strategies=Strategies(measure=ScriptedTimings(WINS[chosen])))
    assert r.report["chosen"] == chosen
    return r


def _opaque(model: onnx.ModelProto, domain: str) -> list[bytes]:
    return [n.SerializeToString() for n in model.graph.node if n.domain == domain]


@pytest.mark.parametrize("chosen", ["optimized", "original"])
def test_contrib_ops_are_carried_through_and_the_rules_work_around_them(tmp_path, chosen):
    """An onnxruntime-optimized transformer block (com.microsoft Gelu, SkipLayerNormalization,
    FastGelu): onnx infers no shape past the first contrib op, onnxruntime does, and the two
    MatMuls reading SkipLayerNormalization's output merge (this crashed with a TypeError when
    the merge inferred the MatMul's shape from an unknown one). The contrib nodes are saved as
    they were also in the optimized graph (the front end had named them ``node_1``)."""
    model = contrib_model()
    path = save_model(model, tmp_path / "m.onnx")
    r = _optimize(path, chosen)
    greedy = [c for p in r.report["pieces_detail"] for c in p["candidates"] if c["label"] == "greedy"]
    assert greedy and greedy[0]["rules"] == ["MergeParallelMatMuls"] and greedy[0]["rejected"] is None
    out = tmp_path / "out.onnx"
    save(r.graph, out, r.schedule)
    saved = onnx.load(str(out))
    assert _opaque(saved, MS) == _opaque(model, MS)  # the contrib nodes as they were
    x = np.random.default_rng(0).standard_normal((1, 8, 16)).astype(np.float32)
    want = ort.InferenceSession(path).run(None, {"x": x})[0]
    got = ort.InferenceSession(str(out)).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_a_classifier_with_zipmap_keeps_its_sequence_of_maps(tmp_path):
    """skl2onnx's default classifier output, a sequence of maps class -> probability, keeps its
    type through load, optimize and save (it was written back as a tensor of element type 0,
    which onnxruntime refuses to load), and the saved model gives the same maps."""
    model = zipmap_model()
    path = save_model(model, tmp_path / "clf.onnx")
    r = _optimize(path, "original")  # no rewrite applies: the input is all there is
    out = tmp_path / "out.onnx"
    save(r.graph, out, r.schedule, keep_dynamic=r.keep_dynamic)
    saved = onnx.load(str(out))
    assert saved.graph.output[1].type == model.graph.output[1].type
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    want = ort.InferenceSession(path).run(None, {"x": x})
    got = ort.InferenceSession(str(out)).run(None, {"x": x})
    assert got[1] == want[1] and len(got[1]) == 3 and set(got[1][0]) == {0, 1, 2}
    np.testing.assert_array_equal(got[0], want[0])


def _ops_around(model: onnx.ModelProto) -> list[tuple]:
    """Each op with the op types that feed it and read it (a QDQ group's shape), sorted."""
    made = {o: n.op_type for n in model.graph.node for o in n.output}
    reads: dict[str, list[str]] = {}
    for n in model.graph.node:
        for i in n.input:
            reads.setdefault(i, []).append(n.op_type)
    return sorted((n.op_type, tuple(sorted(made.get(i, "") for i in n.input)),
                   tuple(sorted(r for o in n.output for r in reads.get(o, ())))) for n in model.graph.node)


@pytest.mark.parametrize("name, chosen", [("qdq", "original"), ("half", "optimized"), ("half", "original")])
def test_a_qdq_model_keeps_every_group_and_a_float16_model_its_type(tmp_path, name, chosen):
    """No rewrite splits a QDQ group (none applies: the input is kept); the float16 model is
    rewritten, and its weights and output stay float16, written or kept."""
    from tests.kinds import half_model, qdq_model

    model = qdq_model() if name == "qdq" else half_model()
    path = save_model(model, tmp_path / f"{name}.onnx")
    r = _optimize(path, chosen)
    out = tmp_path / f"{name}-out.onnx"
    save(r.graph, out, r.schedule)
    saved = onnx.load(str(out))
    if name == "qdq":
        assert _ops_around(saved) == _ops_around(model)
    else:
        greedy = [c for p in r.report["pieces_detail"] for c in p["candidates"] if c["label"] == "greedy"]
        assert greedy[0]["rules"] and greedy[0]["rejected"] is None  # rewritten, verified equivalent
        assert {t.data_type for t in saved.graph.initializer} == {onnx.TensorProto.FLOAT16}
        assert saved.graph.output[0].type == model.graph.output[0].type
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 4, 8, 8)).astype(
        np.float16 if name == "half" else np.float32)}
    want = ort.InferenceSession(path).run(None, feeds)[0]
    got = ort.InferenceSession(str(out)).run(None, feeds)[0]
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-2, atol=1e-2)
