"""Outputs that are symbolic links (issue 51, item 2): written through to the regular file they
lead to, as ``cp`` does, the link kept; a link to a process's open file descriptor (what
/dev/stdout is) or a dangling link is refused in one line, also with --force."""

from __future__ import annotations

import os

import numpy as np
import pytest

from gspo import ir
from tests.helpers import branchy, one_line_error
from tests.test_cli_safety_paths import FAST, gspo, no_work  # noqa: F401 (a fixture, used by name)


@pytest.fixture
def log(tmp_path):
    """A file this process holds open (as the shell's ``> log`` holds stdout) and its /proc link."""
    path = tmp_path / "log"
    path.write_bytes(b"the log so far")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    (tmp_path / "stdout").symlink_to(f"/proc/self/fd/{fd}")  # what /dev/stdout is
    yield path
    os.close(fd)


@pytest.mark.parametrize("command", [
    ("optimize", "{m}", "-o", "{t}/stdout", "--force", *FAST),
    ("optimize", "{m}", "-o", "{t}/o.onnx", "--report", "{t}/stdout", "--force", *FAST),
    ("convert", "{m}", "-o", "{t}/stdout", "--force"),
    ("run", "{m}", "-o", "{t}/stdout", "--force"),
])
@pytest.mark.usefixtures("no_work")
@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="Linux shows open files in /proc")
def test_a_link_to_a_processs_open_file_is_never_replaced(tmp_path, log, command):
    model = ir.save(branchy(), tmp_path / "m.onnx")
    target = os.readlink(tmp_path / "stdout")
    error = one_line_error(gspo(*[a.format(m=model, t=tmp_path) for a in command]))
    assert f"stdout: is a link to {target}, a process's open file descriptor" in error
    assert "gspo writes only regular files" in error
    assert (tmp_path / "stdout").is_symlink() and os.readlink(tmp_path / "stdout") == target
    assert log.read_bytes() == b"the log so far"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log", "m.onnx", "stdout"]


def test_an_output_that_links_to_a_regular_file_is_written_through(tmp_path):
    model = ir.save(branchy(), tmp_path / "m.onnx")
    (tmp_path / "store").mkdir()
    for name in ("model.onnx", "out.npz"):
        (tmp_path / "store" / name).write_bytes(b"an earlier result")
        (tmp_path / name).symlink_to(os.path.join("store", name))
    assert gspo("convert", model, "-o", tmp_path / "model.onnx", "--force").exit_code == 0
    assert gspo("run", model, "-o", tmp_path / "out.npz", "--force").exit_code == 0
    assert (tmp_path / "model.onnx").is_symlink() and (tmp_path / "out.npz").is_symlink()
    assert ir.load(tmp_path / "store" / "model.onnx").name == "branchy"
    assert np.load(tmp_path / "store" / "out.npz").files
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["m.onnx", "model.onnx", "model.onnx", "out.npz",
                                                           "out.npz", "store"]


@pytest.mark.usefixtures("no_work")
def test_a_dangling_link_is_refused_with_force_and_nothing_is_made(tmp_path):
    model = ir.save(branchy(), tmp_path / "m.onnx")
    (tmp_path / "o.onnx").symlink_to("nowhere/o.onnx")
    for command in (("convert", model, "-o", tmp_path / "o.onnx", "--force"),
                    ("optimize", model, "-o", tmp_path / "o.onnx", "--force", *FAST)):
        error = one_line_error(gspo(*command))
        assert "o.onnx: is a link to" in error and "which does not exist" in error
    assert (tmp_path / "o.onnx").is_symlink() and sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "o.onnx"]
