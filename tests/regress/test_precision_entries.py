"""Model set entries with reduced precision: their fields checked when the set is read, and the
gate judging accuracy besides latency (``--record`` optimizes within the budget, ``--against``
judges the candidate and the baseline against the source on the entry's validation data).

Which precision optimize picks is decided by timing, so the accuracy gate is tested on stored
models whose weights were changed on purpose; no assertion here depends on a timing winner."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gspo.errors import GspoError
from gspo.ir import load
from gspo.precision.samples import load_samples
from gspo.regress import load_modelset, run_gate
from gspo.regress.accuracy import data_digest, place_data, ship_data
from gspo.regress.store import cache_key, read_artifact, sha256
from tests.helpers import one_line_error, onnx_model
from tests.regress.util import FAST, gspo, relu_chain

#: Loose enough for int8 and bf16 on a small MatMul; a candidate scaled by 1.5 is at nmse 0.25.
BUDGET = "nmse=1e-2"
ROWS, COLS = 4, 64


def matmul_model() -> onnx.ModelProto:
    """``y = x @ W + b``: weights int8 and bf16 can reduce."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((COLS, COLS)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal((COLS,)).astype(np.float32), "b")
    return onnx_model([helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [ROWS, COLS])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [ROWS, COLS])], [w, b])


def _samples(folder, count: int, seed: int) -> None:
    folder.mkdir()
    rng = np.random.default_rng(seed)
    for i in range(count):
        np.savez(folder / f"s{i}.npz", x=rng.standard_normal((ROWS, COLS)).astype(np.float32))


def write(tmp_path, models, **top):
    """A model set of ``models`` (entries) with :data:`FAST` options and ``top``'s keys."""
    data = {"version": 1, "options": {**FAST, "time_budget": 10}, "gate": {"rounds": 20, "threshold": 0.2},
            "models": models, **top}
    p = tmp_path / "set.json"
    p.write_text(json.dumps(data))
    return p


def entry(name="mm", **fields):
    return {"name": name, "path": "mm.onnx", **fields}


@pytest.fixture
def files(tmp_path):
    onnx.save(matmul_model(), tmp_path / "mm.onnx")
    onnx.save(relu_chain(), tmp_path / "plain.onnx")
    _samples(tmp_path / "calib", 4, seed=1)
    _samples(tmp_path / "val", 3, seed=2)
    return tmp_path


# ------------------------------------------------------------------ the set's fields
@pytest.mark.parametrize("fields, says", [
    ({"precision": "bf16,int8"}, 'model \'mm\': precision needs an accuracy budget: give "max_error"'),
    ({"precision": "int2", "max_error": BUDGET},
         "model 'mm': unknown precision 'int2' (known: fp32, bf16, int8, int4, fp16, tf32)"),
    ({"precision": ["int8", 8], "max_error": BUDGET}, "precision must be a list or a comma-separated string"),
    ({"precision": "fp32", "max_error": BUDGET}, "precision names no reduced precision"),
    ({"precision": "int8", "max_error": "nmse=abc"}, "model 'mm': max_error: 'nmse=abc': 'abc' is not a finite number"),
    ({"precision": "int8", "max_error": "nmsq=1e-3"}, "model 'mm': max_error: unknown metric 'nmsq'"),
    ({"precision": "int8", "max_error": ""}, "model 'mm': max_error is empty"),
    ({"precision": "int8", "max_error": 0.001}, 'max_error must be a budget such as "nmse=1e-3"'),
    ({"max_error": BUDGET}, 'model \'mm\': max_error applies to reduced precision: give "precision"'),
    ({"validation": "val"}, "model 'mm': validation applies to reduced precision"),
    ({"precision": "int8", "max_error": BUDGET, "validation": "nope"}, "model 'mm': validation "),
    ({"precision": "int8", "max_error": BUDGET, "calibration": "empty"}, "calibration "),
    ({"precision": "int8", "max_error": BUDGET, "calibration": "val", "validation": "val/"},
     "validation must not be the calibration data"),
])
def test_each_problem_of_the_precision_fields_is_one_line(files, fields, says):
    (files / "empty").mkdir()
    with pytest.raises(GspoError) as e:
        load_modelset(write(files, [entry(**fields)]))
    message = str(e.value)
    assert says in message and "\n" not in message
    if "nope" in str(fields):
        assert message.endswith(f"{files / 'nope'}: no such file or folder")
    if "empty" in str(fields):
        assert "no .npz file in the folder" in message


