"""``--inputs``: an .npz is known from its headers (names, dtypes, shapes, sizes) and checked
against the model before any array is read or inflated; what is not an .npz is one line."""

from __future__ import annotations

import io
import os
import zipfile

import numpy as np
import pytest

from gspo.errors import GspoError
from gspo.ir.builder import GraphBuilder
from gspo.runtime import load_inputs
from gspo.runtime.inputs import check_inputs
from gspo.runtime.npz import NpzInputs, read_npz


def _model(shape=(2, 3)):
    b = GraphBuilder()
    b.output(b.op("Relu", [b.input("x", shape)], out="y"))
    return b.build()


def _npy_header(shape, dtype=np.float32) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                               "fortran_order": False, "shape": shape})
    return buf.getvalue()  # the magic string, the version and the header


def _bomb(path, declared_shape, zeros: int):
    """An .npz whose x.npy declares ``declared_shape`` and holds ``zeros`` bytes of zeros, deflated."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf, zf.open("x.npy", "w", force_zip64=True) as f:
        f.write(_npy_header(declared_shape))
        block = bytes(1 << 20)
        for _ in range(zeros >> 20):
            f.write(block)


@pytest.fixture
def no_reading(monkeypatch):
    """Fail the test if any array data is read."""
    monkeypatch.setattr(np.lib.format, "read_array", lambda *a, **k: pytest.fail("an array was read"))


def test_a_compressed_file_declaring_more_than_the_model_takes_is_refused_before_inflating(tmp_path, no_reading):
    bomb = tmp_path / "bomb.npz"
    _bomb(bomb, (8 << 20,), 32 << 20)  # 32 MiB of zeros deflate to ~32 KB
    assert os.path.getsize(bomb) < 100_000
    with pytest.raises(GspoError, match=r"input 'x' is float32\[8388608\], the model wants float32\[2, 3\]"):
        load_inputs(str(bomb), _model())
    huge = tmp_path / "huge.npz"
    _bomb(huge, (805306368,), 1 << 20)  # declares 3 GiB in its header, holds 1 MiB
    with pytest.raises(GspoError, match=r"array 'x' is truncated: \[805306368\] float32 takes 3221225472 bytes"):
        load_inputs(str(huge), _model())


def test_inputs_the_model_wants_but_the_memory_cannot_hold_are_refused_before_reading(tmp_path, monkeypatch,
                                                                                       no_reading):
    import gspo.runtime.inputs as inputs_mod

    p = tmp_path / "in.npz"
    np.savez(p, x=np.zeros((1000, 1000), np.float32))
    monkeypatch.setattr(inputs_mod, "available_memory", lambda: 1_000_000)
    with pytest.raises(GspoError, match=r"the inputs take 4\.0 MB, more than the 1\.0 MB of memory available"):
        load_inputs(str(p), _model((1000, 1000)))


def test_a_good_file_reads_as_numpy_reads_it(tmp_path):
    p = tmp_path / "in.npz"
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    np.savez_compressed(p, x=x)
    feeds = read_npz(p)
    assert isinstance(feeds, NpzInputs) and feeds.members["x"].shape == (2, 3) and len(feeds) == 1
    got = load_inputs(str(p), _model())
    np.testing.assert_array_equal(got["x"], x)
    assert check_inputs(read_npz(p), _model())["x"].dtype == np.float32


@pytest.mark.parametrize("content, message", [
    (b"x = [1, 2, 3]\n", "cannot read inputs: not an .npz file (a zip of .npy arrays"),
    (None, "cannot read inputs: a single .npy array, not an .npz of named inputs"),
])
def test_what_is_not_an_npz_is_one_line(tmp_path, content, message):
    p = tmp_path / "in.npz"
    if content is None:
        with open(p, "wb") as f:  # a file object: numpy adds no ".npy" to the name
            np.save(f, np.zeros((2, 3), np.float32))
    else:
        p.write_bytes(content)
    with pytest.raises(GspoError) as e:
        load_inputs(str(p), _model())
    assert message in str(e.value) and "\n" not in str(e.value) and "pickle" not in str(e.value)


def test_pickled_arrays_and_foreign_members_are_refused(tmp_path):
    p = tmp_path / "obj.npz"
    np.savez(p, x=np.array([{"a": 1}], dtype=object))
    with pytest.raises(GspoError, match="'x' holds Python objects"):
        read_npz(p)
    z = tmp_path / "zip.npz"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("notes.txt", "hello")
    with pytest.raises(GspoError, match="member 'notes.txt' is not an .npy array"):
        read_npz(z)


def test_a_truncated_array_is_one_line(tmp_path):
    p = tmp_path / "short.npz"
    with zipfile.ZipFile(p, "w") as zf:
        zf.writestr("x.npy", _npy_header((2, 3)) + bytes(8))  # 8 of the 24 bytes
    with pytest.raises(GspoError, match=r"array 'x' is truncated: \[2, 3\] float32 takes 24 bytes"):
        read_npz(p)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_or_a_directory_is_refused_without_waiting(tmp_path):
    fifo = tmp_path / "in.npz"
    os.mkfifo(fifo)
    with pytest.raises(GspoError, match="not a regular file"):
        read_npz(fifo)
    with pytest.raises(GspoError, match="not a regular file"):
        read_npz(tmp_path)


def test_a_file_changed_after_its_headers_were_checked_is_refused(tmp_path):
    p = tmp_path / "in.npz"
    np.savez(p, x=np.zeros((2, 3), np.float32))
    feeds = read_npz(p)
    np.savez(p, x=np.zeros((4000, 4000), np.float32))  # replaced by a larger array
    with pytest.raises(GspoError, match="changed while read"):
        feeds["x"]
