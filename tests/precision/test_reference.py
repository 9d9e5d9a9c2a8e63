"""The source's outputs on the precision data: one session, the runs held to the time budget,
and the samples whose NaN or infinity makes the outputs non-finite left out, named."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import gspo.precision.reference as reference_module
from gspo.errors import GspoError
from gspo.precision.reference import reference_outputs, session_estimate, weight_bytes
from gspo.precision.samples import PrecisionData
from gspo.timing.deadline import Deadline
from tests.helpers import branchy
from tests.search.fakes import FakeClock


def samples(n, start=0.0):
    return tuple({"x": np.full((1, 4, 8, 8), start + i, np.float32)} for i in range(n))


def data(cal, val):
    return PrecisionData(cal, val, {}, (), {"calibration": tuple(f"c{i}.npz" for i in range(len(cal))),
                                            "validation": tuple(f"v{i}.npz" for i in range(len(val)))})


def test_a_sample_whose_nan_makes_the_outputs_nan_is_left_out_and_named():
    val = list(samples(3, 10.0))
    val[1] = {"x": val[1]["x"].copy()}
    val[1]["x"][0, 0, 0, :3] = np.nan
    notes = []
    ref = reference_outputs(branchy(), data(samples(2), tuple(val)), None, notes)
    assert len(ref.data.validation) == 2 and ref.data.names["validation"] == ("v0.npz", "v2.npz")
    assert len(ref.outputs["validation"]) == 2 and len(ref.outputs["calibration"]) == 2
    assert notes == ["validation sample v1.npz has NaN in 3 of 256 values of input 'x', and the model's output "
                     f"{branchy().outputs[0].name!r} is not finite on it: the sample is not used (the error of reduced "
                     "precision cannot be measured where the data makes NaN or infinity); fix or remove it"]
    every = tuple({"x": np.full((1, 4, 8, 8), np.inf, np.float32)} for _ in range(2))
    with pytest.raises(GspoError, match="^every calibration sample has NaN or infinity in its inputs"):
        reference_outputs(branchy(), data(every, samples(1)), None, [])


class _Slow:
    """An executor whose every run takes a second of the fake clock."""

    def __init__(self, clock, name):
        self.clock, self.name = clock, name

    def run(self, feeds):
        self.clock.advance(1.0)
        return {self.name: feeds["x"] * 2}


def test_the_runs_end_at_their_share_of_the_time_each_set_in_its_half(monkeypatch):
    from gspo.ir.builder import GraphBuilder

    b = GraphBuilder("double")
    graph = b.output(b.op("Relu", [b.input("x", (1, 4, 8, 8))])).build()
    clock = FakeClock(now=0.0)

    @contextlib.contextmanager
    def slow_executor(graph, streams, device):
        clock.advance(2.0)  # building the session: 2 s, before the share is taken
        yield _Slow(clock, graph.outputs[0].name)

    monkeypatch.setattr(reference_module, "make_executor", slow_executor)
    notes = []
    ref = reference_outputs(graph, data(samples(10), samples(10, 20.0)), Deadline.after(22.0, clock), notes, 0.5)
    # 20 s left once built, half of it for the runs: 5 s for each set, a second a run
    assert len(ref.data.calibration) == 5 and len(ref.data.validation) == 5 and clock.now == 12.0
    assert ref.session_s == 2.0 and ref.sample_s == 1.0
    assert notes == ["used the first 5 of 10 calibration samples: the time budget holds no more runs of the source "
                     "model (about 1000.0 ms each)",
                     "used the first 5 of 10 validation samples: the time budget holds no more runs of the source "
                     "model (about 1000.0 ms each)"]
    assert ref.judgment_s(3.0, 2) == 3.0 + 2 * 2.0 + 5 * 1.0
    from gspo.precision.stage import _cut_set  # the report's skip names the set the budget cut
    assert [_cut_set(n) for n in notes] == ["calibration", "validation"]
    assert _cut_set("validation sample v1.npz has NaN in 3 of 256 values") is None


def test_the_estimates_follow_the_weights():
    graph = branchy(channels=4)
    assert weight_bytes(graph) == 4 * (4 * 4 * 1 * 1 + 4 * 4 * 3 * 3)
    assert session_estimate(graph) == reference_module.SESSION_S_PER_BYTE * weight_bytes(graph)
