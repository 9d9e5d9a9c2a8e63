"""Calibration and validation data: loading .npz files and folders, digests, the random
fallback and its warning, and the refusal of validation data that is calibration data."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

import gspo.runtime.inputs as inputs_module
from gspo.errors import GspoError
from gspo.ir.builder import GraphBuilder
from gspo.precision.samples import PrecisionData, load_samples, precision_data, sample_digest
from tests.helpers import branchy

SHAPE = (1, 4, 8, 8)


def x(value: float) -> np.ndarray:
    return np.full(SHAPE, value, np.float32)


@pytest.fixture
def graph():
    return branchy()


def write(path, value: float):
    np.savez(path, x=x(value))
    return path


def folders(tmp_path, calibration: int):
    """Folders ``cal`` (samples 0.0, 1.0, ... ``calibration`` of them) and ``val`` (empty)."""
    cal, val = tmp_path / "cal", tmp_path / "val"
    cal.mkdir()
    val.mkdir()
    for i in range(calibration):
        write(cal / f"{i}.npz", float(i))
    return cal, val


def test_one_npz_file_is_one_sample(tmp_path, graph):
    samples = load_samples(str(write(tmp_path / "s.npz", 2.0)), graph, "--calibration")
    assert len(samples) == 1 and np.array_equal(samples[0]["x"], x(2.0))


def test_a_folder_is_read_in_file_name_order_other_files_ignored(tmp_path, graph):
    for name, value in (("b.npz", 2.0), ("a.npz", 1.0), ("c10.npz", 4.0), ("c09.npz", 3.0)):
        write(tmp_path / name, value)
    (tmp_path / "notes.txt").write_text("not a sample")
    (tmp_path / "dir.npz").mkdir()  # a folder, whatever its name
    samples = load_samples(str(tmp_path), graph, "--validation")
    assert [float(s["x"].flat[0]) for s in samples] == [1.0, 2.0, 3.0, 4.0]


def test_load_errors_are_one_line(tmp_path, graph):
    with pytest.raises(GspoError, match=r"^--calibration .*missing: no such file or folder$"):
        load_samples(str(tmp_path / "missing"), graph, "--calibration")
    (tmp_path / "empty").mkdir()
    with pytest.raises(GspoError, match=r"^--calibration .*empty: no \.npz file in the folder"):
        load_samples(str(tmp_path / "empty"), graph, "--calibration")
    bad = tmp_path / "bad"
    bad.mkdir()
    write(bad / "a.npz", 1.0)
    np.savez(bad / "b.npz", x=np.zeros((1, 4, 8, 8), np.float64))
    with pytest.raises(GspoError) as e:
        load_samples(str(bad), graph, "--validation")
    assert str(e.value).startswith(f"--validation {bad / 'b.npz'}: input 'x' is float64") and "\n" not in str(e.value)
    np.savez(bad / "b.npz", x=np.full(SHAPE, np.nan, np.float32))
    with pytest.raises(GspoError, match="hold no finite value"):
        load_samples(str(bad), graph, "--validation")


def test_samples_larger_than_memory_are_refused_before_they_are_read(tmp_path, graph, monkeypatch):
    for i in range(3):
        write(tmp_path / f"{i}.npz", float(i))
    one_sample = x(0).nbytes
    monkeypatch.setattr(inputs_module, "available_memory", lambda: 2 * one_sample)  # two fit, three do not
    with pytest.raises(GspoError, match="the 3 samples take .* more than the .* of memory available"):
        load_samples(str(tmp_path), graph, "--calibration")


def test_sample_digest():
    base = {"a": np.zeros((2, 2), np.float32), "b": np.arange(3)}
    digest = sample_digest(base)
    assert len(digest) == 64 and digest == sample_digest({"b": np.arange(3), "a": np.zeros((2, 2), np.float32)})
    assert digest != sample_digest({**base, "a": np.zeros((2, 2), np.int32)})       # same bytes, other dtype
    assert digest != sample_digest({**base, "a": np.zeros((4,), np.float32)})       # other shape
    assert digest != sample_digest({"c": base["a"], "b": base["b"]})                 # other name
    changed = base["a"].copy()
    changed[1, 1] = 1
    assert digest != sample_digest({**base, "a": changed})
    words = np.array(["ab", "c"], dtype=object)
    assert sample_digest({"t": words}) == sample_digest({"t": np.array(["ab", "c"], dtype=object)})
    assert sample_digest({"t": words}) != sample_digest({"t": np.array(["a", "bc"], dtype=object)})


def test_random_fallback_warns_and_keeps_the_sets_apart(graph):
    data = precision_data(graph, None, None, seed=3, count=4)
    assert isinstance(data, PrecisionData)
    assert len(data.calibration) == 4 and len(data.validation) == 4
    assert data.source == {"calibration": "random (seeds 3-6, 4 samples)",
                           "validation": "random (seeds 7-10, 4 samples)"}
    assert len(data.warnings) == 1
    warning = data.warnings[0]
    assert "random inputs say little about accuracy on real data" in warning
    assert "may be far from the error on your data" in warning and "--calibration and --validation" in warning
    assert not {sample_digest(s) for s in data.calibration} & {sample_digest(s) for s in data.validation}
    again = precision_data(graph, None, None, seed=3, count=4)  # the same seed draws the same data
    assert [sample_digest(s) for s in again.validation] == [sample_digest(s) for s in data.validation]


def test_user_data_is_used_as_given(tmp_path, graph):
    cal, val = folders(tmp_path, 3)
    write(val / "v.npz", 9.0)
    data = precision_data(graph, str(cal), str(val / "v.npz"))
    assert data.warnings == ()
    assert data.source == {"calibration": f"user: {cal} (3 samples)", "validation": f"user: {val / 'v.npz'} (1 sample)"}
    assert [float(s["x"].flat[0]) for s in data.calibration] == [0.0, 1.0, 2.0]
    only_cal = precision_data(graph, str(cal), None, count=2)
    assert len(only_cal.validation) == 2 and only_cal.source["validation"].startswith("random")
    assert len(only_cal.warnings) == 1 and "give --validation" in only_cal.warnings[0]
    assert "--calibration" not in only_cal.warnings[0]


def test_validation_data_must_not_be_the_calibration_data(tmp_path, graph):
    cal, val = folders(tmp_path, 2)
    with pytest.raises(GspoError, match="validation data must not be the calibration data: 2 of the 2"):
        precision_data(graph, str(cal), str(cal))
    write(val / "a.npz", 1.0)   # also a calibration sample
    write(val / "b.npz", 5.0)
    write(val / "c.npz", 6.0)
    with pytest.raises(GspoError, match="1 of the 3 validation samples are also calibration samples"):
        precision_data(graph, str(cal), str(val))


def flag_graph():
    """A graph whose only input is one bool: two possible samples."""
    b = GraphBuilder("flag")
    f = b.input("f", (1,), TensorProto.BOOL)
    return b.output(b.op("Not", [f])).build()


def test_random_draws_that_coincide_with_the_other_set_are_skipped(tmp_path):
    graph = flag_graph()
    np.savez(tmp_path / "t.npz", f=np.array([True]))
    data = precision_data(graph, str(tmp_path / "t.npz"), None, count=3)
    assert len(data.validation) == 3 and all(not s["f"][0] for s in data.validation)
    with pytest.raises(GspoError, match="every random validation sample coincides with the calibration data"):
        precision_data(graph, None, None, count=8)  # 8 draws of one bool hold both values


def test_bad_arguments(graph):
    with pytest.raises(GspoError, match="positive integer"):
        precision_data(graph, None, None, count=0)
    with pytest.raises(GspoError, match="non-negative integer"):
        precision_data(graph, None, None, seed=-1)
