"""The thread setting in the final choice: which options get one, the winner's saved and reported."""

from __future__ import annotations

import json
import sys

import pytest

from gspo.ir import load
from gspo.ir.builder import GraphBuilder
from gspo.ir.metadata import metadata_value, with_metadata
from gspo.runtime import CpuExecutor, random_inputs
from gspo.runtime.settings import SETTINGS_KEY, RunSettings, saved_settings, with_settings
from gspo.search import optimize
from gspo.search.candidate import Candidate
from gspo.search.strategies import Strategies
from gspo.search.threads import (
    option_backend,
    session_bytes,
    settings_report,
    settled,
    thread_options,
)
from gspo.streams import Placement, Schedule, node_id
from gspo.timing import Deadline
from gspo.zoo import build
from tests.helpers import branchy
from tests.search.fakes import ScriptedTimings

FAST = dict(budget=4, timing_runs=5, backends=("ort",), jobs=1, use_streams=False)


def test_each_whole_model_option_on_one_backend_gets_each_thread_count_as_a_field():
    g = branchy()
    two = Schedule(tuple((node_id(n),) for n in g.nodes[:2]) + (tuple(node_id(n) for n in g.nodes[2:]),), ())
    half = Placement.of({node_id(g.nodes[0]): "openvino"})
    options = [Candidate(g, label="original"), Candidate(g, placement=Placement.whole(g, "openvino"), label="original@openvino"),
               Candidate(g, two, label="optimized+streams"), Candidate(g, placement=half, label="optimized@mixed")]
    added = thread_options(options, cores=4)
    assert [(o.label, o.settings) for o in added] == [
        ("original[threads=1]", RunSettings(1)), ("original[threads=4]", RunSettings(4)),
        ("original@openvino[threads=1]", RunSettings(1)), ("original@openvino[threads=4]", RunSettings(4))]
    assert all(a.graph is g and a.schedule is None for a in added)
    assert [option_backend(o) for o in options] == ["ort", "openvino", None, None]
    assert [o.label for o in thread_options(options, cores=1)] == ["original[threads=1]", "original@openvino[threads=1]"]
    assert thread_options(options, deadline=Deadline(0.0, clock=lambda: 1.0)) == []  # the time budget spent: none


def test_a_model_whose_tensors_exceed_the_bound_gets_no_thread_variants():
    """Each variant is one more session holding the weights and a buffer per value it computes."""
    g = branchy()
    activations = 5 * (1 * 4 * 8 * 8)  # x, both Convs, Add, Relu
    assert session_bytes(g) == 4 * (activations + 4 * 4 * 1 * 1 + 4 * 4 * 3 * 3)
    assert thread_options([Candidate(g, label="original")], cores=2, max_bytes=session_bytes(g) - 1) == []
    assert len(thread_options([Candidate(g, label="original")], cores=2, max_bytes=session_bytes(g))) == 2


def test_large_values_without_weights_count_against_the_bound():
    """One Relu over [10000, 10000] float32: no weights, 800 MB of input and output."""
    b = GraphBuilder("relu", seed=0)
    big = b.output(b.op("Relu", [b.input("x", (10000, 10000))])).build()
    assert session_bytes(big) == 2 * 4 * 10000 * 10000
    assert thread_options([Candidate(big, label="original")], cores=2) == []


