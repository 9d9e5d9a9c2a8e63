"""The OpenVINO backend: ops kept at f32 in a model compiled at bf16."""

from __future__ import annotations

import numpy as np
import pytest

from gspo import ir
from gspo.runtime import CpuExecutor, make_session, run
from gspo.streams import Placement
from tests.runtime.test_plan import _two_matmuls


def _bf16_here():
    from gspo.runtime.backends import backend_status

    ok, why = backend_status("openvino:bf16")
    if not ok:
        pytest.skip(f"bf16 on OpenVINO cannot run here: {why}")


def _nmse(got, want):
    return float(np.sum((got - want) ** 2) / np.sum(want ** 2))


def test_an_op_kept_f32_computes_at_f32_in_the_same_model_as_ops_at_bf16():
    """y1's MatMul kept at f32, y2's at bf16, compiled as one model: y1 as exact as f32 is,
    y2 with bf16's rounding; with nothing kept, y1 rounds too."""
    _bf16_here()
    g = ir.load_bytes(_two_matmuls().SerializeToString())
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)}
    want = run(make_session(g), feeds)
    mixed = Placement.of({"y1": "openvino", "r": "openvino:bf16", "y2": "openvino:bf16"})
    with CpuExecutor(g, None, placement=mixed) as ex:
        assert len(ex.plan.segments) == 1
        got = ex.run(feeds)
    assert _nmse(got["y1"], want["y1"]) < 1e-10
    assert _nmse(got["y2"], want["y2"]) > 1e-7
    with CpuExecutor(g, None, placement=Placement.whole(g, "openvino:bf16")) as ex:
        assert _nmse(ex.run(feeds)["y1"], want["y1"]) > 1e-7


def test_a_value_kept_f32_that_the_model_does_not_compute_changes_nothing():
    _bf16_here()
    from gspo.runtime.openvino import load_openvino

    g = ir.load_bytes(_two_matmuls().SerializeToString())
    feeds = {"x": np.ones((1, 64), np.float32)}
    plain = load_openvino(g, 0, "bf16").run(["y1", "y2"], feeds)
    named = load_openvino(g, 0, "bf16", keep_f32=("no such value",)).run(["y1", "y2"], feeds)
    for a, b in zip(plain, named):
        np.testing.assert_array_equal(a, b)
