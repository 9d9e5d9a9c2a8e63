"""Reduced precision on the GPU plugs into the one pipeline: ``gspo optimize --device cuda
--cuda-runtime torch --precision fp16,bf16`` end to end, with no GPU: the torch runtime runs on
torch's CPU device (its executors made with ``TorchConfig(device="cpu")``, no CUDA graph), the
device's status and block stood in, the timings scripted and the clock a fake one."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from onnx import TensorProto

import gspo.search.driver as driver_mod
from gspo.cli import cli
from gspo.ir import load
from gspo.precision.floats import wants_tf32, with_tf32
from gspo.precision.variants import kinds
from gspo.runtime.cuda import choice
from gspo.runtime.torchrt import executor as torch_executor
from gspo.runtime.torchrt import status as torch_status
from gspo.search.strategies import Strategies
from tests.helpers import branchy, one_line_error
from tests.precision.test_stage import folder
from tests.search.fakes import FakeClock, ScriptedTimings
from tests.search.test_device import gpu_profile

BF16, FP16, TF32 = "bf16 on torch", "fp16 on torch", "tf32 on torch"
ROUNDS = 30


def gspo(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def torch_on_cpu(monkeypatch):
    """The torch CUDA runtime as chosen, run on torch's CPU device; returns the configs made."""
    made = []
    real = torch_executor.TorchConfig

    def config(**kwargs):
        made.append(real(**{**kwargs, "device": "cpu", "cuda_graph": False}))
        return made[-1]

    monkeypatch.setattr(choice, "_torch_status", lambda device_id: (True, ""))
    monkeypatch.setattr(torch_executor, "TorchConfig", config)
    monkeypatch.setattr(torch_status, "torch_versions",
                        lambda device_id=0: {"device": "cuda", "runtime": "torch", "name": "Torch CPU"})
    return made


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    """ResNet-50 of the zoo at its tiny size, with calibration and validation folders."""
    where = tmp_path_factory.mktemp("zoo")
    assert gspo("zoo", "resnet50", "--size", "tiny", "-o", where / "m.onnx").exit_code == 0
    model = load(where / "m.onnx")
    return where / "m.onnx", folder(where / "cal", model, range(2)), folder(where / "val", model, range(10, 12))


def _optimize(tmp_path, monkeypatch, zoo, script, precisions="fp16,bf16"):
    path, cal, val = zoo
    timings = ScriptedTimings(script)
    monkeypatch.setattr(driver_mod, "Strategies", lambda: Strategies(measure=timings, clock=FakeClock()))
    profile = gpu_profile(tmp_path / "p.json")
    data = json.loads(profile.read_text())
    profile.write_text(json.dumps({**data, "runtime": choice.runtime_key("torch")}))
    result = gspo("optimize", path, "-o", tmp_path / "out.onnx", "--report", tmp_path / "r.json", "--device", "cuda",
                  "--cuda-runtime", "torch", "--profile", profile, "--precision", precisions, "--max-error", "nmse=1e-3",
                  "--calibration", cal, "--validation", val, "--jobs", "1")
    assert result.exit_code == 0, result.output
    return json.loads((tmp_path / "r.json").read_text())["precision"], load(tmp_path / "out.onnx"), timings


def test_the_cli_fits_torch_kinds_on_the_device_and_a_faster_bf16_is_saved(tmp_path, monkeypatch, zoo, torch_on_cpu):
    block, saved, timings = _optimize(tmp_path, monkeypatch, zoo,
                                      {"original": (1.0,) * ROUNDS, BF16: (0.5,) * ROUNDS, FP16: (2.0,) * ROUNDS})
    assert block["chosen"] == BF16 and block["speedup_over_fp32"] == 2.0
    assert block["validation"]["holds"] and 0 < block["validation"]["outputs"]["logits"]["nmse"] <= 1e-3
    assert {k["kind"] for k in block["kinds"]} <= {BF16, FP16} and BF16 in {k["kind"] for k in block["kinds"]}
    casts = [n for n in saved.nodes if n.op_type == "Cast"]
    assert casts and any(v.dtype == TensorProto.BFLOAT16 for n in saved.nodes for v in n.outputs)
    assert ("original", BF16) in timings.whole  # confirmed against the exact pick by the same decision
    assert torch_on_cpu and all(c.device == "cpu" and not c.tf32 for c in torch_on_cpu)


