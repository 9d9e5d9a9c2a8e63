"""An input that is a folder (``--calibration DIR``, ``--validation DIR``) puts every path inside
it off limits for an output (issue 51, item 1): refused before any work, also with --force."""

from __future__ import annotations

import re

import pytest

from gspo.outputs import OutputError, check_outputs


@pytest.fixture
def cal(tmp_path):
    """A calibration folder of two samples (their bytes stand in for .npz files)."""
    folder = tmp_path / "calX"
    folder.mkdir()
    for i in range(2):
        (folder / f"s{i:05d}.npz").write_bytes(b"sample %d" % i)
    return folder


def _inside_paths(tmp_path, cal):
    """Paths inside ``cal``: a sample, new files at any depth, through a link to the folder, a
    dangling link that leads in, and a path that leaves the folder and comes back."""
    (tmp_path / "to_cal").symlink_to(cal)
    (tmp_path / "sneaky.npz").symlink_to(cal / "s00009.npz")
    return [cal / "s00000.npz", cal / "new.npz", cal / "a" / "b" / "new.npz", tmp_path / "to_cal" / "new.npz",
            tmp_path / "sneaky.npz", cal / ".." / "calX" / "new.npz"]


@pytest.mark.parametrize("force", [False, True])
def test_every_path_inside_a_folder_given_by_an_option_is_refused(tmp_path, cal, force):
    for out in _inside_paths(tmp_path, cal):
        with pytest.raises(OutputError) as e:
            check_outputs({"-o": out}, {"MODEL": tmp_path / "m.onnx", "--calibration": cal}, force=force)
        assert str(e.value) == f"{out}: -o is inside --calibration's folder {cal}, which gspo reads; choose a path outside it"
    assert sorted(p.name for p in cal.iterdir()) == ["s00000.npz", "s00001.npz"]
    (tmp_path / "calX2").mkdir()  # beside the folder, a name that starts like its name
    (tmp_path / "elsewhere.npz").write_bytes(b"")
    (tmp_path / "out.npz").symlink_to("elsewhere.npz")  # a link that leads outside
    beside = [tmp_path / "calX2" / "o.onnx", cal / ".." / "o.onnx", tmp_path / "calX.onnx"]
    for out in beside + [tmp_path / "out.npz"] * force:
        check_outputs({"-o": out}, {"--calibration": cal}, force=force)


def test_every_folder_among_the_inputs_counts_and_a_bare_path_is_named_the_input_folder(tmp_path, cal):
    val = tmp_path / "valX"
    val.mkdir()
    inputs = {"--calibration": cal, "--validation": tmp_path / "to_val", "--inputs": None}
    (tmp_path / "to_val").symlink_to(val)  # the folder given through a link
    with pytest.raises(OutputError, match=re.escape("--report is inside --validation's folder")):
        check_outputs({"-o": tmp_path / "o.onnx", "--report": val / "s00001.npz"}, inputs, force=True)
    with pytest.raises(OutputError, match=re.escape(f"-o is inside the input folder {cal}, which gspo reads")):
        check_outputs({"-o": cal / "deep" / "o.onnx"}, [tmp_path / "m.onnx", cal], force=True)


def test_a_file_input_given_by_an_option_is_still_an_input_file(tmp_path):
    feeds = tmp_path / "feeds.npz"
    feeds.write_bytes(b"feeds")
    with pytest.raises(OutputError, match="-o is an input file"):
        check_outputs({"-o": feeds}, {"--inputs": feeds}, force=True)
