"""``gspo verify a.onnx placed.onnx`` runs the placed model the way gspo runs it (issue 51, item 3).

OpenVINO is a stand-in (tests/runtime/test_verify_placed.py): no OpenVINO or CPU of a kind needed."""

from __future__ import annotations

from click.testing import CliRunner

from gspo import ir
from gspo.cli import cli
from gspo.streams import Placement
from tests.helpers import one_line_error
from tests.runtime.test_plan import _two_matmuls
from tests.runtime.test_verify_placed import fake_openvino


def _files(tmp_path, where: dict | None = None):
    g = ir.load_bytes(_two_matmuls().SerializeToString())
    placement = Placement.of(where) if where else Placement.whole(g, "openvino")
    return (ir.save(g, tmp_path / "src.onnx"),
            ir.save(g, tmp_path / "placed.onnx", placement=placement.to_json()))


def _verify(*args):
    return CliRunner().invoke(cli, ["verify", *map(str, args)], catch_exceptions=False)


def test_verify_judges_what_the_placement_computes(monkeypatch, tmp_path):
    """The placed model's OpenVINO pieces compute 1% off: NOT equivalent, exit 1 (both run on
    onnxruntime, it was 'equivalent')."""
    fake = fake_openvino(monkeypatch, factor=1.01)
    src, placed = _files(tmp_path)
    done = _verify(src, placed)
    assert done.exit_code == 1, done.output
    assert "NOT equivalent" in done.output and fake.precisions == ["f32"]
    assert f"{placed} ran as saved: " in done.output and "on openvino" in done.output
    assert f"{src} ran" not in done.output  # the plain session is not announced
    plain = _verify(src, src)
    assert plain.exit_code == 0 and " ran " not in plain.output  # no placement: onnxruntime, as before


def test_verify_of_a_placed_model_without_openvino_is_one_line_not_equivalent(monkeypatch, tmp_path):
    fake_openvino(monkeypatch, installed=False)
    src, placed = _files(tmp_path)
    line = one_line_error(_verify(src, placed))
    assert line.startswith("gspo: error: the second model cannot run here as saved: backend 'openvino' cannot run "
                           "here: OpenVINO is not installed"), line


def test_verify_runs_a_bf16_placement_at_f32_on_a_cpu_without_bf16(monkeypatch, tmp_path):
    fake = fake_openvino(monkeypatch, bf16=False)
    src, placed = _files(tmp_path, {"r": "openvino:bf16", "y2": "openvino:bf16"})
    done = _verify(src, placed)
    assert done.exit_code == 0 and "equivalent (" in done.output, done.output
    assert fake.precisions == ["f32"]
    assert "openvino:bf16 (at f32 here)" in done.output, done.output
