"""The OpenVINO backend: ops kept at f32 in a model compiled at bf16."""

from __future__ import annotations

import numpy as np
import pytest

from gspo import ir
from gspo.runtime import CpuExecutor, make_session, run
from gspo.streams import Placement
from tests.runtime.test_plan import _two_matmuls


def _bf16_here():
    from gspo.runtime.backends import backend_status

    ok, why = backend_status("openvino:bf16")
    if not ok:
        pytest.skip(f"bf16 on OpenVINO cannot run here: {why}")


def _nmse(got, want):
    return float(np.sum((got - want) ** 2) / np.sum(want ** 2))


def test_an_op_kept_f32_computes_at_f32_in_the_same_model_as_ops_at_bf16():
    """y1's MatMul kept at f32, y2's at bf16, compiled as one model: y1 as exact as f32 is,
    y2 with bf16's rounding; with nothing kept, y1 rounds too."""
    _bf16_here()
    g = ir.load_bytes(_two_matmuls().SerializeToString())
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)}
    want = run(make_session(g), feeds)
    mixed = Placement.of({"y1": "openvino", "r": "openvino:bf16", "y2": "openvino:bf16"})
    with CpuExecutor(g, None, placement=mixed) as ex:
        assert len(ex.plan.segments) == 1
        got = ex.run(feeds)
    assert _nmse(got["y1"], want["y1"]) < 1e-10
    assert _nmse(got["y2"], want["y2"]) > 1e-7
    with CpuExecutor(g, None, placement=Placement.whole(g, "openvino:bf16")) as ex:
        assert _nmse(ex.run(feeds)["y1"], want["y1"]) > 1e-7


def test_a_value_kept_f32_that_the_model_does_not_compute_changes_nothing():
    _bf16_here()
    from gspo.runtime.openvino import load_openvino

    g = ir.load_bytes(_two_matmuls().SerializeToString())
    feeds = {"x": np.ones((1, 64), np.float32)}
    plain = load_openvino(g, 0, "bf16").run(["y1", "y2"], feeds)
    named = load_openvino(g, 0, "bf16", keep_f32=("no such value",)).run(["y1", "y2"], feeds)
    for a, b in zip(plain, named):
        np.testing.assert_array_equal(a, b)


# ------------------------------------------- no model left in the temporary folder (issue 51, item 8)
def _fake_compile(monkeypatch, tmp_path, seen: list):
    """The temporary folder is ``tmp_path``; the probe's process is a stand-in that notes what the
    folder held while it ran (what a kill -9 of gspo then would leave) and the bytes it was given."""
    import subprocess
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def compile_(args, **kwargs):
        seen.append((sorted(p.name for p in tmp_path.iterdir()), kwargs.get("input")))
        return subprocess.CompletedProcess(args, 0, b"", b"")

    monkeypatch.setattr(subprocess, "run", compile_)


def test_the_probe_hands_its_process_the_model_without_a_file(monkeypatch, tmp_path):
    from gspo.runtime.openvino import openvino_probe

    seen: list = []
    _fake_compile(monkeypatch, tmp_path, seen)
    model = _two_matmuls().SerializeToString()
    assert openvino_probe(model, "bf16") is None
    assert seen == [([], model)]


def test_the_next_probe_removes_what_killed_processes_left_and_keeps_the_rest(monkeypatch, tmp_path):
    import os
    import subprocess
    import sys
    import time

    from gspo import outputs
    from gspo.runtime.openvino import openvino_probe

    proc = subprocess.Popen([sys.executable, "-c", ""])
    proc.wait()
    dead_folder = tmp_path / f".gspo-ov.gspo-{outputs._host()}-{proc.pid}-k3x_9a.tmp"
    live_folder = tmp_path / f".gspo-ov.gspo-{outputs._host()}-{os.getpid()}-k3x_9a.tmp"
    for folder in (dead_folder, live_folder):
        folder.mkdir()
        (folder / "m.bin").write_bytes(b"weights")
    old_probe, new_probe = tmp_path / "gspo-probe-ab12cd.onnx", tmp_path / "gspo-probe-ef34gh.onnx"
    old_probe.write_bytes(b"model")
    new_probe.write_bytes(b"model")  # perhaps an earlier version's probe running now
    two_hours_ago = time.time() - 7200
    os.utime(old_probe, (two_hours_ago, two_hours_ago))
    seen: list = []
    _fake_compile(monkeypatch, tmp_path, seen)
    assert openvino_probe(b"model") is None
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live_folder.name, new_probe.name])


def test_the_folder_of_ops_kept_f32_is_one_a_later_run_removes_once_its_process_is_gone(monkeypatch, tmp_path):
    """The IR written to mark ops f32 lies in a folder named after this process (gspo.outputs'
    scheme), which remove_stale takes once the process is gone; it is gone when done."""
    import os
    import tempfile

    from gspo import outputs
    from gspo.runtime.openvino import _scratch

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with _scratch() as folder:
        name = os.path.basename(folder)
        m = outputs._TEMP_NAME.match(name)
        assert os.path.dirname(folder) == str(tmp_path)
        assert m and m["host"] == outputs._host() and int(m["pid"]) == os.getpid()
    assert not os.path.exists(folder)
