"""The CLI on the kinds of models users bring: outputs that are not tensors (ZipMap's maps)."""

from __future__ import annotations

from click.testing import CliRunner

from gspo.cli import cli
from tests.helpers import one_line_error
from tests.kinds import save, zipmap_model


def _invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_run_describes_a_sequence_of_maps_and_refuses_to_put_it_in_an_npz(tmp_path):
    """``gspo run`` printed each output's dtype and mean: a list of dicts made it an internal error."""
    path = save(zipmap_model(), tmp_path / "clf.onnx")
    r = _invoke("run", path, "--input-shape", "x=2,4")
    assert r.exit_code == 0, r.output
    assert "probabilities: sequence of 2 (map)" in r.output
    out = tmp_path / "out.npz"
    r = _invoke("run", path, "--input-shape", "x=2,4", "-o", out)
    assert "'probabilities' is not a tensor" in one_line_error(r)
    assert not out.exists()


def test_optimize_carries_a_model_with_contrib_ops_through(tmp_path):
    """The issue's case: a model from onnxruntime's transformer optimizer made ``gspo optimize``
    exit with 'internal error (TypeError: 'NoneType' object is not iterable)'."""
    from tests.kinds import contrib_model

    path = save(contrib_model(), tmp_path / "fused.onnx")
    out = tmp_path / "out.onnx"
    r = _invoke("optimize", path, "-o", out, "--time-budget", "20", "--budget", "4", "--backends", "ort")
    assert r.exit_code == 0, r.output
    assert out.exists() and "internal error" not in r.output
