"""Output paths checked before any work (issue 42): never an input's weights file, never a
device, FIFO or socket, temporary names that fit and that no other machine removes."""

from __future__ import annotations

import os
import subprocess
import sys

import onnx
import pytest

import gspo.outputs as outputs
from gspo import ir
from gspo.outputs import (
    OutputError,
    atomic_write,
    check_outputs,
    remove_stale,
    replacing,
    replacing_together,
)
from tests.helpers import branchy


def external_model(folder, name="m.onnx", location="w.bin"):
    """A small model whose weights are kept in ``location`` beside it (onnx external data)."""
    m = ir.to_model(branchy())
    path = folder / name
    onnx.save_model(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=location,
                    size_threshold=0)
    assert (folder / location).stat().st_size > 0
    return path


# ------------------------------------------------------- case 1: the input's weights file
def test_an_output_over_the_inputs_external_data_is_refused_even_with_force(tmp_path):
    model = external_model(tmp_path)
    weights = tmp_path / "w.bin"
    (tmp_path / "link.bin").symlink_to(weights)
    os.link(weights, tmp_path / "hard.bin")
    for out in (weights, tmp_path / "link.bin", tmp_path / "hard.bin"):
        with pytest.raises(OutputError, match=r"--report is the external data of .*m\.onnx"):
            check_outputs({"-o": tmp_path / "o.onnx", "--report": out}, [model], force=True, models=[model])


def test_an_onnx_input_counts_its_external_data_without_being_named_a_model(tmp_path):
    model = external_model(tmp_path)
    with pytest.raises(OutputError, match="external data of"):
        check_outputs({"--json": tmp_path / "w.bin"}, [model], force=True)


def test_the_weights_file_beside_a_model_output_is_checked_up_front(tmp_path):
    given = external_model(tmp_path, "in2.onnx", location="w.onnx.data")
    with pytest.raises(OutputError, match=r"w\.onnx\.data: -o's weights file is the external data of .*in2\.onnx"):
        check_outputs({"-o": tmp_path / "w.onnx"}, [given], force=True, models=[given], model_outputs=["-o"])
    (tmp_path / "o.onnx.data").write_bytes(b"another model's weights")
    with pytest.raises(OutputError, match=r"o\.onnx\.data: exists .*use --force"):
        check_outputs({"-o": tmp_path / "o.onnx"}, [given], force=False, models=[given], model_outputs=["-o"])
    check_outputs({"-o": tmp_path / "o.onnx"}, [given], force=True, models=[given], model_outputs=["-o"])
    with pytest.raises(OutputError, match="name the same file"):
        check_outputs({"-o": tmp_path / "o.onnx", "--report": tmp_path / "o.onnx.data"}, [], force=True,
                      model_outputs=["-o"])


# ------------------------------------------- case 2: devices, FIFOs, sockets (a FIFO stands in)
@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


def test_an_output_that_is_a_fifo_is_refused_even_with_force(tmp_path, fifo):
    (tmp_path / "link").symlink_to(fifo)
    for out in (fifo, tmp_path / "link"):
        with pytest.raises(OutputError, match="not a regular file"):
            check_outputs({"-o": out}, [], force=True)
    (tmp_path / "o.onnx.data").symlink_to(fifo)
    with pytest.raises(OutputError, match=r"o\.onnx\.data: .*not a regular file"):
        check_outputs({"-o": tmp_path / "o.onnx"}, [], force=True, model_outputs=["-o"])


def test_writing_over_a_fifo_is_refused_and_leaves_it(tmp_path, fifo):
    import stat

    (tmp_path / "link").symlink_to(fifo)
    for out in (fifo, tmp_path / "link"):
        with pytest.raises(OutputError, match="not a regular file"):
            atomic_write(out, b"data", overwrite=True)
    with pytest.raises(OutputError, match="not a regular file"), replacing_together([fifo], overwrite=True) as folder:
        (folder / "fifo").write_bytes(b"data")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and (tmp_path / "link").is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "link"]


def test_a_fifo_that_appears_while_writing_is_not_replaced(tmp_path):
    import stat

    target = tmp_path / "out.npz"
    with pytest.raises(OutputError, match="not a regular file"), replacing(target, overwrite=True) as tmp:
        tmp.write_bytes(b"ours")
        os.mkfifo(target)
    assert stat.S_ISFIFO(os.lstat(target).st_mode)


# ------------------------------------------------ case 3: machines sharing a folder
def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", ""])
    proc.wait()
    return proc.pid


