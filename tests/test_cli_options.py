"""Every option is checked before any work: values the code cannot hold are a one-line usage
error naming the option (exit 2), never an internal error later on."""

from __future__ import annotations

import json

import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from gspo import ir
from gspo.cli import cli
from gspo.cli.common import MAX_DIM, MAX_ELEMENTS
from tests.helpers import branchy, one_line_error, onnx_model

HUGE = "99999999999999999999"


def gspo(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def model(tmp_path):
    return ir.save(branchy(), tmp_path / "m.onnx")


@pytest.fixture
def dynamic(tmp_path):
    """Relu over x[N, C]: both dimensions dynamic, so any --input-shape of rank 2 fits."""
    m = onnx_model([helper.make_node("Relu", ["x"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "C"])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "C"])])
    path = tmp_path / "d.onnx"
    onnx.save(m, path)
    return path


@pytest.mark.parametrize("command", [
    ("optimize", "{m}", "-o", "{out}"),
    ("verify", "{m}", "{m}"),
    ("run", "{m}"),
    ("bench", "{m}", "--runs", "1"),
    ("zoo", "squeezenet", "-o", "{out}"),
])
@pytest.mark.parametrize("seed", ["-1", str(2**32), HUGE])
def test_a_seed_outside_numpys_range_is_refused(tmp_path, model, command, seed):
    args = [a.format(m=model, out=tmp_path / "out.onnx") for a in command]
    error = one_line_error(gspo(*args, "--seed", seed))
    assert "Invalid value for '--seed'" in error and "0<=x<=4294967295" in error
    assert not (tmp_path / "out.onnx").exists()


def test_the_largest_seed_runs(model):
    assert gspo("verify", model, model, "--seed", 2**32 - 1).exit_code == 0


@pytest.mark.parametrize("command, option, value", [
    (("optimize", "{m}", "-o", "{out}"), "--time-budget", "1e308"),
    (("optimize", "{m}", "-o", "{out}"), "--time-budget", "604801"),
    (("calibrate", "--device", "cpu", "-o", "{out}"), "--budget", "1e308"),
    (("bench", "{m}", "--runs", "1"), "--threads", "99999999999"),
])
def test_numbers_beyond_what_the_code_holds_are_refused(tmp_path, model, command, option, value):
    args = [a.format(m=model, out=tmp_path / "out.json") for a in command]
    error = one_line_error(gspo(*args, option, value))
    assert f"Invalid value for '{option}'" in error
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("command", [
    ("info", "{m}"),
    ("convert", "{m}", "-o", "{out}"),
    ("optimize", "{m}", "-o", "{out}"),
])
@pytest.mark.parametrize("shape, says", [
    (f"x={HUGE},4", f"dimension {HUGE} is above {MAX_DIM}"),
    (f"x={MAX_DIM + 1},1", f"dimension {MAX_DIM + 1} is above"),
    ("x=100000000,100000000", f"more than gspo handles in one input ({MAX_ELEMENTS}"),
])
def test_input_shapes_beyond_what_the_code_holds_are_refused(tmp_path, dynamic, command, shape, says):
    args = [a.format(m=dynamic, out=tmp_path / "out.onnx") for a in command]
    error = one_line_error(gspo(*args, "--input-shape", shape))
    assert "Invalid value for '--input-shape'" in error and says in error
    assert not (tmp_path / "out.onnx").exists()


def test_the_largest_dimension_is_accepted(dynamic):
    result = gspo("info", dynamic, "--input-shape", f"x={MAX_DIM},1", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["inputs"] == {"x": [MAX_DIM, 1]}