def test_the_command_line_says_a_bad_budget_in_one_line_before_any_work(files):
    p = write(files, [entry(precision="int8", max_error="cosine=2")])
    error = one_line_error(gspo("regress", p, "--record", files / "base"))
    assert "model 'mm': max_error: 'cosine=2': cosine must be in [-1, 1]" in error
    assert not (files / "base").exists()


def test_fields_are_read_relative_to_the_set_and_the_sets_defaults_apply(files):
    p = write(files, [entry("a", calibration="calib", validation="val/s0.npz"),
                      entry("b", precision=["INT8"], max_error="cosine=0.99"),
                      entry("c", precision=None), {"name": "d", "path": "plain.onnx"}],
              precision="bf16, int8", max_error="nmse=1e-3")
    a, b, c, d = load_modelset(p).models
    assert (a.precision, a.max_error.spec) == (("bf16", "int8"), "nmse=0.001")
    assert (a.calibration, a.validation) == (files / "calib", files / "val" / "s0.npz")
    assert files / "calib" / "s3.npz" in a.files() and files / "val" / "s0.npz" in a.files()
    assert (b.precision, b.max_error.spec, b.data()) == (("int8",), "cosine=0.99", {})
    assert (c.precision, c.max_error) == ((), None)  # opted out of the set's precision
    assert d.precision == ("bf16", "int8")
    with pytest.raises(GspoError, match="the set: unknown precision 'int2'"):
        load_modelset(write(files, [entry()], precision="int2", max_error=BUDGET))
    with pytest.raises(GspoError, match="unknown key"):
        load_modelset(write(files, [entry()], validation="val"))  # data follow a model's inputs



@pytest.mark.parametrize("args", [("--estimate", "--json", "calib/new.npz"),
                                  ("--record", "calib/base"), ("--record", "base", "--json", "val/r.npz"),
                                  ("--estimate", "--update", "--baseline", "val/sub/b.json")])
def test_no_output_goes_inside_a_data_folder_of_the_set(files, args):
    """A file the gate wrote into a model's calibration folder became a sample the next run
    refused ("not an .npz file")."""
    p = write(files, [entry(precision="int8", max_error=BUDGET, calibration="calib", validation="val")])
    before = sorted(q.relative_to(files) for q in files.rglob("*"))
    argv = [a if not a.startswith(("calib/", "val/")) and a != "base" else str(files / a) for a in args]
    error = one_line_error(gspo("regress", p, *argv, "--force"))
    assert "is inside the input folder" in error and ("calib" in error or "val" in error), error
    assert sorted(q.relative_to(files) for q in files.rglob("*")) == before

def test_an_entry_without_precision_keeps_its_cache_key():
    assert cache_key("s", {}, None, {"budget": 0}, (), {"gspo": "1"}) == sha256(json.dumps(
        {"source": "s", "input_shapes": {}, "inputs": None, "options": {"budget": 0}, "exclude_rules": [],
         "versions": {"gspo": "1"}}, sort_keys=True).encode())
    assert cache_key("s", {}, None, {}, (), {}, {"precision": ["int8"]}) != cache_key("s", {}, None, {}, (), {})


