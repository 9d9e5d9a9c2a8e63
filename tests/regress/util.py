"""Small model files and model sets for the gate's tests (built in code), and the virtual clock
their versions are timed on."""

from __future__ import annotations

import json
from contextlib import contextmanager

import onnx
import pytest
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
    and a 20% threshold (noise limit 60%): these tests check the plumbing, timed on the virtual
    clock (:func:`virtual_timing`); the statistics are tested on scripted timings (test_stats.py)."""
    entries = []
    for model_name, proto in models.items():
        onnx.save(proto, tmp_path / f"{model_name}.onnx")
        entries.append({"name": model_name, "path": f"{model_name}.onnx"})
    data = {"version": 1, "options": {**FAST, **(options or {})}, "gate": {"rounds": 20, "threshold": 0.2, **(gate or {})},
            "models": entries}
    p = tmp_path / name
    p.write_text(json.dumps(data))
    return p


#: Seconds one run of a version takes on the virtual clock, per node of its graph.
NODE_S = 1e-3


class _SelfTimed:
    """An executor that times itself, as a device's does (see :func:`gspo.runtime.timed_runner`):
    each timed run computes for real and reports ``seconds``, whatever the machine's clock says."""

    def __init__(self, executor, seconds: float):
        self._executor, self.seconds = executor, seconds

    def run(self, feeds):
        return self._executor.run(feeds)

    def timed_runner(self, feeds):
        from gspo.runtime.bench import DeviceTime

        def once():
            self._executor.run(feeds)
            return DeviceTime(self.seconds)
        return once

    def close(self) -> None:
        self._executor.close()


@contextmanager
def virtual_timing():
    """The gate's versions timed on a virtual clock: a run of a graph takes :data:`NODE_S` per
    node (``relu_chain(40)`` 41 times ``relu_chain()``), so the verdicts these tests check do not
    depend on how busy the machine is. The outputs are still computed and compared; the
    statistics are tested on scripted rounds (test_stats.py), the timing harness on its own
    (test_gate.py)."""
    from gspo.regress import timing

    real = timing.make_executor

    def self_timed(graph, *args, **kwargs):
        return _SelfTimed(real(graph, *args, **kwargs), NODE_S * len(graph.nodes))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(timing, "make_executor", self_timed)
        yield


def run_job_timed(job):
    """:func:`gspo.regress.job.run_job` on the virtual clock (what a Ray worker runs in these tests)."""
    from gspo.regress.job import run_job

    with virtual_timing():
        return run_job(job)