def test_a_temporary_file_of_a_pod_whose_name_shares_16_letters_is_kept(tmp_path, monkeypatch):
    dead = _dead_pid()
    monkeypatch.setattr(outputs.socket, "gethostname", lambda: "gspo-worker-5d8f7b9c4-aaaaa")
    prefix = outputs._temp_prefix(tmp_path / "a.onnx").replace(f"-{os.getpid()}-", f"-{dead}-")
    theirs = tmp_path / (prefix + "k3x9a.tmp")  # what a run on pod -aaaaa, process `dead`, writes
    theirs.mkdir()
    (theirs / "a.onnx.data").write_bytes(b"weights being written on another machine")
    monkeypatch.setattr(outputs.socket, "gethostname", lambda: "gspo-worker-5d8f7b9c4-bbbbb")
    assert remove_stale(tmp_path) == []
    assert (theirs / "a.onnx.data").exists()
    monkeypatch.setattr(outputs.socket, "gethostname", lambda: "gspo-worker-5d8f7b9c4-aaaaa")
    assert remove_stale(tmp_path) == [theirs]  # the same machine: its pid is gone, so it is removed


def test_the_host_in_a_temporary_name_identifies_the_machine_not_a_prefix_of_its_name(monkeypatch):
    hosts = set()
    for name in ("gspo-worker-5d8f7b9c4-aaaaa", "gspo-worker-5d8f7b9c4-bbbbb", "localhost"):
        monkeypatch.setattr(outputs.socket, "gethostname", lambda name=name: name)
        hosts.add(outputs._host())
    assert len(hosts) == 3


# ------------------------------------------------------ case 14: names, slashes, signals
@pytest.mark.parametrize("length", [240, 250, 255])
def test_any_legal_name_can_be_written_also_with_its_weights_beside_it(tmp_path, length):
    target = tmp_path / ("n" * (length - 5) + ".onnx")
    check_outputs({"-o": target}, [], force=False)
    atomic_write(target, b"model")
    assert target.read_bytes() == b"model"
    atomic_write(target, b"again", overwrite=True)
    if length <= 250:
        data = target.with_name(target.name + ".data")
        with replacing_together([data, target], overwrite=True) as folder:
            (folder / data.name).write_bytes(b"weights")
            (folder / target.name).write_bytes(b"model")
        assert data.read_bytes() == b"weights"
    assert all(p.name in (target.name, target.name + ".data") for p in tmp_path.iterdir())


def test_a_name_too_long_for_the_file_system_is_refused_up_front(tmp_path):
    with pytest.raises(OutputError, match="name too long"):
        check_outputs({"-o": tmp_path / ("n" * 256)}, [], force=True)
    with pytest.raises(OutputError, match="too long"):
        check_outputs({"-o": tmp_path / ("d/" * 2500) / "o.onnx"}, [], force=True)


@pytest.mark.parametrize("given", ["out/new/", "out/new/."])
def test_a_path_ending_in_a_slash_is_refused(tmp_path, given):
    path = os.path.join(str(tmp_path), given)
    with pytest.raises(OutputError, match="ends in '/'"):
        check_outputs({"-o": path}, [], force=True)
    with pytest.raises(OutputError, match="ends in '/'"):
        atomic_write(path, b"x")
    assert list(tmp_path.iterdir()) == []


def _interrupted_after(monkeypatch, name: str):
    """``os.NAME`` does its work on a temporary name, then an interrupt arrives (SIGTERM raises)."""
    real = getattr(os, name)

    def then_interrupt(path, *args, **kwargs):
        result = real(path, *args, **kwargs)
        if ".gspo-" in os.fspath(path):
            raise KeyboardInterrupt
        return result

    monkeypatch.setattr(os, name, then_interrupt)


def test_an_interrupt_as_the_temporary_folder_is_made_leaves_nothing(tmp_path, monkeypatch):
    _interrupted_after(monkeypatch, "mkdir")
    with pytest.raises(KeyboardInterrupt), replacing_together([tmp_path / "m.onnx.data", tmp_path / "m.onnx"]):
        pass
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []


def test_an_interrupt_as_the_temporary_file_is_made_leaves_nothing(tmp_path, monkeypatch):
    _interrupted_after(monkeypatch, "open")
    with pytest.raises(KeyboardInterrupt):
        atomic_write(tmp_path / "o.json", "{}")
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------- issue 51, item 2: symbolic links as outputs
@pytest.fixture
def open_fd(tmp_path):
    """A descriptor this process holds open on a file (as a shell's ``> log`` gives stdout)."""
    log = tmp_path / "log"
    log.write_bytes(b"the log so far")
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    yield fd
    os.close(fd)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="Linux shows open files in /proc")