def test_data_travel_to_a_cluster_as_the_same_samples_and_change_the_digest(files, tmp_path_factory):
    p = write(files, [entry(precision="int8", max_error=BUDGET, calibration="calib", validation="val")])
    spec = load_modelset(p).models[0]
    placed = place_data(ship_data(spec), tmp_path_factory.mktemp("node"))
    graph = load(files / "mm.onnx")
    for kind in ("calibration", "validation"):
        here, there = (load_samples(path, graph, kind) for path in (str(spec.data()[kind]), placed[kind]))
        assert len(here) == len(there) and all(np.array_equal(a["x"], b["x"]) for a, b in zip(here, there))
    assert place_data({k: str(v) for k, v in spec.data().items()}, files)["validation"] == str(files / "val")
    keys = set()
    for ship in (False, True):  # the user's paths (here), or the files' bytes (a cluster's node)
        from gspo.regress import gate
        from gspo.regress.engines import local_engine

        [result] = local_engine([gate._job_factory(spec, None, True, True, False, ship=ship)], ["mm"])
        assert result.verdict != "ERROR", result.reason
        assert result.accuracy["data"] == f"{files / 'val'} (3 samples)" and result.accuracy["candidate"]["holds"]
        keys.add(result.key)
    assert len(keys) == 1
    before = data_digest(spec)
    np.savez(files / "val" / "s0.npz", x=np.zeros((ROWS, COLS), np.float32))
    assert data_digest(spec) != before  # new data: a new cache key, optimized again


# ------------------------------------------------------------------ record and against
@pytest.fixture
def recorded(files):
    """A set of a reduced-precision entry with its data, one with random data, and a plain one,
    recorded."""
    ms = write(files, [entry(precision="bf16,int8", max_error=BUDGET, calibration="calib", validation="val"),
                       entry("rand", precision="int8", max_error=BUDGET),
                       {"name": "plain", "path": "plain.onnx"}])
    r = gspo("regress", ms, "--record", files / "base")
    assert r.exit_code == 0, r.output
    assert r.stderr.count("warning: model 'rand': the calibration and validation data are random") == 1
    assert "warning: model 'mm'" not in r.output
    return ms, files / "base"


def _perturb(base, name, factor=1.5):
    """Scale every floating-point weight of a stored model: its outputs move far outside the
    budget, whatever precision optimize chose."""
    path = base / name / "model.onnx"
    model = onnx.load_from_string(path.read_bytes())
    scaled = 0
    for init in model.graph.initializer:
        arr = numpy_helper.to_array(init)
        if arr.dtype.kind == "f":
            init.CopyFrom(numpy_helper.from_array((arr * factor).astype(arr.dtype), init.name))
            scaled += 1
    assert scaled
    _store(base, name, model.SerializeToString())


def _store(base, name, data: bytes) -> None:
    """Replace a stored model, keeping its artifact consistent (reused as the candidate: the cache
    key is unchanged)."""
    (base / name / "model.onnx").write_bytes(data)
    meta = json.loads((base / name / "artifact.json").read_text())
    meta["model_sha256"] = sha256(data)
    (base / name / "artifact.json").write_text(json.dumps(meta))


def test_record_optimizes_within_the_budget_and_keeps_it_in_the_artifact(recorded):
    _, base = recorded
    art = read_artifact(base, "mm")
    assert art.meta["precision"]["precision"] == ["bf16", "int8"] and art.meta["precision"]["max_error"] == "nmse=0.01"
    assert art.meta["precision"]["validation"].endswith("val")
    block = art.report["precision"]
    assert block["max_error"] == "nmse=0.01" and block["data"]["validation"].startswith("user: ")
    assert block["validation"]["holds"]
    assert "precision" not in read_artifact(base, "plain").meta
    assert read_artifact(base, "plain").report.get("precision") is None


