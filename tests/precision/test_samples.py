"""Calibration and validation data: loading .npz files and folders, digests, the random
fallback and its warning, and the refusal of validation data that is calibration data."""

from __future__ import annotations

import os

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


def test_a_folder_is_read_only_as_far_as_the_limits_allow_with_a_note(tmp_path, graph):
    from gspo.precision.samples import SampleLimits

    for i in range(6):
        write(tmp_path / f"s{i}.npz", float(i))
    (tmp_path / "s5.npz").write_bytes(b"never read: past the limit")
    notes = []
    samples = load_samples(str(tmp_path), graph, "--calibration", SampleLimits(count=3), notes)
    assert [float(s["x"].flat[0]) for s in samples] == [0.0, 1.0, 2.0]  # the first by file name
    assert notes == [f"--calibration {tmp_path}: used the first 3 samples of 6 (by file name): at most 3 samples "
                     "are used"]
    one = x(0).nbytes
    notes.clear()
    samples = load_samples(str(tmp_path), graph, "--validation", SampleLimits(count=None, nbytes=2 * one + 1), notes)
    assert len(samples) == 2 and "at most" in notes[0] and "are held at once" in notes[0]
    tiny = load_samples(str(tmp_path), graph, "--validation", SampleLimits(count=None, nbytes=1), [])
    assert len(tiny) == 1  # the first sample is always read


def test_reading_stops_at_the_deadline(tmp_path, graph, monkeypatch):
    import gspo.precision.samples as samples_module
    from gspo.precision.samples import SampleLimits
    from gspo.timing.deadline import Deadline
    from tests.search.fakes import FakeClock

    for i in range(5):
        write(tmp_path / f"s{i}.npz", float(i))
    clock = FakeClock(now=0.0)
    real = inputs_module.check_inputs

    def slow(*args, **kwargs):  # each sample takes a second of the fake clock to read
        clock.advance(1.0)
        return real(*args, **kwargs)

    monkeypatch.setattr(samples_module, "check_inputs", slow)
    notes = []
    samples = load_samples(str(tmp_path), graph, "--calibration", SampleLimits(deadline=Deadline.after(2.5, clock)),
                           notes)
    assert len(samples) == 2 and clock.now == 2.0  # a third read at a second each would end past 2.5 s
    assert notes[0].endswith("used the first 2 samples of 5 (by file name): the time budget held no more reading")


def test_precision_data_reads_at_most_max_samples_and_says_so(tmp_path, graph, monkeypatch):
    import gspo.precision.samples as samples_module
    from gspo.precision.samples import SampleLimits

    monkeypatch.setattr(samples_module, "MAX_SAMPLES", 2)
    cal, val = folders(tmp_path, 4)
    for i in range(3):
        write(val / f"{i}.npz", 10.0 + i)
    data = precision_data(graph, str(cal), str(val), limits=SampleLimits(count=samples_module.MAX_SAMPLES))
    assert len(data.calibration) == 2 and len(data.validation) == 2
    assert data.names == {"calibration": (str(cal / "0.npz"), str(cal / "1.npz")),
                          "validation": (str(val / "0.npz"), str(val / "1.npz"))}
    assert any("--calibration" in w and "used the first 2 samples of 4" in w for w in data.warnings)
    assert any("--validation" in w and "used the first 2 samples of 3" in w for w in data.warnings)


@pytest.mark.parametrize("make, what", [
    (lambda p: os.mkfifo(p), "is a FIFO"),
    (lambda p: os.symlink("/dev/null", p), "is a link to a device"),
])
def test_a_fifo_or_device_in_a_folder_is_refused_by_name_never_opened(tmp_path, graph, make, what):
    write(tmp_path / "a.npz", 1.0)
    make(str(tmp_path / "b.npz"))
    with pytest.raises(GspoError) as e:
        load_samples(str(tmp_path), graph, "--validation")
    assert str(e.value).startswith(f"--validation {tmp_path}: b.npz {what}, not a sample") and "\n" not in str(e.value)


def test_a_model_whose_inputs_hold_no_values_has_one_sample_for_both_sets(tmp_path):
    from gspo.precision.samples import NO_VALUES

    b = GraphBuilder("empty")
    e = b.input("e", (0, 4))
    graph = b.output(b.op("Relu", [e])).build()
    data = precision_data(graph, None, None)
    assert len(data.calibration) == len(data.validation) == 1 and data.warnings[0] == NO_VALUES
    np.savez(tmp_path / "z.npz", e=np.zeros((0, 4), np.float32))
    given = precision_data(graph, str(tmp_path / "z.npz"), str(tmp_path / "z.npz"))
    assert given.source["validation"].startswith("user") and given.warnings == (NO_VALUES,)


def test_random_samples_are_fewer_where_they_would_take_more_than_the_byte_limit(graph):
    from gspo.precision.samples import SampleLimits

    data = precision_data(graph, None, None, count=8, limits=SampleLimits(nbytes=3 * x(0).nbytes))
    assert len(data.calibration) == len(data.validation) == 3
    assert data.source["calibration"] == "random (seeds 0-2, 3 samples)"
