"""benchmarks/gpu_check.py, on a machine without a GPU: the dry run's plan and its bound, the
refusal where no CUDA runtime works, the report's tables from a canned report, and a rehearsal
of its first steps on torch's CPU device (which is never reported as a GPU result); the
weightless corpus carrier (benchmarks/gpu/skeleton.py) and the committed corpus."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"
GPU_DIR = SCRIPT.parent / "gpu"


@pytest.fixture
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_dry_run_lists_every_step_and_parts_each_within_eight_minutes(gpu_check, capsys):
    assert gpu_check.main(["--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out[:-2]] == list(gpu_check.STEPS)
    total = re.fullmatch(r"total: (\d+) s", out[-1])
    assert total and int(total.group(1)) == sum(gpu_check.ESTIMATES.values())
    parts = dict(re.findall(r"--steps (\w+) ~(\d+) s", out[-2]))
    assert set(parts) == set(gpu_check.PARTS) and {"check", "peers1", "peers2", "corpus1"} <= set(parts)
    assert all(int(seconds) <= gpu_check.PART_LIMIT_S == 480 for seconds in parts.values()), parts
    assert sum(int(v) for v in parts.values()) == sum(gpu_check.ESTIMATES.values()) + 15 * (len(parts) - 1)


def test_a_part_is_one_machine_run_the_environment_first_its_report_named_after_it(gpu_check, capsys):
    assert gpu_check.selected("peers1") == ["environment", "peers1"]
    assert gpu_check.selected("check") == ["environment", *gpu_check.CHECK]
    assert gpu_check.default_name(gpu_check.selected("check")) == "gpu_check"
    assert gpu_check.default_name(gpu_check.selected("corpus1")) == "gpu_check_corpus1"
    assert gpu_check.main(["--steps", "corpus1", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out[:-2]] == ["environment", "corpus1"]
    assert int(re.fullmatch(r"total: (\d+) s", out[-1]).group(1)) <= 480


def test_an_unknown_step_is_one_line_and_exit_2(gpu_check, capsys):
    assert gpu_check.main(["--steps", "environment,nope", "--dry-run"]) == 2
    assert "unknown step 'nope'" in capsys.readouterr().err


def test_without_a_cuda_runtime_it_exits_2_saying_why(gpu_check, capsys, tmp_path):
    pytest.importorskip("torch")
    from gspo.runtime.torchrt import torch_status

    if torch_status()[0]:
        pytest.skip("a GPU is visible here")
    assert gpu_check.main(["-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpu_check: the torch runtime cannot run on a GPU here:") and "\n" not in err
    assert not list(tmp_path.iterdir())


def test_the_markdown_tables_come_from_the_report(gpu_check):
    report = {"date": "2026-11-26", "command": "python benchmarks/gpu_check.py", "steps": {
        "environment": {"ok": True, "seconds": 1.0, "runtime": "torch", "torch": "2.11.0", "cpu_cores": 16,
                        "device": {"name": "NVIDIA H100", "torch_cuda": "13.0", "driver": "580.1"}},
        "figure5": {"ok": True, "seconds": 9.0, "models": [{
            "model": "nasrnn", "median_ms": {"eager_one_stream": 2.0, "cuda_graph": 1.0, "joint": 0.5},
            "speedup_over_cuda_graph": {"eager_one_stream": 0.5, "cuda_graph": 1.0, "joint": 2.0},
            "joint": {"chosen": "optimized+streams", "streams": 3, "rules": {"MergeParallelMatMuls": 4}, "seconds": 15}}]},
        "cpu16": {"ok": True, "models": [{"model": "nasrnn", "cores": 16, "streams": 4,
                                          "median_ms": {"onnxruntime_16_threads": 3.0, "gspo_4_streams_x_4_threads": 2.0},
                                          "speedup_over_onnxruntime": 1.5}]}}}
    md = gpu_check.markdown(report)
    assert md.startswith("# gspo on a GPU: NVIDIA H100\n") and "REHEARSAL" not in md
    assert "| nasrnn | 2.000 (0.50x) | 1.000 (1.00x) | - | - | 0.500 (2.00x) |" in md
    assert "| nasrnn | joint | optimized+streams | 3 | 4 | 15 |" in md
    assert "| nasrnn | 16 | 4 | onnxruntime_16_threads 3.00, gspo_4_streams_x_4_threads 2.00 | 1.500 |" in md
    assert "REHEARSAL" in gpu_check.markdown({**report, "rehearsal": True})


def test_a_rehearsal_on_the_cpu_writes_its_own_report_never_a_gpu_one(gpu_check, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setattr(gpu_check, "BRANCHED", ("nasrnn",))
    monkeypatch.setattr(gpu_check, "REPEATS", 3)
    code = gpu_check.main(["--rehearse", "--steps", "environment,streams", "-o", str(tmp_path)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rehearsal.json", "rehearsal.md"]
    report = json.loads((tmp_path / "rehearsal.json").read_text())
    assert report["rehearsal"] is True and set(report["steps"]) == {"environment", "streams"}
    assert report["steps"]["environment"]["runtime"] == "torch"
    row = report["steps"]["streams"]["models"][0]
    assert row["model"] == "nasrnn" and row["streams"] > 1 and row["vs_cpu"]["ok"], row
    assert code == (0 if all(s["ok"] for s in report["steps"].values()) else 1)


def test_the_peers_and_corpus_tables_come_from_the_report(gpu_check):
    compiled = {"compile_s": {"reduce-overhead": 31.5, "max-autotune-no-cudagraphs": 92.0}, "skipped": {},
                "refused": {}}
    report = {"steps": {
        "peers1": {"ok": True, "models": [{
            "model": "nasrnn", "torch_compile": compiled, "gspo_over_best_compile": 1.25,
            "median_ms": {"eager_one_stream": 2.0, "cuda_graph": 0.4, "compile_reduce_overhead": 0.3,
                          "compile_max_autotune_no_cudagraphs_graph": 0.25, "gspo": 0.2},
            "dynamo_on_program": {"graphs": 3, "breaks": 2, "where": ["x at registry.py:105 ints"]}}]},
        "corpus1": {"ok": True, "models": [
            {"model": "vad_if", "exporter": "torchscript", "nodes": 40, "equivalent": True,
             "fallbacks": ["If (n1): control flow"], "gspo_over_best_compile": None,
             "median_ms": {"eager_one_stream": 1.0, "cuda_graph": 1.0, "gspo": 0.9},
             "torch_compile": {"compile_s": {}, "skipped": {}, "refused": {"trace": "not traced: host"}}},
            {"model": "squeezenet", "ok": False, "skipped": "deadline: 3 s left"}]}}}
    md = gpu_check.markdown(report)
    assert "| nasrnn | 2.000 | 0.400 | 0.300 | 0.250 | 0.200 | 1.25x | reduce-overhead 31.5, " \
           "max-autotune-no-cudagraphs 92.0 |" in md
    assert "- nasrnn: dynamo on the program itself: {'graphs': 3" in md
    assert "| vad_if | torchscript | 40 | True | 1 | 1.000 | 1.000 | - | 0.900 | - |" in md
    assert "- vad_if: on the CPU: If (n1): control flow" in md and "- vad_if: trace: not traced: host" in md
    assert "| squeezenet | deadline: 3 s left |" in md


@pytest.fixture
def skeleton():
    spec = importlib.util.spec_from_file_location("skeleton", GPU_DIR / "skeleton.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _model_with_weights():
    """A Conv with a BatchNorm (variance of ones but for one 0.5), a Reshape by an int64 shape,
    a MatMul with a large weight: what a skeleton must keep and what it may draw."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    var = np.ones(64, np.float32)
    var[3] = 0.5
    inits = [numpy_helper.from_array((rng.standard_normal((64, 3, 3, 3)) * 0.2).astype(np.float32), "conv_w"),
             numpy_helper.from_array(np.ones(64, np.float32), "bn_scale"),
             numpy_helper.from_array(np.zeros(64, np.float32), "bn_bias"),
             numpy_helper.from_array(np.zeros(64, np.float32), "bn_mean"),
             numpy_helper.from_array(np.tile(var, 32)[:64], "bn_var"),
             numpy_helper.from_array(np.array([1, -1], np.int64), "shape"),
             numpy_helper.from_array((rng.standard_normal((64 * 8 * 8, 10)) * 0.05).astype(np.float32), "fc_w")]
    nodes = [helper.make_node("Conv", ["x", "conv_w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["b"]),
             helper.make_node("Reshape", ["b", "shape"], ["r"]),
             helper.make_node("MatMul", ["r", "fc_w"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_skeleton_drops_the_large_weights_keeps_shapes_and_fills_deterministically(skeleton, tmp_path):
    import numpy as np
    import onnxruntime as ort
    from onnx import numpy_helper

    model = _model_with_weights()
    before = model.SerializeToString()
    skel = skeleton.strip(model, seed=3)
    assert model.SerializeToString() == before  # the model given is left as it is
    size = skeleton.save_skeleton(skel, tmp_path / "m.onnx.gz")
    assert size < 4096 < len(before)  # the 2560-float and 1728-float weights are records, not data
    kept = {t.name: numpy_helper.to_array(t) for t in skel.graph.initializer if t.raw_data or t.int64_data}
    assert set(kept) == {"shape", "bn_scale", "bn_bias", "bn_mean", "bn_var"}  # small ones kept verbatim
    filled = skeleton.fill(skeleton.load_skeleton(tmp_path / "m.onnx.gz"))
    again = skeleton.fill(skel)
    assert filled.SerializeToString() == again.SerializeToString()
    assert not any(m.key == skeleton.KEY for m in filled.metadata_props)
    w = {t.name: numpy_helper.to_array(t) for t in filled.graph.initializer}
    assert w["fc_w"].shape == (64 * 8 * 8, 10) and w["fc_w"].dtype == np.float32
    assert abs(float(w["fc_w"].std()) - 0.05) < 0.005  # the export's scale
    assert not np.array_equal(w["fc_w"], numpy_helper.to_array(model.graph.initializer[6]))
    other = {t.name: numpy_helper.to_array(t) for t in skeleton.fill(skel, seed=4).graph.initializer}
    assert not np.array_equal(other["fc_w"], w["fc_w"]) and np.array_equal(other["shape"], w["shape"])
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    (y,) = ort.InferenceSession(filled.SerializeToString()).run(None, {"x": x})
    assert y.shape == (1, 10) and np.isfinite(y).all()


def test_a_drawn_weight_stays_in_the_recorded_range(skeleton):
    import numpy as np

    record = {"key": "init:var", "name": "var", "dtype": 1, "dims": [5000], "mean": 1.0, "std": 0.5,
              "min": 0.25, "max": 2.0}
    v = skeleton.draw(record, seed=0)
    assert v.dtype == np.float32 and v.min() >= 0.25 and v.max() <= 2.0 and 0.9 < v.mean() < 1.1
    assert np.array_equal(v, skeleton.draw(record, seed=0))
    q = skeleton.draw({**record, "key": "init:q", "dtype": 3, "min": -100, "max": 90}, seed=0)  # int8
    assert q.dtype == np.int8 and q.min() >= -100 and q.max() <= 90


def test_the_skeleton_command_never_overwrites_and_says_so_in_one_line(skeleton, tmp_path, capsys):
    import onnx

    src, dst = tmp_path / "m.onnx", tmp_path / "m.onnx.gz"
    onnx.save(_model_with_weights(), src)
    dst.write_bytes(b"mine")
    assert skeleton.main(["strip", str(src), str(dst)]) == 2
    assert dst.read_bytes() == b"mine" and "exists: not overwritten" in capsys.readouterr().err
    dst.unlink()
    assert skeleton.main(["strip", str(src), str(dst)]) == 0
    assert skeleton.main(["fill", str(src), str(tmp_path / "f.onnx")]) == 2  # not a skeleton: one line
    assert capsys.readouterr().err.strip().count("\n") == 0
    (tmp_path / "junk.onnx").write_text("not a model")
    assert skeleton.main(["strip", str(tmp_path / "junk.onnx"), str(tmp_path / "j.onnx.gz")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("skeleton.py: ") and "\n" not in err and not (tmp_path / "j.onnx.gz").exists()


def test_the_committed_corpus_is_twenty_real_exports_in_a_few_mib(gpu_check):
    manifest = json.loads((GPU_DIR / "corpus" / "manifest.json").read_text())
    models = manifest["models"]
    names = {m["name"] for m in models}
    assert len(models) >= 20
    for kind in ("resnet50", "vit_tiny", "swin_tiny", "bert", "distilbert", "ssdlite_mobilenet", "whisper_encoder",
                 "gpt2_kv"):
        assert kind in names
    files = [GPU_DIR / "corpus" / m["skeleton"] for m in models]
    assert sum(f.stat().st_size for f in files) < 8 * 2**20
    assert all(gpu_check.ESTIMATES[m["part"]] <= gpu_check.PART_LIMIT_S - gpu_check.ESTIMATES["environment"]
               for m in models)
    assert sum(m["weights_mib"] for m in models) > 64  # what could not travel as it was


def _no_inductor(gpu_check, monkeypatch):
    """torch.compile stands in as the traced graph itself, run eagerly (inductor's C++ compiles
    take minutes on two cores; they are rehearsed by hand), its compile seconds 0."""
    monkeypatch.setattr(gpu_check.gpu_peers, "compiled", lambda gm, args, mode, device: (gm, 0.0))


def test_a_rehearsal_of_the_peers_times_eager_graph_compile_and_gspo_on_the_same_program(gpu_check, tmp_path,
                                                                                        monkeypatch):
    pytest.importorskip("torch")
    _no_inductor(gpu_check, monkeypatch)
    monkeypatch.setitem(gpu_check.PEERS, "peers1", ("nasrnn",))
    code = gpu_check.main(["--rehearse", "--steps", "peers1", "-o", str(tmp_path)])
    report = json.loads((tmp_path / "rehearsal_gpu_check_peers1.json").read_text())
    assert list(report["steps"]) == ["environment", "peers1"] and report["rehearsal"] is True
    row = report["steps"]["peers1"]["models"][0]
    assert set(row["median_ms"]) == {"eager_one_stream", "cuda_graph", "gspo", "compile_reduce_overhead",
                                     "compile_max_autotune_no_cudagraphs"}, row
    assert all(v["ok"] for v in row["vs_cpu"].values()) and row["gspo_over_best_compile"] > 0
    assert row["torch_compile"]["compile_s"] == {"reduce-overhead": 0.0, "max-autotune-no-cudagraphs": 0.0}
    assert "on the CPU" not in row["torch_compile"]["refused"].get("trace", "")
    assert "| nasrnn |" in (tmp_path / "rehearsal_gpu_check_peers1.md").read_text()
    assert code == 0


def test_a_rehearsal_of_a_corpus_part_fills_a_skeleton_and_judges_it_against_onnxruntime(gpu_check, tmp_path,
                                                                                         monkeypatch):
    """vad_if: its If runs on onnxruntime's CPU provider (listed, with why), so the program is not
    traced to one graph: dynamo compiles the program itself."""
    pytest.importorskip("torch")
    _no_inductor(gpu_check, monkeypatch)
    vad_if = next(m for part in gpu_check.CORPUS_PARTS.values() for m in part if m["name"] == "vad_if")
    monkeypatch.setitem(gpu_check.CORPUS_PARTS, "corpus1", [vad_if])
    code = gpu_check.main(["--rehearse", "--steps", "corpus1", "-o", str(tmp_path)])
    report = json.loads((tmp_path / "rehearsal_gpu_check_corpus1.json").read_text())
    row = report["steps"]["corpus1"]["models"][0]
    assert row["model"] == "vad_if" and row["equivalent"] is True, row
    assert len(row["fallbacks"]) == 1 and row["fallbacks"][0].startswith("If ") and "onnxruntime" in row["fallbacks"][0]
    assert row["torch_compile"]["refused"]["trace"].startswith("not traced: onnxruntime runs part of it (If ")
    assert set(row["median_ms"]) == {"eager_one_stream", "cuda_graph", "gspo", "compile_reduce_overhead"}
    assert row["optimize"]["verdict"] and all(v["ok"] for v in row["vs_cpu"].values())
    assert "- vad_if: on the CPU: If" in (tmp_path / "rehearsal_gpu_check_corpus1.md").read_text()
    assert code == 0


def test_a_program_reading_the_data_is_not_traced_one_that_does_not_is_one_graph(gpu_check, tmp_path):
    """make_fx on real tensors would bake a shape read from the data into the graph: a fake-tensor
    probe refuses such a program; a static one becomes one graph computing what the program does."""
    torch = pytest.importorskip("torch")
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    from gspo.ir import load
    from gspo.runtime import random_inputs
    from gspo.runtime.torchrt.convert import convert
    from gspo.zoo import build

    peers = gpu_check.gpu_peers
    graph = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
                               helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), tmp_path / "r.onnx")
    program = convert(load(tmp_path / "r.onnx"), "cpu")
    gm, why = peers.trace(program, [torch.randn(2, 6), torch.tensor([3, 4])])
    assert gm is None and why.startswith("not traced: a run reads values of the data back to the host")
    g = build("nasrnn", "tiny")
    program = convert(g, "cpu")
    args = peers.inputs_on(program, random_inputs(g, seed=0), torch.device("cpu"))
    gm, why = peers.trace(program, args)
    assert why is None and isinstance(gm, torch.fx.GraphModule)
    got, want = peers.outputs(gm, args, program.outputs), program.run(random_inputs(g, seed=0))
    assert all(np.array_equal(got[k], want[k]) for k in want)


def test_the_precision_part_is_rehearsed_on_the_cpu_and_tabled(gpu_check, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setattr(gpu_check.gpu_precision, "MODELS", ("resnet50",))
    monkeypatch.setattr(gpu_check.gpu_precision, "REHEARSAL_BUDGET_S", 8.0)
    assert gpu_check.selected("precision") == ["environment", "precision"]
    assert gpu_check.default_name(gpu_check.selected("precision")) == "gpu_check_precision"
    code = gpu_check.main(["--rehearse", "--steps", "precision", "-o", str(tmp_path)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rehearsal_gpu_check_precision.json",
                                                         "rehearsal_gpu_check_precision.md"]
    step = json.loads((tmp_path / "rehearsal_gpu_check_precision.json").read_text())["steps"]["precision"]
    assert step["precision"] == "fp16,bf16,tf32" and step["max_error"] == "nmse=1e-3"
    row = step["models"][0]
    assert row["model"] == "resnet50" and set(row["median_ms"]) == {"fp32", "tf32", "pick"}, row
    assert row["tf32_on"]["fp32"] is False and row["tf32_on"]["tf32"] is True  # the marked source runs with TF32
    assert row["optimize"]["chosen"] is not None and row["optimize"]["samples"] == 2
    assert row["speedup_over_fp32"] == row["median_ms"]["fp32"] / row["median_ms"]["pick"]
    md = (tmp_path / "rehearsal_gpu_check_precision.md").read_text()
    assert "REHEARSAL" in md and "## Reduced precision on the GPU: --precision fp16,bf16,tf32" in md
    assert md.count("| resnet50 | ") == 1 and code == (0 if step["ok"] else 1)


def test_the_precision_table_comes_from_the_report(gpu_check):
    step = {"ok": True, "precision": "fp16,bf16,tf32", "max_error": "nmse=1e-3", "models": [
        {"model": "resnet50", "median_ms": {"fp32": 2.0, "tf32": 1.5, "pick": 1.0}, "speedup_over_fp32": 2.0,
         "speedup_over_tf32": 1.5, "optimize": {"chosen": "fp16 on torch", "seconds": 80.5, "notes": ["n1"],
                                                 "error_per_output": {"logits": {"nmse": 2.5e-4}}}},
        {"model": "bert", "ok": False, "skipped": "deadline: 20 s left"}]}
    md = gpu_check.markdown({"steps": {"precision": step}})
    assert "| resnet50 | 2.000 | 1.500 | 1.000 | fp16 on torch | 2.00x | 1.50x | logits nmse 2.50e-04 | 80.5 |" in md
    assert "| bert | deadline: 20 s left |" in md and "- resnet50: n1" in md
