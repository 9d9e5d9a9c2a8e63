"""Placement timing holds no more outputs than it needs: the reference's outputs are let go
before the backends are timed, and the reference is not checked against itself."""

from __future__ import annotations

import gc
import weakref

from gspo.ir.builder import GraphBuilder
from gspo.runtime import random_inputs
from gspo.runtime.backends import available_backends
from gspo.search import placement as pl


def _model():
    b = GraphBuilder(seed=1)
    x = b.input("x", (1, 4, 16, 16))
    y = b.op("Relu", [b.op("Conv", [x, b.weight("w", (4, 4, 3, 3))], kernel_shape=[3, 3], pads=[1] * 4)])
    return b.output(y).build()


class _Counted:
    """An onnxruntime session that counts its runs."""

    def __init__(self, session):
        self._session, self.runs = session, 0

    def run(self, *args, **kwargs):
        self.runs += 1
        return self._session.run(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._session, name)


def test_reference_outputs_are_let_go_before_timing_and_not_checked_against_themselves(monkeypatch):
    g = _model()
    feeds = [random_inputs(g, 0), random_inputs(g, 1)]
    sessions, outputs, alive_when_timed = [], [], []
    make, run, interleaved = pl.make_session, pl.run, pl.interleaved

    def counted_session(*args, **kwargs):
        sessions.append(_Counted(make(*args, **kwargs)))
        return sessions[-1]

    def watched_run(session, f):
        values = run(session, f)
        outputs.extend(weakref.ref(v) for v in values.values())
        return values

    def timing(*args, **kwargs):
        gc.collect()
        alive_when_timed.append(sum(r() is not None for r in outputs))
        return interleaved(*args, **kwargs)

    monkeypatch.setattr(pl, "make_session", counted_session)
    monkeypatch.setattr(pl, "run", watched_run)
    monkeypatch.setattr(pl, "interleaved", timing)
    backends = tuple(available_backends())
    times = pl.time_pieces([g], [feeds], backends, runs=3)
    assert set(times[0].seconds) == set(backends) and not times[0].refused
    assert len(outputs) == 2 and alive_when_timed == [0]
    assert sessions[0].runs == 2 + 2 + 3  # the reference on each set, warm-up, timed runs: no self-check
