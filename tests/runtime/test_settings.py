"""Saved run settings: parsed strictly, applied by the executor gspo run and gspo bench build,
readable from a bare session's metadata (the deploy API)."""

from __future__ import annotations

import types

import numpy as np
import pytest
from click.testing import CliRunner

from gspo.cli import cli
from gspo.errors import GspoError
from gspo.ir import load, save
from gspo.ir.metadata import with_metadata
from gspo.runtime import CpuExecutor, SessionConfig, make_executor, random_inputs
from gspo.runtime.session import make_session
from gspo.runtime.settings import (
    SETTINGS_KEY,
    RunSettings,
    saved_settings,
    settings_from_metadata,
    with_settings,
)
from gspo.streams import Placement
from tests.helpers import branchy

cpu = __import__("gspo.runtime.cpu", fromlist=["cpu"])


def test_settings_round_trip_and_bad_values_are_one_line_errors():
    assert RunSettings.from_json(RunSettings(3).to_json()) == RunSettings(3)
    assert RunSettings.from_json("{}") == RunSettings()
    for bad in ("not json", "[1]", '{"threads": -1}', '{"threads": "2"}', '{"threads": true}', '{"threads": 99999}'):
        with pytest.raises(GspoError, match="settings saved in the model"):
            RunSettings.from_json(bad)


def test_a_thread_count_given_wins_over_the_saved_one():
    assert RunSettings(1).session_config(SessionConfig()).intra_op_threads == 1
    assert RunSettings(1).session_config(SessionConfig(intra_op_threads=2)).intra_op_threads == 2
    assert RunSettings().session_config(SessionConfig()) == SessionConfig()


def test_the_executor_gspo_run_builds_applies_the_saved_thread_setting(tmp_path):
    path = save(with_settings(branchy(), RunSettings(1)), tmp_path / "m.onnx")
    g = load(path)
    assert saved_settings(g) == RunSettings(1)
    with make_executor(g) as ex:
        assert ex.config.intra_op_threads == 1
        assert ex._session.get_session_options().intra_op_num_threads == 1
    with make_executor(g, config=SessionConfig(intra_op_threads=2)) as ex:  # gspo bench --threads 2
        assert ex._session.get_session_options().intra_op_num_threads == 2
    with make_executor(branchy()) as ex:  # nothing saved: onnxruntime's default
        assert ex._session.get_session_options().intra_op_num_threads == 0


def test_a_bare_session_reads_the_settings_from_its_own_metadata(tmp_path):
    path = save(with_settings(branchy(), RunSettings(1)), tmp_path / "m.onnx")
    session = make_session(path.read_bytes())
    assert settings_from_metadata(session.get_modelmeta().custom_metadata_map) == RunSettings(1)
    assert settings_from_metadata({}) == RunSettings()


def test_openvino_is_compiled_with_the_saved_thread_count():
    pytest.importorskip("openvino")
    g = branchy()
    with CpuExecutor(g, None, RunSettings(1).session_config(), Placement.whole(g, "openvino")) as ex:
        assert int(ex._sessions[0]._compiled.get_property("INFERENCE_NUM_THREADS")) == 1


def test_one_session_takes_any_mapping_of_feeds_and_returns_the_same():
    g = branchy()
    feeds = random_inputs(g, 0)
    with CpuExecutor(g) as ex:
        want = ex.run(feeds)
        got = ex.run(types.MappingProxyType(feeds))
        assert tuple(got) == tuple(g.output_names())
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])


def _built(monkeypatch) -> list:
    sessions = []
    real = cpu.make_session

    def recording(*args, **kwargs):
        sessions.append(real(*args, **kwargs))
        return sessions[-1]

    monkeypatch.setattr(cpu, "make_session", recording)
    return sessions


@pytest.mark.parametrize("command, threads", [(("run",), 1), (("bench", "--runs", "1", "--warmup", "0"), 1),
                                              (("bench", "--runs", "1", "--warmup", "0", "--threads", "2"), 2)])
def test_gspo_run_and_bench_build_their_session_with_the_saved_setting(tmp_path, monkeypatch, command, threads):
    path = save(with_settings(branchy(), RunSettings(1)), tmp_path / "m.onnx")
    sessions = _built(monkeypatch)
    result = CliRunner().invoke(cli, [*command, str(path)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert [s.get_session_options().intra_op_num_threads for s in sessions] == [threads]


def test_a_corrupt_saved_setting_is_one_line_and_exit_2(tmp_path):
    path = save(with_metadata(branchy(), SETTINGS_KEY, '{"threads": -4}'), tmp_path / "m.onnx")
    result = CliRunner().invoke(cli, ["run", str(path)], catch_exceptions=False)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.strip().splitlines() == [
        "gspo: error: the settings saved in the model are invalid (threads must be 0 to 1024): '{\"threads\": -4}'"]


def test_openvino_outputs_are_the_callers_own_and_survive_the_next_run():
    """The runner hands back OpenVINO's output arrays without a second copy: they must not be
    buffers the next inference overwrites."""
    pytest.importorskip("openvino")
    g = branchy()
    with CpuExecutor(g, None, SessionConfig(), Placement.whole(g, "openvino")) as ex:
        first = ex.run({"x": np.ones((1, 4, 8, 8), np.float32)})
        kept = {k: v.copy() for k, v in first.items()}
        ex.run({"x": np.full((1, 4, 8, 8), -3.0, np.float32)})
        for name, value in kept.items():
            np.testing.assert_array_equal(first[name], value)
            assert first[name].flags.owndata
