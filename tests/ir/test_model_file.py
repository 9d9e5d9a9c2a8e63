"""A model file is checked before it is read: what is not a regular file, or is larger than an
ONNX file can be, is refused at once in one line (gspo.ir.files.read_model_file)."""

from __future__ import annotations

import os
import threading

import pytest

from gspo import ir
from gspo.errors import ModelLoadError
from gspo.ir.files import MAX_MODEL_BYTES, read_model_file
from tests.helpers import relu_model


def _load_in_thread(path, wait: float = 10.0):
    """``ir.load(path)``'s error, from a thread given ``wait`` seconds; a load still blocked
    then (on a FIFO with no writer) is released by opening the FIFO for writing, and fails."""
    box: dict = {}

    def target():
        try:
            ir.load(path)
        except Exception as e:  # noqa: BLE001 - the test inspects it
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(wait)
    if t.is_alive():
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # lets the blocked read see the end
        t.join(wait)
        pytest.fail(f"loading {path} blocked")
    return box.get("error")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "model.onnx"
    os.mkfifo(fifo)
    err = _load_in_thread(fifo)
    assert isinstance(err, ModelLoadError)
    assert str(err) == f"{fifo}: not a regular file (a device, FIFO or socket), not an ONNX file"


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero here")
def test_a_device_is_refused_without_reading_it():
    err = _load_in_thread("/dev/zero")
    assert isinstance(err, ModelLoadError) and "not a regular file" in str(err)


def test_a_file_larger_than_an_onnx_file_can_be_is_refused_before_it_is_read(tmp_path, monkeypatch):
    import gspo.ir.files as files

    sparse = tmp_path / "big.onnx"
    with open(sparse, "wb") as f:
        f.truncate(3 * 2**30)  # a 3 GiB hole: no disk used
    monkeypatch.setattr(files, "_read_at_most", lambda *a: pytest.fail("the file was read"))
    with pytest.raises(ModelLoadError, match=r"big.onnx: 3\.2 GB, larger than an ONNX file can be \(2 GiB;"):
        ir.load(sparse)


def test_a_directory_and_a_missing_file_are_one_line(tmp_path):
    with pytest.raises(ModelLoadError, match="is a directory, not an ONNX file"):
        read_model_file(tmp_path)
    with pytest.raises(ModelLoadError, match="nope.onnx: no such file"):
        read_model_file(tmp_path / "nope.onnx")


def test_a_regular_file_is_read_whole(tmp_path):
    p = tmp_path / "m.onnx"
    data = relu_model().SerializeToString()
    p.write_bytes(data)
    assert read_model_file(p) == data
    assert ir.load(p).inputs[0].shape == (2, 3)
    assert MAX_MODEL_BYTES == 2**31 - 1


def test_a_file_whose_size_is_not_known_is_read_to_its_end(tmp_path, monkeypatch):
    """Files that report size 0 (as /proc does) are read on, up to the limit."""
    import gspo.ir.files as files

    p = tmp_path / "m.onnx"
    data = relu_model().SerializeToString()
    p.write_bytes(data)
    real_fstat = os.fstat

    def zero_size(fd):
        st = real_fstat(fd)
        return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid, st.st_gid, 0,
                               st.st_atime, st.st_mtime, st.st_ctime))

    monkeypatch.setattr(files.os, "fstat", zero_size)
    assert read_model_file(p) == data
    monkeypatch.setattr(files, "MAX_MODEL_BYTES", 10)
    with pytest.raises(ModelLoadError, match="larger than an ONNX file can be"):
        read_model_file(p)
