"""The gate at the edges (issue 42, cases 11, 12 and 14): models with external weights, errors
naming the user's paths, set paths that are folders or devices, option values the command line
refuses, and Ray's logs kept out of the one-line connection error."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gspo.errors import GspoError
from gspo.regress import load_modelset, run_gate
from gspo.regress.store import read_artifact
from tests.helpers import one_line_error, onnx_model
from tests.regress.util import FAST, SHAPE, gspo, relu_chain, write_set


def _external(tmp_path, name="m", location="w.bin"):
    """A model with a weight (``y = Relu(x) + c``, ``c`` per channel) kept in ``location`` beside it."""
    c = numpy_helper.from_array(np.full((1, SHAPE[1], 1, 1), 0.5, np.float32), "c")
    model = onnx_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "c"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)], [c])
    onnx.save_model(model, str(tmp_path / f"{name}.onnx"), save_as_external_data=True, location=location,
                    size_threshold=0, all_tensors_to_one_file=True)
    assert (tmp_path / location).exists()
    return tmp_path / f"{name}.onnx"


def _set(tmp_path, entries, options=None):
    p = tmp_path / "set.json"
    p.write_text(json.dumps({"version": 1, "options": {**FAST, **(options or {})},
                             "gate": {"rounds": 20, "threshold": 0.2}, "models": entries}))
    return p


# ------------------------------------------------------------------ case 11
def test_a_model_with_external_weights_is_recorded_and_judged(tmp_path):
    """The issue's case: regress copied the .onnx alone ("external data file 'w.bin' ... is missing")."""
    _external(tmp_path)
    ms = _set(tmp_path, [{"name": "m", "path": "m.onnx"}])
    r = gspo("regress", ms, "--record", tmp_path / "base")
    assert r.exit_code == 0, r.output
    assert read_artifact(tmp_path / "base", "m").model
    r = gspo("regress", ms, "--against", tmp_path / "base")
    assert r.exit_code == 0, r.output


def test_external_weights_in_a_subfolder_go_with_the_model_on_either_engine(tmp_path):
    from gspo.regress.engines import local_engine

    (tmp_path / "weights").mkdir()
    _external(tmp_path, location="weights/w.bin")
    ms = _set(tmp_path, [{"name": "m", "path": "m.onnx"}])
    for ship in (False, True):  # linked from the user's folder (local), or carried as bytes (a cluster)
        from gspo.regress import gate

        make = gate._job_factory(load_modelset(ms).models[0], None, True, False, True, ship=ship)
        [result] = local_engine([make], ["m"])
        assert result.verdict == "recorded", result.reason


def test_changed_external_weights_are_a_new_source_never_a_reused_result(tmp_path):
    path = _external(tmp_path)
    ms = _set(tmp_path, [{"name": "m", "path": "m.onnx"}])
    first = run_gate(ms, record=tmp_path / "base").results[0]
    weights = tmp_path / "w.bin"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x40  # the constant changed, the .onnx file not
    weights.write_bytes(bytes(data))
    assert path.exists()
    second = run_gate(ms, record=tmp_path / "again").results[0]
    assert first.source_sha256 != second.source_sha256 and first.key != second.key


def test_errors_name_the_users_paths_not_a_temporary_copy(tmp_path):
    _external(tmp_path)
    os.remove(tmp_path / "w.bin")
    ms = _set(tmp_path, [{"name": "m", "path": "m.onnx"}])
    result = run_gate(ms, record=tmp_path / "base").results[0]
    assert result.verdict == "ERROR"
    assert str(tmp_path / "m.onnx") in result.reason and "gspo-regress-" not in result.reason
    assert "'w.bin'" in result.reason and "missing" in result.reason


def test_a_models_own_error_names_its_file(tmp_path):
    (tmp_path / "bad.onnx").write_bytes(b"not onnx")
    ms = _set(tmp_path, [{"name": "bad", "path": "bad.onnx"}])
    result = run_gate(ms, record=tmp_path / "base").results[0]
    assert result.verdict == "ERROR" and "gspo-regress-" not in result.reason
    assert str(tmp_path / "bad.onnx") in result.reason


