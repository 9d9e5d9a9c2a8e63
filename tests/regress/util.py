"""Small model files and model sets for the gate's tests (built in code)."""

from __future__ import annotations

import json

import onnx
from click.testing import CliRunner
from onnx import TensorProto, helper

from gspo.cli import cli
from tests.helpers import onnx_model

#: Small enough to run on one thread in microseconds: its timing stays steady on a busy machine.
SHAPE = [1, 8, 32, 32]
#: Optimize settings that keep the tests fast and the candidate the model as given.
FAST = {"budget": 0, "jobs": 1, "use_rules": False, "use_streams": False, "time_budget": 20, "backends": ["ort"]}


def gspo(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def relu_chain(extra: int = 0, shift: float = 0.0) -> onnx.ModelProto:
    """``y = Relu(x)`` after ``extra`` exact no-ops ``t = Max(t, t)`` (each one more pass over
    the tensor: an equivalent model ``extra`` steps slower); ``shift`` adds a constant to ``y``
    (a model that computes something else)."""
    nodes, last = [], "x"
    for i in range(extra):
        nodes.append(helper.make_node("Max", [last, last], [f"t{i}"]))
        last = f"t{i}"
    nodes.append(helper.make_node("Relu", [last], ["r"] if shift else ["y"]))
    inits = []
    if shift:
        inits.append(helper.make_tensor("c", TensorProto.FLOAT, [], [shift]))
        nodes.append(helper.make_node("Add", ["r", "c"], ["y"]))
    return onnx_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)], inits)


def write_set(tmp_path, models: dict, options=None, gate=None, name="set.json"):
    """A model set over ``models`` (name -> ModelProto, written beside it) with :data:`FAST` options
    and a 20% threshold (noise limit 60%): these tests check the plumbing on a machine that may be
    busy; the statistics are tested on scripted timings (test_stats.py)."""
    entries = []
    for model_name, proto in models.items():
        onnx.save(proto, tmp_path / f"{model_name}.onnx")
        entries.append({"name": model_name, "path": f"{model_name}.onnx"})
    data = {"version": 1, "options": {**FAST, **(options or {})}, "gate": {"rounds": 20, "threshold": 0.2, **(gate or {})},
            "models": entries}
    p = tmp_path / name
    p.write_text(json.dumps(data))
    return p
