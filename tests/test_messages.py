"""What the user gave, echoed in a one-line error, is cut to a bounded length (issue 51, item
10): a tampered schedule naming an op of 10,000,000 characters made an error "line" of 10 MB, a
5,000-character ``$GSPO_CUDA_RUNTIME`` was echoed in full."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from gspo import ir
from gspo.cli import cli
from gspo.errors import GspoError
from gspo.ir.onnx_io import SCHEDULE_KEY
from gspo.runtime.cuda import choice
from gspo.streams import Schedule, assign_streams
from gspo.streams.schedule import ScheduleError, check_schedule
from tests.helpers import branchy, one_line_error
from tests.runtime.test_deploy_tampered import _tampered

LONG = "a" * 10_000_000


def test_a_schedule_naming_an_op_of_ten_million_characters_is_a_short_line(tmp_path):
    g = branchy()
    path = str(ir.save(g, tmp_path / "m.onnx", schedule=assign_streams(g, max_streams=2).to_json()))
    path = _tampered(path, SCHEDULE_KEY, lambda d: {**d, "streams": [[LONG, *d["streams"][0][1:]], *d["streams"][1:]]})
    line = one_line_error(CliRunner().invoke(cli, ["run", path], catch_exceptions=False))
    assert "the schedule names 'aaaa" in line and "... (10000000 characters), which is not an op" in line
    assert len(line) < 300, len(line)


@pytest.mark.parametrize("where", ["stream", "event"])
def test_every_op_a_schedule_names_is_shown_cut(where):
    g = branchy()
    schedule = assign_streams(g, max_streams=2)
    first = schedule.streams[0][0]
    name = first + "\n" + LONG  # an unknown op, with a line break
    if where == "stream":
        schedule = Schedule(((*schedule.streams[0], name), *schedule.streams[1:]), schedule.events)
    else:
        schedule = Schedule(schedule.streams, ((name, first),))
    with pytest.raises(ScheduleError) as e:
        check_schedule(g, schedule)
    assert f"'{first}\\naaaa" in str(e.value) and f"... ({len(name)} characters)" in str(e.value)
    assert len(str(e.value)) < 300 and "\n" not in str(e.value)


def test_a_schedule_version_of_ten_million_characters_is_shown_cut():
    with pytest.raises(ScheduleError, match=r"schedule version 'a+'\.\.\. \(10000000 characters\) is not 1$"):
        Schedule.from_json({"version": LONG, "streams": []})


def test_a_long_gspo_cuda_runtime_is_shown_cut(monkeypatch):
    monkeypatch.setenv("GSPO_CUDA_RUNTIME", "x" * 5000)
    with pytest.raises(GspoError) as e:
        choice.requested_runtime()
    message = str(e.value)
    assert message.startswith("GSPO_CUDA_RUNTIME takes auto, ort, torch (got 'xxxx")
    assert message.endswith("... (5000 characters))") and len(message) < 200


def test_a_short_gspo_cuda_runtime_is_shown_as_given(monkeypatch):
    monkeypatch.setenv("GSPO_CUDA_RUNTIME", "TensorRT")
    with pytest.raises(GspoError, match=r"^GSPO_CUDA_RUNTIME takes auto, ort, torch \(got 'TensorRT'\)$"):
        choice.requested_runtime()



@pytest.mark.parametrize("case", ["not an op", "unknown backend", "placed twice"])
def test_a_placement_naming_something_of_ten_million_characters_is_a_short_line(case):
    from onnx import helper

    from gspo.ir.onnx_io import from_model
    from gspo.streams import Placement, PlacementError
    from gspo.streams.schedule import node_id
    from tests.helpers import onnx_model, relu_model

    g = from_model(relu_model())
    if case == "placed twice":  # an op of the model whose own name is long
        m = relu_model()
        nodes = [helper.make_node("Relu", ["x"], [LONG]), helper.make_node("Identity", [LONG], ["y"])]
        g = from_model(onnx_model(nodes, list(m.graph.input), list(m.graph.output)))
    ops = [node_id(n) for n in g.nodes]
    backends = {"not an op": {"onnxruntime": [LONG, *ops[1:]]}, "unknown backend": {LONG: ops},
                "placed twice": {"onnxruntime": [ops[0], *ops]}}[case]
    with pytest.raises(PlacementError) as e:
        Placement.from_json({"version": 1, "backends": backends}).check(g, ("onnxruntime", "openvino"))
    assert len(str(e.value)) < 300, len(str(e.value))
    assert "(10000000 characters)" in str(e.value)
