"""``gspo verify A B --max-error SPEC``: B judged against A by an accuracy budget."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from gspo.cli import cli
from tests.helpers import one_line_error, onnx_model, perturbed_pair


def gspo(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def models(tmp_path):
    """A model, and the same model with one weight moved by 1e-2."""
    a, b, g = perturbed_pair(tmp_path)
    return a, b, g.outputs[0].name


def samples_dir(path, count=2):
    path.mkdir()
    for i in range(count):
        np.savez(path / f"s{i}.npz", x=np.random.default_rng(i).standard_normal((1, 4, 8, 8)).astype(np.float32))
    return path


def test_within_the_budget_exits_0(models):
    a, b, out = models
    result = gspo("verify", a, b, "--max-error", "nmse=1e-3,cosine=0.999")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"{out}  nmse ") and " cosine " in lines[0] and " maxrel " in lines[0]
    assert lines[-1] == "within the budget (nmse=0.001,cosine=0.999) on 3 samples"
    assert "warning: the inputs are random: random inputs say little about accuracy on real data" in result.stderr
    assert "--inputs" in result.stderr


def test_a_broken_budget_exits_1_with_the_broken_limits(models):
    a, b, out = models
    result = gspo("verify", a, b, "--max-error", "nmse=1e-12,top1=0.5", "--runs", 2)
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"{out}  nmse ") and lines[0].endswith("top1 1.000")
    assert lines[1] == "NOT within the budget (nmse=1e-12,top1=0.5):"
    assert lines[2].startswith(f"  {out}: nmse ") and lines[2].endswith("> 1e-12") and len(lines) == 3


def test_the_same_model_is_within_a_zero_budget(models):
    a, _, _ = models
    assert gspo("verify", a, a, "--max-error", "nmse=0,maxrel=0,cosine=1").exit_code == 0


def test_inputs_may_be_a_folder_of_samples(tmp_path, models):
    a, b, _ = models
    folder = samples_dir(tmp_path / "samples")
    result = gspo("verify", a, b, "--max-error", "rel_l2=1e-2", "--inputs", folder)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == "within the budget (rel_l2=0.01) on 2 samples"
    assert "warning" not in result.stderr
    single = gspo("verify", a, b, "--max-error", "rel_l2=1e-2", "--inputs", folder / "s0.npz")
    assert single.exit_code == 0 and single.stdout.endswith("on 1 sample\n")
    # without --max-error, --inputs stays one .npz file
    assert "is a directory" in one_line_error(gspo("verify", a, b, "--inputs", folder))


def test_errors_are_one_line(tmp_path, models):
    a, b, _ = models
    assert "unknown metric 'mse'" in one_line_error(gspo("verify", a, b, "--max-error", "mse=1"))
    assert "has no '=value'" in one_line_error(gspo("verify", a, b, "--max-error", "nmse"))
    assert "'nope' the model does not have" in one_line_error(gspo("verify", a, b, "--max-error", "nope:nmse=1"))
    assert "--rtol: the fp32 tolerances do not apply" in one_line_error(
        gspo("verify", a, b, "--max-error", "nmse=1", "--rtol", "0.1"))
    (tmp_path / "empty").mkdir()
    assert "no .npz file in the folder" in one_line_error(
        gspo("verify", a, b, "--max-error", "nmse=1", "--inputs", tmp_path / "empty"))


def labelled(tmp_path, name: str, scale: float):
    """x -> MatMul -> logits, and ArgMax -> label (int64)."""
    w = numpy_helper.from_array(np.diag([1.0, 2.0, 3.0 * scale]).astype(np.float32), "w")
    model = onnx_model(
        [helper.make_node("MatMul", ["x", "w"], ["logits"]),
         helper.make_node("ArgMax", ["logits"], ["label"], axis=1, keepdims=0)],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [4, 3]),
         helper.make_tensor_value_info("label", TensorProto.INT64, [4])],
        initializers=[w])
    path = tmp_path / name
    path.write_bytes(model.SerializeToString())
    return path


def test_integer_outputs_must_be_equal_unless_top1_bounds_them(tmp_path):
    a, c = labelled(tmp_path, "a.onnx", 1.0), labelled(tmp_path, "c.onnx", 0.01)  # c's class 2 loses
    np.savez(tmp_path / "in.npz", x=np.array([[0.5, 0, 1], [1, 0, 0], [0, 1, 0], [0.5, 0, 2]], np.float32))
    feeds = ["--inputs", tmp_path / "in.npz"]
    same = gspo("verify", a, a, "--max-error", "nmse=0", *feeds)
    assert same.exit_code == 0 and "exact 1" in same.stdout
    result = gspo("verify", a, c, "--max-error", "nmse=1", *feeds)
    assert result.exit_code == 1 and "exact 0" in result.stdout
    label = next(line for line in result.stdout.splitlines() if "differs from the reference" in line)
    assert "no limit of the budget covers it" in label
    half = gspo("verify", a, c, "--max-error", "nmse=1,top1=0.5", *feeds)  # rows 0 and 3 change label
    assert half.exit_code == 0 and "top1 0.500" in half.stdout


def test_help_has_an_example_with_max_error():
    text = gspo("verify", "--help").output
    assert "--max-error nmse=1e-3,top1=0.99" in text and "Example:" in text