def test_a_torch_kind_scripted_slower_keeps_fp32(tmp_path, monkeypatch, zoo, torch_on_cpu):
    block, saved, _ = _optimize(tmp_path, monkeypatch, zoo, {"original": (1.0,) * ROUNDS, BF16: (2.0,) * ROUNDS},
                                precisions="bf16")
    assert block["chosen"] == "fp32" and block["speedup_over_fp32"] == 1.0
    assert not any(v.dtype == TensorProto.BFLOAT16 for n in saved.nodes for v in n.outputs)


def test_precision_on_cuda_without_the_torch_runtime_is_one_line(tmp_path, zoo):
    path, cal, val = zoo
    line = one_line_error(gspo("optimize", path, "-o", tmp_path / "o.onnx", "--device", "cuda", "--cuda-runtime", "ort",
                               "--precision", "bf16", "--max-error", "nmse=1e-3"))
    assert "--precision with --device cuda runs on the torch runtime" in line and "--cuda-runtime torch" in line


# ------------------------------------------------------------ the kinds, dispatched by where they run
def test_on_the_torch_runtime_the_kinds_are_its_floats_and_int8_is_a_note():
    graph = branchy()
    found, notes = kinds(graph, ("fp16", "bf16", "tf32", "int8"), ("torch",), lambda: None)
    assert [k.name for k in found] == [FP16, BF16, TF32] and {k.backend for k in found} == {"torch"}
    every = frozenset(next(v.name for v in n.outputs if v.name) for n in graph.nodes)
    assert wants_tf32(found[2].build(every)) and not wants_tf32(found[2].build(frozenset()))  # TF32 marks the graph
    assert notes == ["int8: static and dynamic QDQ run on the cpu device (onnxruntime, OpenVINO), not on the torch "
                     "runtime"]


def test_on_the_cpu_fp16_and_tf32_are_notes_and_bf16_stays_openvinos():
    found, notes = kinds(branchy(), ("fp16", "tf32"), ("ort",), lambda: None)
    assert found == [] and [n.split(":")[0] for n in notes] == ["fp16", "tf32"]
    assert all("a GPU kind (--device cuda --cuda-runtime torch)" in n for n in notes)
    found, notes = kinds(branchy(), ("bf16",), ("ort",), lambda: None)
    assert not any(k.backend == "torch" for k in found) and all(n.startswith("bf16: ") for n in notes)


def test_a_tf32_graph_runs_with_tf32_only_inside_its_runs(monkeypatch):
    import torch

    from gspo.runtime import random_inputs

    graph = branchy()
    seen = []
    matmul = torch.backends.cuda.matmul
    before = matmul.allow_tf32
    tf32 = with_tf32(graph)
    ex = torch_executor.TorchExecutor(tf32, None, torch_executor.TorchConfig(device="cpu"))
    plain = torch_executor.TorchExecutor(graph, None, torch_executor.TorchConfig(device="cpu"))
    assert ex.config.tf32 and not plain.config.tf32 and torch_executor.marked_tf32(tf32)
    original = ex._launch

    def launch(values, marks=None):
        seen.append(matmul.allow_tf32)
        return original(values, marks)

    monkeypatch.setattr(ex, "_launch", launch)
    matmul.allow_tf32 = False
    try:
        ex.run(random_inputs(graph, seed=0))
        plain.run(random_inputs(graph, seed=0))
        assert seen == [True] and matmul.allow_tf32 is False  # on inside the marked graph's run, put back after
    finally:
        matmul.allow_tf32 = before
