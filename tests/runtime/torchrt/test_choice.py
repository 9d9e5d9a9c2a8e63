"""Which runtime ``--device cuda`` runs on (:mod:`gspo.runtime.cuda.choice`): onnxruntime-gpu
(``ort``) where its CUDA provider works, else torch; ``--cuda-runtime`` / ``GSPO_CUDA_RUNTIME``
force one, passed as a value (nothing in the process remembers what a command asked for). On this
machine neither works (CPU onnxruntime, CPU torch): every command says so in one line naming what
is missing; the preference order is checked with stand-in statuses."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from gspo import ir  # noqa: E402
from gspo.cli import cli  # noqa: E402
from gspo.errors import GspoError  # noqa: E402
from gspo.runtime.cuda import choice  # noqa: E402
from gspo.runtime.cuda import status as ort_status_mod  # noqa: E402
from gspo.runtime.cuda.choice import (  # noqa: E402
    cuda_runtime,
    device_block,
    requested_runtime,
    require_cuda,
)
from gspo.runtime.cuda.common import CudaError  # noqa: E402
from gspo.runtime.torchrt import status as torch_status_mod  # noqa: E402
from gspo.zoo import build  # noqa: E402
from tests.helpers import one_line_error  # noqa: E402

ORT_OK, ORT_WHY = ort_status_mod.gpu_status()
TORCH_OK, TORCH_WHY = torch_status_mod.torch_status()
no_cuda_runtime_here = pytest.mark.skipif(ORT_OK or TORCH_OK, reason="a CUDA runtime works here: its absence "
                                          "cannot be shown")
cpu_torch_here = pytest.mark.skipif(bool(torch.version.cuda), reason="torch is built with CUDA here")


@pytest.fixture(autouse=True)
def fresh_choice(monkeypatch):
    """No runtime asked for by the environment."""
    monkeypatch.delenv("GSPO_CUDA_RUNTIME", raising=False)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return ir.save(build("nasrnn", "tiny"), tmp_path_factory.mktemp("choice") / "nasrnn.onnx")


def gspo(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def stand_ins(monkeypatch, ort: bool, torch_ok: bool):
    """Make onnxruntime-gpu's and torch's CUDA statuses say ``ort`` / ``torch_ok``."""
    monkeypatch.setattr(ort_status_mod, "gpu_status",
                        lambda config=None: (True, "ort works") if ort else (False, "no CUDAExecutionProvider (stand-in)"))
    monkeypatch.setattr(torch_status_mod, "torch_status",
                        lambda device_id=0: (True, "torch works") if torch_ok else (False, "torch has no CUDA (stand-in)"))


# ------------------------------------------------------------ the real environment (no GPU)
@no_cuda_runtime_here
def test_optimize_on_cuda_with_no_runtime_names_both_in_one_line(model, tmp_path):
    out = tmp_path / "o.onnx"
    line = one_line_error(gspo("optimize", model, "-o", out, "--device", "cuda"))
    assert line.startswith("gspo: error: --device cuda: no CUDA runtime works here")
    assert "onnxruntime: " in line and "torch: " in line
    assert "CUDAExecutionProvider" in line and "built without CUDA" in line
    assert not out.exists()


@no_cuda_runtime_here
@cpu_torch_here
def test_forcing_torch_names_only_torch(model, tmp_path):
    result = gspo("optimize", model, "-o", tmp_path / "o.onnx", "--device", "cuda", "--cuda-runtime", "torch")
    line = one_line_error(result)
    assert line.startswith("gspo: error: --device cuda --cuda-runtime torch: ")
    assert "built without CUDA" in line and "onnxruntime" not in line and "CUDAExecutionProvider" not in line
    assert result.stdout == ""


@no_cuda_runtime_here
def test_forcing_ort_names_only_the_cuda_provider(model, tmp_path):
    line = one_line_error(gspo("optimize", model, "-o", tmp_path / "o.onnx", "--device", "cuda",
                               "--cuda-runtime", "ort"))
    assert line.startswith("gspo: error: --device cuda --cuda-runtime ort: ")
    assert "CUDAExecutionProvider" in line and "torch" not in line


@no_cuda_runtime_here
@cpu_torch_here
def test_run_and_bench_forcing_torch_exit_2_in_one_line(model):
    for args in (("run", model, "--device", "cuda", "--cuda-runtime", "torch"),
                 ("bench", model, "--device", "cuda", "--cuda-runtime", "torch", "--runs", "1")):
        line = one_line_error(gspo(*args))
        assert "--device cuda --cuda-runtime torch: " in line and "built without CUDA" in line, args


@no_cuda_runtime_here
@cpu_torch_here
def test_the_environment_variable_is_honoured(model, tmp_path, monkeypatch):
    monkeypatch.setenv("GSPO_CUDA_RUNTIME", "torch")
    assert requested_runtime() == "torch"
    line = one_line_error(gspo("optimize", model, "-o", tmp_path / "o.onnx", "--device", "cuda"))
    assert "--cuda-runtime torch: " in line and "built without CUDA" in line and "CUDAExecutionProvider" not in line
    assert requested_runtime("ort") == "ort"  # what is asked for wins over the environment
    line = one_line_error(gspo("optimize", model, "-o", tmp_path / "o.onnx", "--device", "cuda", "--cuda-runtime",
                               "ort"))
    assert "--cuda-runtime ort: " in line and "CUDAExecutionProvider" in line and "torch" not in line
    assert requested_runtime(None) == "torch"


def test_the_option_is_checked():
    with pytest.raises(GspoError, match="--cuda-runtime takes auto, ort, torch"):
        requested_runtime("tensorrt")
    assert requested_runtime(" Torch ") == "torch"
    assert requested_runtime() == "auto"


def test_a_command_asking_for_a_runtime_leaves_nothing_behind(model, monkeypatch):
    """The runtime is a value each command passes on, not a setting of the process: the next
    command (or call) that asks for none gets ``auto`` again, and the module holds no mutable state."""
    stand_ins(monkeypatch, True, True)
    assert cuda_runtime("torch") == "torch"
    assert cuda_runtime() == "ort"  # auto: what was asked for before is not remembered
    stand_ins(monkeypatch, False, False)
    one_line_error(gspo("run", model, "--device", "cuda", "--cuda-runtime", "torch"))
    assert requested_runtime() == "auto"
    assert not [n for n, v in vars(choice).items() if isinstance(v, (list, dict, set)) and not n.startswith("__")]


def test_the_cli_refuses_an_unknown_runtime(model):
    result = gspo("run", model, "--device", "cuda", "--cuda-runtime", "tensorrt")
    assert result.exit_code == 2 and "tensorrt" in result.output and "Traceback" not in result.output


def test_a_bad_environment_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("GSPO_CUDA_RUNTIME", "tensorrt")
    with pytest.raises(GspoError, match="GSPO_CUDA_RUNTIME"):
        requested_runtime()


# ------------------------------------------------------------ the preference, with stand-ins
@pytest.mark.parametrize(("ort", "torch_ok", "want"), [(True, True, "ort"), (True, False, "ort"),
                                                        (False, True, "torch")])
def test_auto_prefers_onnxruntime_then_torch(monkeypatch, ort, torch_ok, want):
    stand_ins(monkeypatch, ort, torch_ok)
    assert cuda_runtime() == want
    require_cuda()  # something works: no error


def test_auto_with_neither_is_one_line_naming_both(monkeypatch):
    stand_ins(monkeypatch, False, False)
    with pytest.raises(CudaError) as info:
        cuda_runtime()
    text = str(info.value)
    assert "\n" not in text and "no CUDA runtime works here" in text
    assert "no CUDAExecutionProvider (stand-in)" in text and "torch has no CUDA (stand-in)" in text
    with pytest.raises(CudaError, match="^--gpu: "):
        require_cuda(option="--gpu")


def test_forcing_a_runtime_that_cannot_run_is_one_line(monkeypatch):
    stand_ins(monkeypatch, False, True)
    with pytest.raises(CudaError) as info:
        cuda_runtime("ort")
    text = str(info.value)
    assert "\n" not in text and text.startswith("--device cuda --cuda-runtime ort: ")
    assert "no CUDAExecutionProvider (stand-in)" in text and "torch" not in text
    assert cuda_runtime("torch") == "torch"
    stand_ins(monkeypatch, True, False)
    with pytest.raises(CudaError, match=r"^--device cuda --cuda-runtime torch: torch has no CUDA \(stand-in\)$"):
        cuda_runtime("torch")
    assert cuda_runtime("ort") == "ort"


def test_forcing_torch_does_not_ask_onnxruntime(monkeypatch):
    stand_ins(monkeypatch, False, True)

    def no(config=None):
        raise AssertionError("onnxruntime-gpu was probed although torch was asked for")

    monkeypatch.setattr(ort_status_mod, "gpu_status", no)
    assert cuda_runtime("torch") == "torch" and require_cuda("torch") == "torch"


def test_cuda_graphs_are_the_torch_runtimes(monkeypatch):
    stand_ins(monkeypatch, True, True)
    for runtime in ("ort", "auto"):  # auto: ort, which works
        with pytest.raises(CudaError, match="--cuda-runtime torch"):
            choice.cuda_executor(build("nasrnn", "tiny"), runtime=runtime, cuda_graph=True)


def test_the_device_block_says_which_runtime(monkeypatch):
    stand_ins(monkeypatch, False, True)
    block = device_block()
    assert block["runtime"] == "torch" and block["device"] == "cuda" and block["torch"] == torch.__version__
    assert device_block("torch") == block
