"""Output files: written whole or not at all, never over an input or another output."""

from __future__ import annotations

import errno
import os

import pytest

import gspo.outputs as outputs
from gspo.outputs import OutputError, atomic_write, check_outputs, replacing


def _full_disk(monkeypatch):
    """Writes put half their bytes on disk, then fail as a full disk does."""

    def write_half(fd, data):
        os.write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(outputs, "_write_all", write_half)


def test_a_full_disk_leaves_the_earlier_file_intact_and_no_temporary_file(tmp_path, monkeypatch):
    target = tmp_path / "out.json"
    target.write_bytes(b"earlier contents")
    _full_disk(monkeypatch)
    with pytest.raises(OutputError, match="No space left"):
        atomic_write(target, b"x" * 10_000)
    assert target.read_bytes() == b"earlier contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_an_interrupt_while_writing_leaves_the_earlier_file_intact(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"earlier")
    with pytest.raises(KeyboardInterrupt), replacing(target) as tmp:
        tmp.write_bytes(b"half")
        raise KeyboardInterrupt
    assert target.read_bytes() == b"earlier"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_a_hard_linked_target_is_replaced_not_written_through(tmp_path):
    original, link = tmp_path / "a", tmp_path / "b"
    original.write_bytes(b"shared")
    os.link(original, link)
    atomic_write(link, "new")
    assert original.read_bytes() == b"shared" and link.read_text() == "new"


def test_missing_folders_are_created_and_the_mode_is_an_ordinary_files(tmp_path):
    target = tmp_path / "a" / "b" / "c.json"
    atomic_write(target, "{}")
    assert target.read_text() == "{}"
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask


def test_check_outputs_refuses_what_would_lose_data(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"model")
    os.link(model, tmp_path / "hard.onnx")
    (tmp_path / "sym.onnx").symlink_to(model)
    for out in (model, tmp_path / "hard.onnx", tmp_path / "sym.onnx", tmp_path / "." / "m.onnx"):
        with pytest.raises(OutputError, match="-o is an input file"):
            check_outputs({"-o": out}, [model], force=True)
    with pytest.raises(OutputError, match="-o and --report name the same file"):
        check_outputs({"-o": tmp_path / "o.onnx", "--report": tmp_path / "o.onnx"}, [model], force=True)
    with pytest.raises(OutputError, match="exists; use --force"):
        check_outputs({"-o": model}, [], force=False)
    with pytest.raises(OutputError, match="is a folder"):
        check_outputs({"-o": tmp_path}, [], force=True)
    with pytest.raises(OutputError, match="is not a folder"):
        check_outputs({"--report": model / "sub" / "r.json"}, [], force=True)
    check_outputs({"-o": tmp_path / "new" / "o.onnx", "--report": None}, [model, None], force=False)
