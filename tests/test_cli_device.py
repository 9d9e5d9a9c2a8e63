"""``--device cuda`` and ``calibrate --gpu`` without a working CUDA provider: exit 2 and one line
naming what is missing, never a silent run on the CPU; no onnxruntime at all: one line too. What is
missing is injected (the stand-ins of tests/runtime/fake_cuda.py, which keep the torch CUDA runtime
out of reach), so that these run on a machine with a GPU too."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from gspo import ir
from gspo.cli import cli
from tests.helpers import branchy, one_line_error
from tests.runtime import fake_cuda
from tests.runtime.fake_cuda import CPU, FakeCudart, FakeOrt


def gspo(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def no_cuda_provider(monkeypatch) -> list:
    """A CPU onnxruntime (no CUDAExecutionProvider) and no torch on CUDA; returns the stand-ins' log."""
    log: list = []
    fake_cuda.install(monkeypatch, FakeOrt(log, available=(CPU,)), FakeCudart(log), log)
    return log


@pytest.fixture
def model(tmp_path):
    return ir.save(branchy(), tmp_path / "m.onnx")


def test_run_and_bench_on_cuda_without_its_provider_exit_2_naming_it(model, monkeypatch):
    log = no_cuda_provider(monkeypatch)
    for args in (("run", model, "--device", "cuda"), ("bench", model, "--device", "cuda", "--runs", "1")):
        line = one_line_error(gspo(*args))
        assert "--device cuda: " in line and "CUDAExecutionProvider" in line and "gspo[gpu]" in line
    assert not [e for e in log if e[0] in ("session", "run")]


def test_calibrate_gpu_without_its_provider_exits_2_naming_the_option(tmp_path, monkeypatch):
    no_cuda_provider(monkeypatch)
    line = one_line_error(gspo("calibrate", "--gpu", "v100", "-o", tmp_path / "p.json", "--budget", "4",
                               "--passes", "1", "--db", tmp_path / "db.sqlite"))
    assert line.startswith("gspo: error: --gpu: ") and "CUDAExecutionProvider" in line
    assert not (tmp_path / "p.json").exists()


def test_calibrate_gpu_measures_on_the_runtime_it_was_given(tmp_path, monkeypatch):
    """``--cuda-runtime`` reaches the calibration's executors (and keys the profile) as a value."""
    import gspo.costmodel.calibrate as cal
    from gspo.errors import GspoError
    from gspo.runtime import runtime_version

    log: list = []
    fake_cuda.install(monkeypatch, FakeOrt(log), FakeCudart(log), log)
    given: list = []

    def calibrate(cfg, progress=None):
        given.append(cfg)
        raise GspoError("stopped before measuring (stand-in)")

    monkeypatch.setattr(cal, "calibrate", calibrate)
    for asked in ("ort", "auto"):
        line = one_line_error(gspo("calibrate", "--gpu", "v100", "--cuda-runtime", asked, "-o", tmp_path / "p.json",
                                   "--db", tmp_path / "db.sqlite"))
        assert "stopped before measuring" in line
    assert [(c.backend, c.cuda_runtime, c.runtime) for c in given] == [("cuda", "ort", runtime_version())] * 2
    line = one_line_error(gspo("calibrate", "--gpu", "v100", "--cuda-runtime", "torch", "-o", tmp_path / "p.json"))
    assert line.startswith("gspo: error: --gpu --cuda-runtime torch: ") and len(given) == 2


def test_a_provider_that_falls_back_to_the_cpu_is_refused_not_run(model, monkeypatch):
    log: list = []
    fake_cuda.install(monkeypatch, FakeOrt(log, uses=(CPU,)), FakeCudart(log), log)
    line = one_line_error(gspo("run", model, "--device", "cuda"))
    assert "onnxruntime fell back to the CPU" in line and "libonnxruntime_providers_cuda.so" in line
    assert not [e for e in log if e[0] == "run"]


def test_no_onnxruntime_installed_is_one_line_naming_the_extras(model):
    code = ("import sys; from importlib import metadata; sys.modules['onnxruntime'] = None; real = metadata.version\n"
            "def version(name):\n"
            "    if name.startswith('onnxruntime'): raise metadata.PackageNotFoundError(name)\n"
            "    return real(name)\n"
            "metadata.version = version\n"
            "from gspo.cli import main; sys.argv = ['gspo', 'run', sys.argv[1]]; main()")
    done = subprocess.run([sys.executable, "-c", code, str(model)], capture_output=True, text=True, timeout=120)
    lines = [line for line in (done.stdout + done.stderr).strip().splitlines() if line]
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("gspo: error: no onnxruntime is installed") and "gspo[cpu]" in lines[0]


def test_a_model_placed_on_cuda_says_in_one_line_that_cuda_cannot_run_here(tmp_path, monkeypatch):
    """A placement saved on a machine with a GPU, run where there is none: exit 2, one line."""
    from gspo.streams import Placement

    no_cuda_provider(monkeypatch)  # the backends' CUDA status is checked afresh, with the stand-ins
    g = branchy()
    placed = ir.save(g, tmp_path / "placed.onnx", placement=Placement.whole(g, "cuda").to_json())
    for args in (("run", placed), ("bench", placed, "--runs", "1"), ("optimize", placed, "-o", tmp_path / "o.onnx",
                                                                  "--backends", "ort,cuda")):
        line = one_line_error(gspo(*args))
        assert "backend 'cuda' cannot run here: " in line and "gspo[gpu]" in line