# ------------------------------------------------------------------ case 14: what a path is
def test_a_model_path_that_is_a_folder_or_a_device_says_so(tmp_path):
    (tmp_path / "folder.onnx").mkdir()
    for path, says in ((str(tmp_path / "folder.onnx"), "is a folder, not a file"),
                       (os.devnull, "is not a regular file (a device, FIFO or socket)"),
                       (str(tmp_path / "none.onnx"), "no such file")):
        ms = _set(tmp_path, [{"name": "m", "path": path}])
        error = one_line_error(gspo("regress", ms, "--record", tmp_path / "base"))
        assert f"model 'm': {path}: {says}" in error, error


def test_a_model_set_that_is_a_folder_or_a_device_says_so(tmp_path):
    """``gspo regress /dev/zero`` read forever (killed at 37 s); a folder was 'Is a directory'."""
    with pytest.raises(GspoError, match="is not a regular file"):
        load_modelset(os.devnull)
    with pytest.raises(GspoError, match="is a folder, not a model set file"):
        load_modelset(tmp_path)
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(65 * 2**20)
    with pytest.raises(GspoError, match="too large for a model set"):
        load_modelset(big)


# ------------------------------------------------------------------ case 12: values
@pytest.mark.parametrize("options, says", [
    ({"seed": -1}, "seed must be an integer in [0, 4294967295]"),
    ({"seed": 2**40}, "seed must be an integer in [0, 4294967295]"),
    ({"time_budget": 1e308}, "time_budget must be a number <= 604800 (got 1e+308)"),
])
def test_model_set_values_are_held_to_the_command_lines_bounds(tmp_path, options, says):
    ms = write_set(tmp_path, {"a": relu_chain()}, options=options)
    with pytest.raises(GspoError) as e:
        load_modelset(ms)
    assert says in str(e.value)


def test_a_zoo_models_seed_is_held_to_the_same_bounds(tmp_path):
    ms = _set(tmp_path, [{"name": "z", "zoo": "nasrnn", "seed": -1}])
    with pytest.raises(GspoError, match=r"seed must be an integer in \[0, 4294967295\]"):
        load_modelset(ms)


# ------------------------------------------------------------------ case 14: Ray's logs
def test_rays_logs_are_kept_out_of_the_one_line_connection_error(capfd):
    """Ray's C++ core wrote 20 lines on stderr before the one-line error."""
    from gspo.regress import engines

    class FakeRay:
        @staticmethod
        def is_initialized():
            return False

        @staticmethod
        def init(**kwargs):
            for _ in range(20):
                os.write(2, b"[2026-01-01 W 1 1] rpc_client.h:153: Failed to connect to GCS\n")
            raise ConnectionError("Failed to connect to Ray cluster at 192.0.2.2:6399")

    with pytest.raises(GspoError) as e:
        engines._connect(FakeRay, "192.0.2.2:6399")
    assert str(e.value) == ("cannot connect to the Ray cluster at 192.0.2.2:6399: "
                            "Failed to connect to Ray cluster at 192.0.2.2:6399")
    assert "rpc_client" not in capfd.readouterr().err


# ------------------------------------------------------------------ case 12: names too long
@pytest.mark.parametrize("option", ["--record", "--against", "--baseline"])
def test_a_folder_or_file_name_too_long_for_the_file_system_is_one_line(tmp_path, option):
    """OSError 36 (a name past 255 bytes, a path past 4095) was an internal error."""
    ms = write_set(tmp_path, {"a": relu_chain()})
    for name in ("a" * 256, "/".join(["d" * 100] * 50)):
        args = ["--estimate", "--baseline", name + ".json"] if option == "--baseline" else [option, name]
        error = one_line_error(gspo("regress", ms, *args))
        assert "too long" in error and "internal error" not in error
