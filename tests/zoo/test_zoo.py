"""The model zoo: published sizes, exact round trips, runnable tiny models."""

from __future__ import annotations

import numpy as np
import pytest

from gspo import ir
from gspo.ir import graph_features
from gspo.runtime import make_session, random_inputs, run
from gspo.zoo import MODELS, build

# Published parameter counts (millions), with embeddings for BERT.
PUBLISHED = {
    "resnet50": 25.6,
    "inception_v3": 23.8,
    "squeezenet": 1.24,
    "nasnet_large": 88.9,
    "nasnet_mobile": 5.3,
    "bert": 110.0,
}
# Published multiply-accumulates (billions) where the papers give them.
PUBLISHED_GMAC = {"resnet50": 4.1, "inception_v3": 5.72, "nasnet_large": 23.8, "nasnet_mobile": 0.564}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_full_parameter_counts_match_the_published_ones(name):
    params = graph_features(build(name, "full")).params / 1e6
    assert abs(params - PUBLISHED[name]) / PUBLISHED[name] < 0.02, params


@pytest.mark.parametrize("name", sorted(PUBLISHED_GMAC))
def test_full_macs_match_the_published_ones(name):
    gmac = graph_features(build(name, "full")).macs / 1e9
    assert abs(gmac - PUBLISHED_GMAC[name]) / PUBLISHED_GMAC[name] < 0.02, gmac


def test_nasrnn_full_matches_tasos_benchmark_shape():
    g = build("nasrnn", "full")
    assert len(g.inputs) == 5 and all(v.shape == (1, 512) for v in g.inputs)
    matmuls = [n for n in g.nodes if n.op_type == "MatMul"]
    assert len(matmuls) == 5 * 16
    assert len({n.inputs[1] for n in matmuls}) == 16  # weights shared across steps


def test_same_seed_same_model_other_seed_other_weights():
    assert build("squeezenet", "tiny", seed=3).key == build("squeezenet", "tiny", seed=3).key
    assert build("squeezenet", "tiny", seed=3).key != build("squeezenet", "tiny", seed=4).key
    assert ir.serialize(build("bert", "tiny")) == ir.serialize(build("bert", "tiny"))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_tiny_round_trip_is_exact_and_runs(name):
    g = build(name, "tiny")
    data = ir.serialize(g)
    back = ir.load_bytes(data)
    for vname, v in g.values.items():  # our shape functions agree with ONNX inference
        assert back.values[vname].shape == v.shape, vname
    again = ir.serialize(back)
    assert again == data
    assert ir.load_bytes(again).key == back.key
    feeds = random_inputs(back, seed=1)
    a = run(make_session(data), feeds)
    b = run(make_session(again), feeds)
    for k in a:
        assert np.isfinite(a[k]).all(), f"{name}: non-finite output {k}"
        assert np.array_equal(a[k], b[k])


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_full_round_trip_is_exact(name):
    data = ir.serialize(build(name, "full"))
    back = ir.load_bytes(data)
    again = ir.serialize(back)
    assert again == data
    assert ir.load_bytes(again).key == back.key
