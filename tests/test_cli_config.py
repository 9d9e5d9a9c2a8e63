"""``gspo optimize`` builds optimize's config record itself and passes it whole: no flat keyword
options in between, ``--precision`` split and ``--max-error`` parsed once, as they are read."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from gspo import ir
from gspo.cli import cli
from gspo.errors import GspoError
from gspo.search.options import MaxError, OptimizeConfig
from tests.helpers import branchy, one_line_error


def gspo(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def model(tmp_path):
    return ir.save(branchy(), tmp_path / "m.onnx")


@pytest.fixture
def given(monkeypatch):
    """What the command passes to optimize (which then stops it with one line)."""
    import gspo.search as search

    calls = []

    def stop(model, config=None, **options):
        calls.append((config, {k: v for k, v in options.items() if k not in ("progress", "input_shapes", "inputs",
                                                                                "started")}))
        raise GspoError("stopped by the test")

    monkeypatch.setattr(search, "optimize", stop)
    return calls


def test_the_command_passes_the_config_record_it_built(model, tmp_path, given):
    result = gspo("optimize", model, "-o", tmp_path / "o.onnx", "--budget", 7, "--time-budget", 30, "-t", 16,
                  "--max-streams", 2, "--jobs", 1, "--no-streams", "--seed", 5, "--select", "estimated",
                  "--backends", "ort", "--precision", "bf16, INT8", "--max-error", "nmse=1e-3", "--foreign-profile")
    assert "stopped by the test" in one_line_error(result)
    (config, options), = given
    assert options == {}
    assert config == OptimizeConfig.of(budget=7, time_budget=30.0, threshold=16, max_streams=2, jobs=1,
                                       use_streams=False, seed=5, select="estimated", backends=("ort",),
                                       precision=("bf16", "int8"), max_error="nmse=1e-3", force_profile=True)
    assert config.precision.max_error == MaxError.parse("nmse=1e-3")


def test_the_defaults_are_the_records(model, tmp_path, given):
    gspo("optimize", model, "-o", tmp_path / "o.onnx")
    assert given[0] == (OptimizeConfig(), {})


def test_max_error_is_parsed_once_as_the_command_reads_it(model, tmp_path, given, monkeypatch):
    from gspo.precision.accuracy import ErrorBudget

    parse = ErrorBudget.parse.__func__
    specs = []
    monkeypatch.setattr(ErrorBudget, "parse", classmethod(lambda cls, spec: (specs.append(spec), parse(cls, spec))[1]))
    gspo("optimize", model, "-o", tmp_path / "o.onnx", "--precision", "int8", "--max-error", "top1=0.99")
    assert specs == ["top1=0.99"] and given[0][0].precision.max_error.spec == "top1=0.99"
    line = one_line_error(gspo("optimize", model, "-o", tmp_path / "o.onnx", "--precision", "int8", "--max-error",
                               "nmsq=1"))
    assert "--max-error: unknown metric 'nmsq'" in line and len(given) == 1  # refused before optimize