def test_against_judges_each_entry_within_its_budget(files, recorded):
    ms, base = recorded
    out = files / "r.json"
    r = gspo("regress", ms, "--against", base, "--json", out)
    assert "INACCURATE" not in r.output
    assert r.stderr.count("warning: model 'rand'") == 1
    models = {m["name"]: m for m in json.loads(out.read_text())["models"]}
    mm, rand = models["mm"]["accuracy"], models["rand"]["accuracy"]
    assert mm["data"] == f"{files / 'val'} (3 samples)" and mm["max_error"] == "nmse=0.01"
    assert mm["candidate"]["holds"] and mm["candidate"]["samples"] == 3 and mm["candidate"]["broken"] == []
    assert set(mm["candidate"]["outputs"]["y"]) >= {"nmse", "cosine", "maxrel"}
    assert mm["baseline"] == mm["candidate"]  # the stored model reused: the same bytes
    assert rand["data"] == "random (seeds 8-15, 8 samples)" and "random" in rand["warning"]
    assert rand["candidate"]["holds"]
    assert models["mm"]["reused"] and models["mm"]["verdict"] != "INACCURATE"
    assert "accuracy" not in models["plain"]  # no precision: no accuracy judged
    line = next(x for x in r.output.splitlines() if x.startswith("mm: accuracy "))
    assert line.startswith(f"mm: accuracy within nmse=0.01 on {files / 'val'} (3 samples)") and ": y nmse " in line
    assert "; baseline: y nmse " in line


def test_a_candidate_outside_the_budget_fails_with_the_broken_limits(files, recorded):
    ms, base = recorded
    _perturb(base, "mm")  # reused as the candidate: its cache key is unchanged
    junit, out = files / "j.xml", files / "r.json"
    r = gspo("regress", ms, "--against", base, "--junit", junit, "--json", out)
    assert r.exit_code == 1, r.output
    assert "FAILED: mm" in r.output
    mm = {m["name"]: m for m in json.loads(out.read_text())["models"]}["mm"]
    assert mm["verdict"] == "INACCURATE" and mm["reused"]
    assert mm["reason"].startswith(f"error outside max_error nmse=0.01 on the validation data ({files / 'val'} "
                                   "(3 samples)): y: nmse ")
    assert mm["reason"].endswith("> 0.01")
    assert mm["accuracy"]["candidate"]["holds"] is False and mm["accuracy"]["candidate"]["broken"]
    assert mm["accuracy"]["candidate"]["outputs"]["y"]["nmse"] > 0.1
    assert not mm["samples"] and mm["vs_source"] is None  # not timed
    assert f"mm: {mm['reason']}" in r.output and "mm: accuracy OUTSIDE nmse=0.01" in r.output
    failure = ET.parse(junit).getroot().find("testcase[@name='mm']/failure")
    assert failure is not None and failure.get("type") == "INACCURATE" and "y: nmse" in failure.text


def test_a_baselines_drift_is_reported_without_failing_a_candidate_within_budget(files, recorded):
    ms, base = recorded
    _perturb(base, "mm")
    run = run_gate(ms, against=base, reuse=False)  # optimized again: the candidate is not the baseline
    mm = {r.name: r for r in run.results}["mm"]
    assert not mm.reused and mm.verdict != "INACCURATE"
    assert mm.accuracy["candidate"]["holds"]
    assert mm.accuracy["baseline"]["holds"] is False and mm.accuracy["baseline"]["outputs"]["y"]["nmse"] > 0.1


def test_a_reduced_candidate_within_the_budget_is_judged_by_it_not_by_equivalence(files, recorded):
    from gspo.ir import serialize
    from gspo.runtime.quantize import quantize_dynamic

    ms, base = recorded
    _store(base, "mm", serialize(quantize_dynamic(load(files / "mm.onnx"))))  # int8 weights: not equivalent
    mm = {r.name: r for r in run_gate(ms, against=base).results}["mm"]
    assert mm.reused and mm.verdict not in ("INACCURATE", "NOT EQUIVALENT"), mm.reason
    assert mm.accuracy["candidate"]["holds"] and 0 < mm.accuracy["candidate"]["outputs"]["y"]["nmse"] <= 1e-2
