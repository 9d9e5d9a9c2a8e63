"""The runtime choice: one onnxruntime distribution, said in one line when none or two are there."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gspo.errors import GspoError
from gspo.runtime.runtimes import (
    RuntimeNotInstalled,
    import_onnxruntime,
    installed_runtimes,
    runtime_conflict,
)

ROOT = Path(__file__).resolve().parents[2]
tomllib = pytest.importorskip("tomllib")  # Python >= 3.11


def test_installed_runtimes_lists_what_metadata_finds():
    found = installed_runtimes(lambda name: name in ("onnxruntime-gpu", "numpy"))
    assert found == ("onnxruntime-gpu",)
    assert installed_runtimes(lambda name: False) == ()


def test_this_environment_has_exactly_the_cpu_runtime():
    assert installed_runtimes() == ("onnxruntime",)


def test_both_runtimes_installed_is_one_line_naming_both_and_the_fix():
    why = runtime_conflict(("onnxruntime", "onnxruntime-gpu"))
    assert why is not None and "\n" not in why
    assert "onnxruntime and onnxruntime-gpu" in why and "pip uninstall -y onnxruntime onnxruntime-gpu" in why
    assert runtime_conflict(("onnxruntime-gpu",)) is None
    assert runtime_conflict(()) is None


def test_no_runtime_is_one_line_naming_the_extras(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # makes `import onnxruntime` fail
    with pytest.raises(RuntimeNotInstalled) as info:
        import_onnxruntime(installed=())
    message = str(info.value)
    assert "\n" not in message and "gspo[cpu]" in message and "gspo[gpu]" in message
    assert isinstance(info.value, GspoError) and isinstance(info.value, ImportError)


def test_a_broken_install_names_the_distribution(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(RuntimeNotInstalled, match=r"onnxruntime \(onnxruntime-gpu\) is installed but does not import"):
        import_onnxruntime(installed=("onnxruntime-gpu",))


def test_both_installed_is_logged_and_the_module_still_imports(caplog):
    ort = import_onnxruntime(installed=("onnxruntime", "onnxruntime-gpu"))
    assert ort.__name__ == "onnxruntime"
    assert any("overwrite each other's onnxruntime module" in r.getMessage() for r in caplog.records)


def _requirement_names(requirements: list[str]) -> set[str]:
    return {r.split("[")[0].split(">")[0].split("<")[0].split("=")[0].split(";")[0].strip() for r in requirements}


def test_no_extra_or_core_dependency_set_installs_both_runtimes():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = _requirement_names(project["dependencies"])
    assert not core & {"onnxruntime", "onnxruntime-gpu"}, "the runtime must come from an extra"
    extras = {name: _requirement_names(reqs) for name, reqs in project["optional-dependencies"].items()}
    assert "onnxruntime" in extras["cpu"] and "onnxruntime-gpu" in extras["gpu"]
    for name, reqs in extras.items():
        assert not {"onnxruntime", "onnxruntime-gpu"} <= reqs, name
        assert not ({"onnxruntime", "onnxruntime-gpu"} & reqs and name not in ("cpu", "gpu")), name


def test_the_gpu_extra_pins_one_cuda_major():
    gpu = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gpu"]
    cuda_python = next(r for r in gpu if r.startswith("cuda-python"))
    ort_gpu = next(r for r in gpu if r.startswith("onnxruntime-gpu"))
    assert "<13" in cuda_python and ">=12.9.1" in cuda_python
    assert "<1.27" in ort_gpu  # 1.27 and later are built for CUDA 13


def test_make_installs_the_cpu_runtime_and_constraints_never_the_gpu_one():
    assert "'.[cpu," in (ROOT / "Makefile").read_text()
    pins = [line.split("==")[0] for line in (ROOT / "constraints.txt").read_text().splitlines()
            if line and not line.startswith("#")]
    assert "onnxruntime" in pins and "onnxruntime-gpu" not in pins
