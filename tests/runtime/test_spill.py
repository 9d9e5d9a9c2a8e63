"""Large reference outputs in a temporary file: compared as if in memory, removed after."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from gspo.runtime import compare_outputs
from gspo.runtime.spill import Spill, SpilledArray


@pytest.fixture
def tmp_root(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _sets(rng):
    return [{"y": rng.standard_normal((40, 30)).astype(np.float32), "i": np.arange(12).reshape(3, 4),
             "s": ["not", "a", "tensor"]} for _ in range(2)]


def test_below_the_limit_nothing_is_written(tmp_root):
    sets = _sets(np.random.default_rng(0))
    with Spill(limit=1 << 30) as spill:
        assert spill.outputs(sets) is sets
    assert list(tmp_root.iterdir()) == []


def test_spilled_outputs_compare_as_they_do_in_memory(tmp_root):
    rng = np.random.default_rng(1)
    sets = _sets(rng)
    with Spill(limit=0) as spill:
        spilled = spill.outputs(sets)
        assert isinstance(spilled[0]["y"], SpilledArray) and isinstance(spilled[1]["i"], SpilledArray)
        assert spilled[0]["s"] == ["not", "a", "tensor"]  # not a tensor: kept as it is
        for want, ref in zip(spilled, sets):
            same = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in ref.items()}
            off = dict(same, y=same["y"] + np.float32(0.5))
            off_int = dict(same, i=same["i"] + 1)
            for got in (same, off, off_int):
                assert compare_outputs(want, got) == compare_outputs(ref, got)
            assert compare_outputs(want, same).equivalent
            assert not compare_outputs(want, off).equivalent and not compare_outputs(want, off_int).equivalent
        folder = spilled[0]["y"].path.parent
        assert folder.name.startswith(f"gspo-spill-{os.getpid()}-")
    assert not folder.exists()


def test_a_spilled_output_of_another_shape_is_refused(tmp_root):
    with Spill(limit=0) as spill:
        want = spill.outputs([{"y": np.zeros((4, 5), np.float32)}])[0]
        res = compare_outputs(want, {"y": np.zeros((5, 4), np.float32)})
    assert not res.equivalent and "shape" in res.worst.reason


def test_nan_and_infinities_in_a_spilled_output_are_checked_in_place(tmp_root):
    ref = np.array([1.0, np.nan, np.inf, -2.0] * 20000, np.float32)  # more than one chunk
    with Spill(limit=0) as spill:
        want = spill.outputs([{"y": ref}])[0]
        assert compare_outputs(want, {"y": ref.copy()}).equivalent
        moved = np.roll(ref, 1)
        assert "NaN" in compare_outputs(want, {"y": moved}).worst.reason


def test_a_folder_of_a_dead_run_is_removed_and_a_live_ones_kept(tmp_root):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_root / f"gspo-spill-{int(dead.stdout)}-abc"
    stale.mkdir()
    (stale / "1.bin").write_bytes(b"x" * 10)
    live = tmp_root / f"gspo-spill-{os.getppid()}-def"
    live.mkdir()
    with Spill(limit=0) as spill:
        spill.outputs([{"y": np.ones(3, np.float32)}])
        assert not stale.exists() and live.exists()


def test_a_folder_that_cannot_be_written_keeps_the_outputs_in_memory(tmp_root, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(SpilledArray, "__init__", lambda self, array, path: full())
    sets = [{"y": np.ones(3, np.float32)}]
    with Spill(limit=0) as spill:
        assert spill.outputs(sets) is sets
    assert not any(Path(tmp_root).glob("gspo-spill-*"))
