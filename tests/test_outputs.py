"""Output files: written whole or not at all, never over an input or another output."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest

import gspo.outputs as outputs
from gspo.outputs import OutputError, atomic_write, check_outputs, replacing, replacing_together


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
        atomic_write(target, b"x" * 10_000, overwrite=True)
    assert target.read_bytes() == b"earlier contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_an_interrupt_while_writing_leaves_the_earlier_file_intact(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"earlier")
    with pytest.raises(KeyboardInterrupt), replacing(target, overwrite=True) as tmp:
        tmp.write_bytes(b"half")
        raise KeyboardInterrupt
    assert target.read_bytes() == b"earlier"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_a_hard_linked_target_is_replaced_not_written_through(tmp_path):
    original, link = tmp_path / "a", tmp_path / "b"
    original.write_bytes(b"shared")
    os.link(original, link)
    atomic_write(link, "new", overwrite=True)
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


# ------------------------------------------------- no clobber, atomically at the end
def test_a_file_that_appears_while_writing_is_not_overwritten(tmp_path):
    target = tmp_path / "out.onnx"
    with pytest.raises(OutputError, match="out.onnx: exists; not overwritten"), replacing(target) as tmp:
        tmp.write_bytes(b"ours")
        target.write_bytes(b"another process's")  # after every check made before the work
    assert target.read_bytes() == b"another process's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.onnx"]


@pytest.mark.parametrize("finishing_first", ["a", "b"])
def test_of_two_writers_the_first_to_finish_wins_and_the_other_fails(tmp_path, finishing_first):
    target = tmp_path / "out.json"
    writers = {name: replacing(target) for name in ("a", "b")}
    for name, writer in writers.items():  # a starts, then b: both pass the checks made first
        writer.__enter__().write_bytes(name.encode())
    winner, loser = writers.pop(finishing_first), next(iter(writers.values()))
    winner.__exit__(None, None, None)
    with pytest.raises(OutputError, match="exists; not overwritten"):
        loser.__exit__(None, None, None)
    assert target.read_bytes() == finishing_first.encode()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_overwrite_replaces_a_file_that_appeared_while_writing(tmp_path):
    target = tmp_path / "out.json"
    with replacing(target, overwrite=True) as tmp:
        tmp.write_bytes(b"ours")
        target.write_bytes(b"theirs")
    assert target.read_bytes() == b"ours"


def test_without_hard_links_the_target_is_claimed_exclusively(tmp_path, monkeypatch):
    def no_links(src, dst):
        raise OSError(errno.EPERM, os.strerror(errno.EPERM))

    monkeypatch.setattr(outputs.os, "link", no_links)
    target = tmp_path / "out.json"
    atomic_write(target, "first")
    assert target.read_text() == "first"
    with pytest.raises(OutputError, match="exists; not overwritten"), replacing(tmp_path / "late.json") as tmp:
        tmp.write_text("ours")
        (tmp_path / "late.json").write_text("theirs")
    assert (tmp_path / "late.json").read_text() == "theirs"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["late.json", "out.json"]


# ------------------------------------------------------------ files written together
def _umask(value: int) -> int:
    return os.umask(value)


def test_files_written_together_are_all_or_nothing_without_overwrite(tmp_path):
    data, model = tmp_path / "m.onnx.data", tmp_path / "m.onnx"
    with pytest.raises(OutputError, match="m.onnx: exists"), replacing_together([data, model]) as folder:
        (folder / data.name).write_bytes(b"weights")
        (folder / model.name).write_bytes(b"model")
        model.write_bytes(b"appeared meanwhile")
    assert model.read_bytes() == b"appeared meanwhile"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]  # the weights were taken back


def test_files_written_together_get_the_umask_mode_not_the_temporary_ones(tmp_path):
    data, model = tmp_path / "m.onnx.data", tmp_path / "m.onnx"
    old = _umask(0o027)
    try:
        with replacing_together([data, model]) as folder:
            (folder / data.name).write_bytes(b"weights")
            (folder / model.name).write_bytes(b"model")
    finally:
        _umask(old)
    assert [p.stat().st_mode & 0o777 for p in (data, model)] == [0o640, 0o640]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.onnx.data"]


# ------------------------------------------------------------ stale temporary files
def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", ""])
    proc.wait()
    return proc.pid


def _temp_name(target: str, pid: int, host: str | None = None) -> str:
    return f".{target}.gspo-{outputs._host() if host is None else host}-{pid}-k3x_9a.tmp"


def test_stale_temporary_files_of_gone_processes_are_removed_and_others_kept(tmp_path):
    dead = _dead_pid()
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as live:
        try:
            stale_file = tmp_path / _temp_name("out.onnx", dead)
            stale_folder = tmp_path / _temp_name("big.onnx", dead)
            kept = [tmp_path / _temp_name("out.onnx", live.pid), tmp_path / _temp_name("out.onnx", dead, "otherhost"),
                    tmp_path / f".out.onnx.{dead}.tmp", tmp_path / "notes.txt"]
            stale_file.write_bytes(b"half a model")
            stale_folder.mkdir()
            (stale_folder / "big.onnx.data").write_bytes(b"half the weights")
            for p in kept:
                p.write_bytes(b"keep")
            atomic_write(tmp_path / "other.json", "{}")
        finally:
            live.kill()
    assert not stale_file.exists() and not stale_folder.exists()
    assert all(p.read_bytes() == b"keep" for p in kept)


_KILLED_WRITER = """
import sys, time
from gspo.outputs import replacing
with replacing(sys.argv[1]) as tmp:
    tmp.write_bytes(b"x" * 1000)
    print(tmp.name, flush=True)
    time.sleep(60)
"""


def test_a_writer_killed_mid_write_leaves_a_temporary_file_the_next_write_removes(tmp_path):
    target = tmp_path / "out.onnx"
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, str(target)], stdout=subprocess.PIPE, text=True)
    left = tmp_path / proc.stdout.readline().strip()
    proc.kill()  # SIGKILL: no cleanup runs
    proc.wait()
    proc.stdout.close()
    assert left.exists() and left.name.startswith(f".out.onnx.gspo-{outputs._host()}-{proc.pid}-")
    atomic_write(target, b"model")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.onnx"]


def test_check_outputs_removes_stale_temporary_files_before_the_work(tmp_path):
    stale = tmp_path / _temp_name("out.onnx", _dead_pid())
    stale.write_bytes(b"half")
    check_outputs({"-o": tmp_path / "out.onnx"}, [], force=False)
    assert not stale.exists()


def test_a_dangling_symbolic_link_is_neither_replaced_nor_written_through(tmp_path):
    (tmp_path / "o.onnx").symlink_to(tmp_path / "nowhere")
    for force in (False, True):
        with pytest.raises(OutputError, match=r"o\.onnx: is a link to .*nowhere, which does not exist; .*remove the link"):
            check_outputs({"-o": tmp_path / "o.onnx"}, [], force=force)
    with pytest.raises(OutputError, match="exists; not overwritten"):
        atomic_write(tmp_path / "o.onnx", "{}")
    with pytest.raises(OutputError, match="which does not exist"):
        atomic_write(tmp_path / "o.onnx", "{}", overwrite=True)
    assert (tmp_path / "o.onnx").is_symlink() and not (tmp_path / "nowhere").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.onnx"]


def test_a_temporary_name_with_a_pid_the_system_cannot_hold_is_left_alone(tmp_path):
    odd = tmp_path / _temp_name("out.onnx", 9_999_999_999)
    odd.write_bytes(b"keep")
    atomic_write(tmp_path / "out.onnx", "{}")
    assert odd.read_bytes() == b"keep"