def test_a_link_to_a_processs_open_file_descriptor_is_refused_even_with_force(tmp_path, open_fd):
    link = tmp_path / "stdout"  # what /dev/stdout is: a link to /proc/self/fd/1
    link.symlink_to(f"/proc/self/fd/{open_fd}")
    (tmp_path / "fds").symlink_to("/proc/self/fd")  # what /dev/fd is
    for out in (link, tmp_path / "fds" / str(open_fd), f"/proc/self/fd/{open_fd}"):
        for force in (False, True):
            with pytest.raises(OutputError, match=r"a process's open file descriptor .*gspo writes only regular files"):
                check_outputs({"-o": out}, [], force=force)
        with pytest.raises(OutputError, match="a process's open file descriptor"):
            atomic_write(out, b"model", overwrite=True)
    with pytest.raises(OutputError, match=f"stdout: is a link to /proc/self/fd/{open_fd}, a process's open file"):
        check_outputs({"--report": link}, [], force=True)
    with pytest.raises(OutputError, match="a process's open file descriptor"):
        with replacing_together([tmp_path / "stdout.data", link], overwrite=True) as folder:
            (folder / "stdout").write_bytes(b"model")
    assert link.is_symlink() and os.readlink(link) == f"/proc/self/fd/{open_fd}"
    assert (tmp_path / "log").read_bytes() == b"the log so far"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fds", "log", "stdout"]


def test_a_link_to_a_regular_file_is_written_through_beside_its_target_and_stays_a_link(tmp_path, monkeypatch):
    real = tmp_path / "store" / "model.onnx"
    real.parent.mkdir()
    real.write_bytes(b"old")
    real.chmod(0o640)
    (tmp_path / "out").mkdir()
    first, second = tmp_path / "out" / "a.onnx", tmp_path / "out" / "b.onnx"
    second.symlink_to(os.path.join("..", "store", "model.onnx"))  # relative, and a chain: a -> b -> model
    first.symlink_to("b.onnx")
    with pytest.raises(OutputError, match="exists; use --force"):
        check_outputs({"-o": first}, [], force=False)
    with pytest.raises(OutputError, match="-o is an input file"):  # the input is seen through the links
        check_outputs({"-o": first}, [real], force=True)
    check_outputs({"-o": first}, [], force=True)
    moves = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda src, dst: (moves.append((src, dst)), real_replace(src, dst)))
    atomic_write(first, b"new", overwrite=True)
    assert [(os.path.dirname(src), dst) for src, dst in moves] == [(str(real.parent), real)]
    assert first.is_symlink() and second.is_symlink() and first.read_bytes() == b"new"
    assert real.read_bytes() == b"new" and real.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.onnx", "b.onnx", "model.onnx", "out", "store"]


def test_files_written_together_go_through_links_only_into_one_folder_under_their_names(tmp_path):
    store, out = tmp_path / "store", tmp_path / "out"
    store.mkdir()
    out.mkdir()
    for name in ("m.onnx", "m.onnx.data"):
        (store / name).write_bytes(b"old")
        (out / name).symlink_to(store / name)
    with replacing_together([out / "m.onnx.data", out / "m.onnx"], overwrite=True) as folder:
        (folder / "m.onnx.data").write_bytes(b"weights")
        (folder / "m.onnx").write_bytes(b"model")
    assert (store / "m.onnx").read_bytes() == b"model" and (store / "m.onnx.data").read_bytes() == b"weights"
    assert all((out / n).is_symlink() for n in ("m.onnx", "m.onnx.data"))
    (out / "m.onnx.data").unlink()  # the model would name weights beside it that land elsewhere
    with pytest.raises(OutputError, match="m.onnx: a link leads one to another folder or name; files written together"):
        with replacing_together([out / "m.onnx.data", out / "m.onnx"], overwrite=True) as folder:
            (folder / "m.onnx.data").write_bytes(b"new weights")
            (folder / "m.onnx").write_bytes(b"new model")
    assert (store / "m.onnx").read_bytes() == b"model" and sorted(p.name for p in out.iterdir()) == ["m.onnx"]


def test_a_loop_of_links_is_refused(tmp_path):
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    (tmp_path / "m.onnx").write_bytes(b"model")
    for inputs in ([], [tmp_path / "m.onnx"]):
        with pytest.raises(OutputError, match="a: is a loop of symbolic links"):
            check_outputs({"-o": tmp_path / "a", "--report": tmp_path / "r.json"}, inputs, force=True)
    with pytest.raises(OutputError, match="loop of symbolic links"):
        atomic_write(tmp_path / "a", b"x", overwrite=True)
    assert (tmp_path / "a").is_symlink() and sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "m.onnx"]