def test_a_trial_builds_each_option_with_its_thread_setting():
    g = branchy()
    built = []

    class Recording(CpuExecutor):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            built.append(self)

    trial_mod = sys.modules["gspo.search.trial"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(trial_mod, "CpuExecutor", Recording)
        with trial_mod.Trial(g, [Candidate(g, label="original"), Candidate(g, settings=RunSettings(1), label="original[threads=1]")],
                             [random_inputs(g, 0)]) as trial:
            assert [o.label for o in trial.equivalent] == ["original", "original[threads=1]"]
    # the reference serves the default option; the threaded one got its own session at 1 thread
    assert len(built) == 2
    assert built[1].config.intra_op_threads == 1
    assert built[1]._session.get_session_options().intra_op_num_threads == 1
    assert built[0]._session.get_session_options().intra_op_num_threads == 0


def _one_thread_wins() -> Strategies:
    """Timings in which 'original[threads=1]' runs twice as fast as the original in every round."""
    return Strategies(measure=ScriptedTimings({"original": (1.0,) * 30, "original[threads=1]": (0.5,) * 30}))


def test_a_winning_thread_setting_is_saved_in_the_model_and_reported(tmp_path):
    """The input handed back with onnxruntime on one thread: the file written is no longer the
    bytes read (it carries the setting), and the report says how to run it without gspo."""
    from gspo.ir import save

    src = save(build("squeezenet", "tiny"), tmp_path / "in.onnx")
    r = optimize(src, use_rules=False, **FAST, strategies=_one_thread_wins())
    labels = [c["label"] for c in r.report["final_candidates"]]
    assert "original[threads=1]" in labels and "original" in labels
    assert r.report["chosen"] == "original[threads=1]"
    assert r.report["settings"] == {"threads": 1, "backend": "ort", "saved": True,
                                    "advice": "run it with onnxruntime: intra_op_num_threads=1"}
    out = r.save(tmp_path / "out.onnx")
    assert out.read_bytes() != src.read_bytes()
    assert json.loads(metadata_value(load(out), SETTINGS_KEY)) == {"threads": 1}
    assert saved_settings(load(out)) == RunSettings(1)


def test_without_a_win_nothing_is_saved(tmp_path):
    """Every thread setting twice as slow as the original's default."""
    from gspo.ir import save

    src = save(build("squeezenet", "tiny"), tmp_path / "in.onnx")
    timings = ScriptedTimings({"original": (1.0,) * 30, "original[threads=1]": (2.0,) * 30})
    r = optimize(src, use_rules=False, **FAST, strategies=Strategies(measure=timings))
    assert "original[threads=1]" in timings.whole[0]
    assert r.report["chosen"] == "original"
    assert r.report["settings"]["saved"] is False and r.report["settings"]["advice"] is None
    assert metadata_value(r.graph, SETTINGS_KEY) is None


def test_settled_keeps_the_source_bytes_only_while_the_saved_setting_is_the_files():
    g = branchy()
    stale = with_settings(g, RunSettings(2))
    assert settled(g, g, RunSettings(), b"src") == (g, b"src")
    graph, source = settled(g, g, RunSettings(1), b"src")
    assert saved_settings(graph) == RunSettings(1) and source is None
    graph, source = settled(stale, stale, RunSettings(), b"src")  # a default win drops a stale setting
    assert metadata_value(graph, SETTINGS_KEY) is None and source is None
    graph, source = settled(stale, stale, RunSettings(2), b"src")
    assert source == b"src"
    assert with_metadata(g, SETTINGS_KEY, None) is g


def test_the_report_names_openvinos_setting_for_a_whole_model_on_openvino():
    g = branchy()
    option = Candidate(g, placement=Placement.whole(g, "openvino"), settings=RunSettings(1), label="original@openvino[threads=1]")
    assert settings_report(option).advice == "run it with OpenVINO: PERFORMANCE_HINT=LATENCY, INFERENCE_NUM_THREADS=1"
    assert settings_report(Candidate(g, label="original")).advice is None


def test_gspo_optimize_prints_the_setting_and_gspo_run_applies_it(monkeypatch, tmp_path, capsys):
    """End to end: the winning setting printed as optimize prints it, saved in the file, and the
    session gspo run then builds has one intra-op thread."""
    from click.testing import CliRunner

    from gspo.cli import cli
    from gspo.cli.optimize import _echo_outcome
    from gspo.ir import save

    src, out = save(build("squeezenet", "tiny"), tmp_path / "in.onnx"), tmp_path / "out.onnx"
    r = optimize(src, use_rules=False, **FAST, strategies=_one_thread_wins())
    r.save(out)
    _echo_outcome(r.report, pinned=False)
    assert "settings: run it with onnxruntime: intra_op_num_threads=1 (saved in the model" in capsys.readouterr().out
    cpu = sys.modules["gspo.runtime.cpu"]
    sessions, real = [], cpu.make_session
    monkeypatch.setattr(cpu, "make_session", lambda *a, **k: sessions.append(real(*a, **k)) or sessions[-1])
    result = CliRunner().invoke(cli, ["run", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert [s.get_session_options().intra_op_num_threads for s in sessions] == [1]
