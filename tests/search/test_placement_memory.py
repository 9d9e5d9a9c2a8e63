"""Placement timing holds no more outputs than it needs: the reference's outputs are let go
before the backends are timed, and the reference is not checked against itself."""

from __future__ import annotations

import gc
import weakref

import numpy as np

from gspo.ir.builder import GraphBuilder
from gspo.runtime import interleaved, random_inputs
from gspo.runtime.backends import available_backends
from gspo.search import placement as pl


def _model():
    b = GraphBuilder(seed=1)
    x = b.input("x", (1, 4, 16, 16))
    y = b.op("Relu", [b.op("Conv", [x, b.weight("w", (4, 4, 3, 3))], kernel_shape=[3, 3], pads=[1] * 4)])
    return b.output(y).build()


def test_reference_outputs_are_let_go_before_timing_and_not_checked_against_themselves(monkeypatch):
    """Every onnxruntime run is counted and its outputs watched (the reference is the only
    onnxruntime session); the timing function sees how many are still alive when it starts."""
    import onnxruntime as ort

    g = _model()
    feeds = [random_inputs(g, 0), random_inputs(g, 1)]
    outputs, alive_when_timed, runs = [], [], []
    real_run = ort.InferenceSession.run

    def watched_run(self, *args, **kwargs):
        values = real_run(self, *args, **kwargs)
        runs.append(self)
        outputs.extend(weakref.ref(v) for v in values if isinstance(v, np.ndarray))
        return values

    def timing(calls, runs_, warmup):
        gc.collect()
        alive_when_timed.append(sum(r() is not None for r in outputs))
        return interleaved(calls, runs_, warmup)

    monkeypatch.setattr(ort.InferenceSession, "run", watched_run)
    backends = tuple(available_backends())
    times = pl.time_pieces([g], [feeds], backends, runs=3, measure=timing)
    assert set(times[0].seconds) == set(backends) and not times[0].refused
    assert alive_when_timed == [0] and len(set(map(id, runs))) == 1
    assert len(runs) == 2 + 2 + 3  # the reference on each set, warm-up, timed runs: no self-check
