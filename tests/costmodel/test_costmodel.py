"""Estimators on hand-made graphs, profile round trip and errors, resumable calibration DB."""

from __future__ import annotations

import json
import math
import multiprocessing
import sqlite3
from dataclasses import replace

import pytest

from gspo.costmodel import CostModel, Profile, ProfileError, load_profile, save_profile
from gspo.costmodel.calibrate import CalibrationConfig, calibrate
from gspo.costmodel.db import CalibrationDB
from gspo.costmodel.features import FAMILIES, family_of, feature_vector, op_features
from gspo.costmodel.poly import Poly, fit_poly
from gspo.ir.builder import GraphBuilder
from gspo.streams import Schedule, assign_streams


def flat_profile(per_op=1e-3, call=1e-4, seg=2e-4, sync=5e-5, beta=None) -> Profile:
    """Every op costs ``per_op`` seconds (a constant fit), beta_a constant when given."""
    const = Poly(powers=((1, 0, 0, 0),), coef=(0.0,), intercept=math.log10(per_op), mean=(0,) * 4, scale=(1,) * 4)
    families = {f: const for f in FAMILIES}
    par = None if beta is None else Poly(((1, 0, 0, 0, 0),), (0.0,), beta, (0,) * 5, (1,) * 5)
    return Profile("cpu:test:2c", "1.0", call, seg, sync, families, {}, par)


def two_branches(lengths=(3, 1)):
    b = GraphBuilder()
    x = b.input("x", (1, 8))
    outs = []
    for n in lengths:
        y = x
        for _ in range(n):
            y = b.op("Relu", [y])
        outs.append(y)
    return b.output(b.op("Add", outs)).build()


def test_sequential_is_eq1_the_sum_of_op_costs():
    g = two_branches((3, 1))
    model = CostModel(flat_profile())
    assert model.sequential(g) == pytest.approx(1e-4 + 5 * 1e-3)


def test_parallel_takes_the_longest_branch_and_divides_by_beta():
    g = two_branches((3, 1))
    s = assign_streams(g)
    assert s.num_streams == 2
    cp1, total = CostModel(flat_profile()).critical_path(g, s)
    # Three segments: [relu x3], [relu], and [add], which waits for the branch on the other
    # stream. The add starts after the long branch (3 ms + seg), plus the sync when the add runs
    # on the short branch's stream (then the long branch's end is the event it waits for).
    where = s.stream_of()
    long_stream = where[g.nodes[0].outputs[0].name]
    sync = 0.0 if where["add"] == long_stream else 5e-5
    assert cp1 == pytest.approx(1e-4 + (3e-3 + 2e-4) + sync + (1e-3 + 2e-4))
    assert total == pytest.approx(5 * 1e-3 + 3 * 2e-4)
    assert CostModel(flat_profile(beta=0.5)).parallel(g, s) == pytest.approx(cp1 / 0.5)
    assert CostModel(flat_profile(beta=0.5)).cost(g, Schedule.single(g)) == pytest.approx(1e-4 + 5e-3)
    # The launch cost joins the critical path of multi-stream schedules only.
    launched = CostModel(replace(flat_profile(beta=0.5), launch_cost=3e-4))
    assert launched.critical_path(g, s)[0] == pytest.approx(cp1 + 3e-4)
    assert launched.parallel(g, s) == pytest.approx((cp1 + 3e-4) / 0.5)
    assert launched.cost(g, Schedule.single(g)) == pytest.approx(1e-4 + 5e-3)


def test_no_op_is_costed_faster_than_the_fastest_measured_op_of_its_family():
    """The roofline floor: a fit that promises 1 us for a 604 MFLOP MatMul is overruled by the
    best rate among the family's calibration ops long enough to count (a 1 us op does not)."""
    from gspo.costmodel.estimate import PEAK_MIN_SECONDS

    reps = {"matmul": [(1e6, 1e-6), (2e8, 2e-3), (4e8, 2e-3)]}  # 1e12 (too short), 1e11, 2e11 FLOP/s
    model = CostModel(replace(flat_profile(per_op=1e-6), representatives=reps))
    assert 1e-6 < PEAK_MIN_SECONDS <= 2e-3
    assert model.peak_rate("matmul") == pytest.approx(2e11)
    b = GraphBuilder()
    g = b.output(b.op("MatMul", [b.input("x", (128, 3072)), b.weight("w", (3072, 768))])).build()
    assert model.sequential(g) == pytest.approx(1e-4 + 2 * 128 * 3072 * 768 / 2e11)
    assert model.peak_rate("conv") == 0.0  # no representatives: no floor
    small = GraphBuilder()
    h = small.output(small.op("MatMul", [small.input("x", (1, 8)), small.weight("w", (8, 8))])).build()
    assert model.sequential(h) == pytest.approx(1e-4 + 1e-6)  # far below the peak: the fit stands


def test_features_and_families():
    b = GraphBuilder()
    x = b.input("x", (1, 3, 8, 8))
    c = b.op("Conv", [x, b.weight("w", (4, 3, 3, 3))], kernel_shape=[3, 3])
    g = b.output(b.op("Relu", [c])).build()
    conv, relu = (op_features(g, n) for n in g.nodes)
    assert (family_of(g.nodes[0]), family_of(g.nodes[1])) == ("conv", "elementwise")
    assert conv.k == 27 and conv.flops == 2 * 4 * 36 * 27
    assert len(feature_vector(relu)) == 4


def test_copying_data_movement_is_its_own_family():
    """Concat copies every element; Reshape need not: they get separate in-context factors."""
    b = GraphBuilder()
    x = b.input("x", (1, 4, 8))
    c = b.op("Concat", [x, x], axis=1)
    g = b.output(b.op("Reshape", [c, b.const("s", [1, -1])])).build()
    assert [family_of(n) for n in g.nodes] == ["copy", "data"]


def test_poly_fit_recovers_a_quadratic_and_round_trips():
    xs = [[a, b] for a in range(5) for b in range(4)]
    ys = [1 + 2 * a - b + 0.5 * a * b for a, b in xs]
    p = fit_poly(xs, ys, alpha=1e-9)
    assert all(abs(p(x) - y) < 1e-4 for x, y in zip(xs, ys))
    assert Poly.from_json(json.loads(json.dumps(p.to_json()))) == p


def test_local_correction_bends_toward_measured_points_and_fades_away():
    """A step (a cache boundary) a quadratic cannot follow: with the local correction the fit
    comes close at the measured points on both sides and stays the polynomial far from all."""
    xs = [[i / 4] for i in range(40)]
    ys = [0.0 if x[0] < 5 else 1.0 for x in xs]
    plain = fit_poly(xs, ys, alpha=1e-6)
    local = fit_poly(xs, ys, alpha=1e-6, bandwidth=0.05, prior=0.01)
    plain_err = sum(abs(plain(x) - y) for x, y in zip(xs, ys))
    local_err = sum(abs(local(x) - y) for x, y in zip(xs, ys))
    assert local_err < 0.2 * plain_err
    far = [40.0]
    assert local(far) == pytest.approx(plain(far), abs=1e-9)
    assert Poly.from_json(json.loads(json.dumps(local.to_json()))) == local


def test_family_fit_picks_the_local_correction_only_when_it_predicts_held_out_ops_better():
    import numpy as np

    from gspo.costmodel.fit import fit_family

    xs = [[a / 3, b / 3] for a in range(12) for b in range(6)]
    smooth = [1 + 0.2 * a - 0.1 * b + 0.05 * a * b for a, b in xs]
    noise = np.random.default_rng(1).normal(0, 0.3, len(xs))
    # A quadratic plus independent noise: a neighbour's residual says nothing about an op's own.
    assert fit_family(xs, list(smooth + noise)).local is None
    cliff = [y + (0.8 if a > 2 else 0.0) for y, (a, b) in zip(smooth, xs)]
    assert fit_family(xs, cliff).local is not None


def test_a_large_penalty_gives_every_family_the_common_factor():
    import numpy as np

    from gspo.costmodel.fit import scale_fit

    rng = np.random.default_rng(0)
    x = rng.uniform(0.1, 1.0, (30, 3))  # each row: family cost / measured time
    free = scale_fit(x, 0.0)[0]
    pooled = scale_fit(x, 1e9)[0]
    assert np.ptp(pooled) < 1e-6 < np.ptp(free)
    # the common factor that makes the geometric mean of estimate/measured 1
    common = np.exp(-np.log(x.sum(axis=1)).mean())
    assert pooled[0] == pytest.approx(common, rel=1e-4)


def test_family_factors_are_recovered_exactly_and_without_bias_under_noise():
    import numpy as np

    from gspo.costmodel.fit import scale_fit

    rng = np.random.default_rng(1)
    truth = np.array([0.8, 0.5, 1.3])
    costs = rng.uniform(0.1, 1.0, (200, 3))  # single-op cost sums per family, per piece
    exact = costs / (costs @ truth)[:, None]
    assert scale_fit(exact, 0.0)[0] == pytest.approx(truth, rel=1e-4)
    noisy = exact / rng.lognormal(0.0, 0.3, 200)[:, None]  # measured times off by +-30%
    fitted = scale_fit(noisy, 0.0)[0]
    assert np.median(noisy @ fitted) == pytest.approx(1.0, abs=0.04)  # ratio-space LS gives ~0.9
    assert fitted == pytest.approx(truth, rel=0.15)


def test_profile_round_trip_and_errors(tmp_path):
    p = replace(flat_profile(beta=0.8), launch_cost=2e-4, reorder_cost=1.2e-5, layout_block=16)
    path = save_profile(p, tmp_path / "p.json")
    assert load_profile(str(path)) == p
    with pytest.raises(ProfileError, match="made for device 'cpu:test:2c'"):
        load_profile(str(path), device="cpu:other:8c")
    assert load_profile(str(path), device="cpu:other:8c", force=True) == p
    with pytest.raises(ProfileError, match="onnxruntime version"):
        load_profile(str(path), runtime="9.9")
    bad_version = tmp_path / "v.json"
    bad_version.write_text(json.dumps({**p.to_json(), "version": 99}))
    with pytest.raises(ProfileError, match="schema version 99"):
        load_profile(str(bad_version))
    foreign = tmp_path / "f.json"
    foreign.write_text(json.dumps({"hello": 1}))
    with pytest.raises(ProfileError, match="not a gspo profile"):
        load_profile(str(foreign))
    corrupt = tmp_path / "c.json"
    corrupt.write_text("{nope")
    with pytest.raises(ProfileError, match="not JSON"):
        load_profile(str(corrupt))
    broken = tmp_path / "b.json"
    d = p.to_json()
    del d["families"]
    broken.write_text(json.dumps(d))
    with pytest.raises(ProfileError, match="field 'families' is missing"):
        load_profile(str(broken))
    with pytest.raises(ProfileError, match="no profile named"):
        load_profile("does-not-exist")


def test_calibration_resumes_and_measures_only_what_is_new(tmp_path, monkeypatch):
    import gspo.costmodel.calibrate as cal
    from gspo.costmodel.microbench import multi_branch, single_ops

    small_ops, small_branches = single_ops()[::25], multi_branch(count=10)[:9]
    monkeypatch.setattr(cal, "single_ops", lambda seed: small_ops)
    monkeypatch.setattr(cal, "multi_branch", lambda seed: small_branches)
    monkeypatch.setattr(cal, "chains", lambda seed: [])
    monkeypatch.setattr(cal, "zoo_pieces", lambda: [])
    measured = []
    real = cal._measure

    def interrupted(bench, cfg, reference=None):
        if len(measured) == 3:
            raise KeyboardInterrupt  # Ctrl-C during the fourth measurement
        measured.append(bench.signature)
        return real(bench, cfg, reference)

    launches = []
    monkeypatch.setattr(cal, "measure_launch_cost", lambda: (launches.append(1), 1.0)[1])
    cfg = CalibrationConfig("cpu:test", "x", str(tmp_path / "db.sqlite"), budget_s=600, min_runs=2, max_runs=2, target_s=0)
    monkeypatch.setattr(cal, "_measure", interrupted)
    with pytest.raises(KeyboardInterrupt):
        calibrate(cfg)
    # + the fixed costs, the launch cost and the blocked layout's channel block
    assert len(measured) == 3 and CalibrationDB(cfg.db_path, "cpu:test", "x").count() == 6
    monkeypatch.setattr(cal, "_measure", lambda b, c, r=None: (measured.append(b.signature), real(b, c, r))[1])
    profile = calibrate(cfg)
    total = len(small_ops) + len(small_branches)
    assert len(measured) == total and len(set(measured)) == total  # nothing measured twice
    assert profile.meta == {"ops": len(small_ops), "chains": 0, "branches": len(small_branches), "pieces": 0,
                            "normalized": total, "beta_piece_weight": 0, "passes": 1}
    assert profile.parallel is not None and profile.reference_s > 0
    # The launch cost was measured once (not again on resuming) and is what the launch graph's
    # segment DAG does not account for.
    g = cal.launch_graph()
    schedule = assign_streams(g, max_streams=2)
    assert len(launches) == 1 and schedule.num_streams == 2
    without = CostModel(replace(profile, launch_cost=0.0)).critical_path(g, schedule)[0]
    assert profile.launch_cost == pytest.approx(1.0 - without)
    assert profile.seq_scale[1] != 0.0  # no chains: the factor comes from the fork-join graphs run as one session
    calibrate(cfg)
    assert len(measured) == total  # a re-run measures nothing new


def test_measurements_are_put_in_reference_units():
    """A machine at half speed for every other measurement (the reference slows down with it)
    fits the same profile, in reference units, as a steady machine; without the reference the
    drift would distort the fit."""
    from gspo.costmodel.fit import FixedCosts, fit
    from gspo.costmodel.microbench import single_ops

    ops = single_ops()[::3]
    true = [1e-5 * (1 + i % 17) * (1 + i // 17) for i in range(len(ops))]
    cfg = CalibrationConfig("cpu:test", "x", "unused")

    def profile(slow, with_reference=True):
        rows = []
        for i, (bench, t) in enumerate(zip(ops, true)):
            f = slow if i % 2 else 1.0
            rows.append((bench, {"seconds": t * f, **({"reference": 1e-3 * f} if with_reference else {})}))
        return fit(rows, [], [], FixedCosts(call=0.0, sync=0.0), cfg)

    steady, drifting, uncorrected = profile(1.0), profile(2.0), profile(2.0, with_reference=False)
    assert steady.reference_s == pytest.approx(1e-3) and drifting.reference_s == pytest.approx(1.5e-3)
    graphs = [b.build() for b in ops[::5]]
    for g in graphs:
        a = sum(CostModel(steady).op_costs(g)) / steady.reference_s
        b = sum(CostModel(drifting).op_costs(g)) / drifting.reference_s
        assert b == pytest.approx(a, rel=1e-6)
    ratios = [sum(CostModel(uncorrected).op_costs(g)) / sum(CostModel(steady).op_costs(g)) for g in graphs]
    assert max(ratios) / min(ratios) > 1.05  # the uncorrected fit is distorted, not just rescaled


def _writer(path, start):
    db = CalibrationDB(path, "dev", "rt")
    for i in range(start, start + 200):
        db.put(f"sig{i}", "op", {"seconds": i})
    db.close()


def test_two_writers_at_once_lose_nothing(tmp_path):
    path = str(tmp_path / "db.sqlite")
    CalibrationDB(path, "dev", "rt").close()
    procs = [multiprocessing.Process(target=_writer, args=(path, s)) for s in (0, 100)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    rows = sqlite3.connect(path).execute("SELECT COUNT(*) FROM measurements").fetchone()[0]
    assert rows == 300  # 0..299, the overlapping 100..199 kept once
    assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def _flops_profile() -> Profile:
    """Every op costs 1 ns per FLOP (log10 seconds = log10 flops - 9), whatever its family."""
    fit = Poly(powers=((1, 0, 0, 0),), coef=(1.0,), intercept=-9.0, mean=(0,) * 4, scale=(1,) * 4)
    return Profile("cpu:test:2c", "1.0", 0.0, 0.0, 0.0, {f: fit for f in ("conv", "matmul", "elementwise")}, {}, None)


def _matmul(k: int):
    b = GraphBuilder()
    return b.output(b.op("MatMul", [b.input("x", (4, k)), b.weight("w", (k, 8))], out="y")).build()


def test_op_costs_are_not_shared_between_ops_that_differ_only_in_input_shape():
    """Two MatMuls with the same names and output shape but different reduction lengths: one
    CostModel (as in the search and the evaluation) must cost them apart."""
    model = CostModel(_flops_profile())
    small, large = model.op_costs(_matmul(16)), model.op_costs(_matmul(256))
    assert large[0] == pytest.approx(small[0] * (2 * 4 * 8 * 256 + 1) / (2 * 4 * 8 * 16 + 1), rel=1e-6)


def test_family_scales_recover_in_context_factors():
    """Pieces whose measured time is 2x their conv cost plus 0.5x their elementwise cost: the
    fitted per-family factors are 2 and 0.5, and the model then predicts the pieces exactly."""
    from gspo.costmodel.fit import family_scales

    class Piece:
        def __init__(self, g):
            self.g = g

        def build(self):
            return self.g

    model = CostModel(_flops_profile())
    timed = []
    for i, (c, n_sigmoid) in enumerate([(4, 1), (8, 3), (16, 2), (6, 5), (12, 1), (10, 4), (3, 6), (14, 2)]):
        b = GraphBuilder()
        y = b.op("Conv", [b.input("x", (1, c, 8 + i, 8)), b.weight("w", (c, c, 3, 3))], pads=[1, 1, 1, 1])
        for _ in range(n_sigmoid):  # Sigmoid: not fused into the Conv, so every one is costed
            y = b.op("Sigmoid", [y])
        g = b.output(y).build()
        by = {"conv": 0.0, "elementwise": 0.0}
        for node, cost in zip(g.nodes, model.op_costs(g)):
            fam = op_features(g, node).family
            by[fam] = by.get(fam, 0.0) + cost
        timed.append((Piece(g), 2 * by["conv"] + 0.5 * by["elementwise"]))
    scales, penalty, reorder = family_scales(model, timed, 0.0)
    assert reorder == 0.0  # the profile has no blocked layout
    assert penalty == 0.0  # exact data: cross-validation wants no pull toward a common factor
    assert scales["conv"] == pytest.approx(2.0, rel=1e-3) and scales["elementwise"] == pytest.approx(0.5, rel=1e-3)
    assert "matmul" not in scales  # no piece has one: it keeps 1
    scaled = CostModel(replace(_flops_profile(), family_scale=scales))
    for piece, seconds in timed:
        assert sum(scaled.op_costs(piece.g)) == pytest.approx(seconds, rel=1e-3)


def test_calibration_pieces_are_disjoint_from_the_held_out_ones():
    from gspo.costmodel.subgraphs import calibration_pieces, held_out_subgraphs, shape_signature

    for parallel in (False, True):
        held = held_out_subgraphs(100, False, "tiny") + held_out_subgraphs(100, True, "tiny")
        fitting = calibration_pieces(20, parallel, "tiny")
        assert fitting, "the tiny zoo leaves pieces for calibration"
        assert not {lbl for lbl, _ in held} & {lbl for lbl, _ in fitting}
        assert not {shape_signature(g) for _, g in held} & {shape_signature(g) for _, g in fitting}


def test_evaluation_noise_is_pass_two_against_pass_one():
    from gspo.costmodel.evaluate import Evaluation

    ev = Evaluation("sequential", (1.0, 2.0), (1.05, 2.2), ("a", "b"), passes=((1.0, 1.1), (2.0, 2.4)))
    assert ev.noise == pytest.approx((0.1 + 0.2) / 2)
    assert Evaluation("sequential", (1.0,), (1.0,), ("a",)).noise is None
    assert ev.to_json()["noise"] == pytest.approx(0.15)


def test_noise_left_in_the_mean_is_half_the_odd_against_even_error():
    from gspo.costmodel.evaluate import Evaluation

    two = Evaluation("sequential", (1.0,), (1.05,), ("a",), passes=((1.0, 1.1),))
    assert two.noise_of_mean == pytest.approx(two.noise / 2)
    four = Evaluation("sequential", (1.0,), (1.0,), ("a",), passes=((1.0, 1.2, 1.0, 1.0),))
    assert four.noise_of_mean == pytest.approx(abs(1.1 - 1.0) / 1.0 / 2)  # odd passes mean 1.0, even 1.1
    assert four.to_json()["passes"] == 4 and Evaluation("sequential", (1.0,), (1.0,), ("a",)).noise_of_mean is None


def test_beta_fit_takes_the_zoo_pieces_when_they_predict_held_out_pieces_better():
    """Fork-join graphs say beta = 0.8 everywhere; the zoo pieces, in a region of their own, run
    at 0.4. Cross-validation over the pieces weighs them in, and the fit then follows them
    there; with too few pieces to cross-validate they are left out."""
    import numpy as np

    from gspo.costmodel.fit import fit_beta

    rng = np.random.default_rng(0)
    px = [[2.0, v, 0.5, 0.5, 0.5] for v in rng.uniform(-5, -3, 40)]
    py = [0.8] * 40
    qx = [[2.0, v, 0.9, 0.1, 0.9] for v in rng.uniform(-4, -2, 20)]
    qy = [0.4] * 20
    poly, weight = fit_beta(px, py, qx, qy)
    assert weight > 0
    assert all(abs(poly(x) - 0.4) < 0.1 for x in qx)
    poly, weight = fit_beta(px, py, qx[:4], qy[:4])
    assert weight == 0 and all(abs(poly(x) - 0.8) < 0.1 for x in px)


def _add_layernorm(shape, *, add_is_output=False, add_read_twice=False):
    b = GraphBuilder()
    s = b.op("Add", [b.input("x", shape), b.input("r", shape)])
    y = b.op("LayerNormalization", [s, b.weight("g", (shape[-1],)), b.weight("b", (shape[-1],))], axis=-1)
    outs = [y]
    if add_is_output:
        outs.append(s)
    if add_read_twice:
        outs.append(b.op("Relu", [s]))
    return b.output(*outs).build()


def _ort_fuses_skip_layernorm(graph) -> bool:
    from gspo.runtime import optimized_op_types

    return "SkipLayerNormalization" in optimized_op_types(graph)


@pytest.mark.parametrize("shape, kwargs", [
    ((1, 16, 32), {}),
    ((16, 32), {}),  # 2-D: onnxruntime only fuses 3-D Adds
    ((1, 16, 32), {"add_is_output": True}),
    ((1, 16, 32), {"add_read_twice": True}),
])
def test_skip_layernorm_is_predicted_exactly_where_onnxruntime_fuses_it(shape, kwargs):
    from gspo.costmodel.features import skip_norm_add

    g = _add_layernorm(shape, **kwargs)
    add, ln = g.nodes[0], g.nodes[1]
    fused = _ort_fuses_skip_layernorm(g)
    assert fused == (len(shape) == 3 and not kwargs)  # the cases above, as onnxruntime decides them
    assert (skip_norm_add(g, ln) is add) == fused
    assert op_features(g, ln).family == ("skipnorm" if fused else "norm")


def test_a_fused_skip_add_costs_nothing_and_the_norm_takes_the_skipnorm_fit():
    profile = flat_profile(per_op=1e-3)
    slow = Poly(powers=((1, 0, 0, 0),), coef=(0.0,), intercept=math.log10(5e-3), mean=(0,) * 4, scale=(1,) * 4)
    profile = replace(profile, families={**profile.families, "skipnorm": slow})
    model = CostModel(profile)
    assert model.op_costs(_add_layernorm((1, 16, 32))) == pytest.approx([0.0, 5e-3])
    assert model.op_costs(_add_layernorm((16, 32))) == pytest.approx([1e-3, 1e-3])


def test_passes_are_combined_by_their_median_in_reference_units():
    from gspo.costmodel.calibrate import _combine_passes

    rows = [("b", {"seconds": 1e-3, "reference": 1.0}), ("b#pass=1", {"seconds": 3e-3, "reference": 1.0}),
            ("b#pass=2", {"seconds": 4e-3, "reference": 2.0}), ("a", {"seconds": 5e-3, "reference": 1.0})]
    three = dict(_combine_passes(rows, 3))
    # nominal reference = median(1, 1, 2, 1) = 1: b's passes are 1, 3 and 4 * 1/2 = 2 ms.
    assert three["b"]["seconds"] == pytest.approx(2e-3) and three["b"]["passes"] == 3
    assert three["b"]["reference"] == 1.0 and three["a"]["seconds"] == pytest.approx(5e-3)
    assert dict(_combine_passes(rows, 2))["b"]["seconds"] == pytest.approx(2e-3)  # median of 1 and 3
    assert dict(_combine_passes(rows, 1)) == {"b": rows[0][1], "a": rows[3][1]}  # as stored


def test_calibration_measures_every_benchmark_once_per_pass(tmp_path, monkeypatch):
    import gspo.costmodel.calibrate as cal
    from gspo.costmodel.microbench import multi_branch, single_ops

    small_ops, small_branches = single_ops()[::40], multi_branch(count=10)[:8]
    monkeypatch.setattr(cal, "single_ops", lambda seed: small_ops)
    monkeypatch.setattr(cal, "multi_branch", lambda seed: small_branches)
    monkeypatch.setattr(cal, "chains", lambda seed: [])
    monkeypatch.setattr(cal, "zoo_pieces", lambda: [])
    monkeypatch.setattr(cal, "measure_launch_cost", lambda: None)
    measured = []
    real = cal._measure
    monkeypatch.setattr(cal, "_measure", lambda b, c, r=None: (measured.append(b.signature), real(b, c, r))[1])
    cfg = CalibrationConfig("cpu:test", "x", str(tmp_path / "db.sqlite"), budget_s=600, min_runs=2, max_runs=2,
                            target_s=0, passes=2)
    profile = calibrate(cfg)
    suite = {b.signature for b in small_ops + small_branches}
    assert sorted(measured) == sorted(list(suite) * 2)
    assert profile.meta["passes"] == 2 and profile.meta["ops"] == len(small_ops)
    calibrate(replace(cfg, passes=3))  # a third pass measures each benchmark once more
    assert len(measured) == 3 * len(suite)


def test_each_pass_measures_the_whole_suite_in_its_own_seeded_order():
    from gspo.costmodel.calibrate import _pass_order
    from gspo.costmodel.microbench import multi_branch, single_ops

    suite = single_ops()[:30] + multi_branch(count=10)
    cfg = CalibrationConfig("cpu:test", "x", "unused.sqlite")
    first, second = _pass_order(suite, 0, cfg), _pass_order(suite, 1, cfg)
    assert sorted(b.signature for b in first) == sorted(b.signature for b in suite)
    assert first != suite and second != first  # kinds interleaved, each pass its own order
    assert first == _pass_order(suite, 0, cfg)  # deterministic
    assert _pass_order(suite, 0, replace(cfg, shuffle=False)) == suite
    kinds = [b.kind for b in first]
    assert kinds != sorted(kinds, key=lambda k: k != "op")  # not all ops first


def test_evaluation_times_each_parallel_piece_with_only_its_executor_alive(monkeypatch):
    import gspo.costmodel.evaluate as ev
    from gspo.costmodel.profile import load_profile
    from tests.helpers import branchy

    monkeypatch.setattr(ev, "held_out_subgraphs", lambda count, parallel: [(f"p{i}", branchy()) for i in range(3)])
    alive, peak = [0], [0]
    real = ev.CpuExecutor

    class Counting(real):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            alive[0] += 1
            peak[0] = max(peak[0], alive[0])

        def close(self):
            if self._workers:
                alive[0] -= 1
            super().close()

    monkeypatch.setattr(ev, "CpuExecutor", Counting)
    seq, par = ev.evaluate(load_profile("cpu", force=True), count=3, passes=2)
    assert peak[0] == 1 and alive[0] == 0  # one at a time, all closed
    assert len(par.measured) == 3 and all(len(p) == 2 and min(p) > 0 for p in par.passes)
    assert len(seq.measured) == 3


def test_a_poly_fitted_with_clip_evaluates_outside_its_range_at_the_edge(tmp_path):
    xs = [[a, b] for a in range(5) for b in range(5)]
    ys = [1.0 + 0.5 * a - 0.3 * b * b for a, b in xs]
    free, clipped = fit_poly(xs, ys, alpha=1e-9), fit_poly(xs, ys, alpha=1e-9, clip=True)
    assert clipped.bounds == ((0.0, 4.0), (0.0, 4.0))
    assert clipped([2, 3]) == pytest.approx(free([2, 3]))  # inside: the same fit
    assert clipped([9, -5]) == pytest.approx(free([4, 0]))  # outside: the nearest edge
    assert free([9, -5]) != pytest.approx(free([4, 0]))
    assert Poly.from_json(json.loads(json.dumps(clipped.to_json()))) == clipped


def conv_chain(channels=32, convs=2, tail="Relu"):
    b = GraphBuilder(seed=0)
    y = b.input("x", (1, channels, 8, 8))
    for i in range(convs):
        y = b.op("Conv", [y, b.weight(f"w{i}", (channels, channels, 3, 3))], pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    y = b.op(tail, [y])
    return b.output(y).build()


def test_the_sequential_estimate_adds_the_reorders_a_graph_saves_over_its_ops_alone():
    g = conv_chain(convs=2, tail="Softmax")  # Softmax is not blocked: the chain reorders in and out once
    plain = CostModel(flat_profile())
    layout = CostModel(replace(flat_profile(), reorder_cost=1e-5, layout_block=16))
    # two convolutions alone reorder 4 times; together twice: 2 fewer
    assert layout.sequential(g) == pytest.approx(plain.sequential(g) - 2 * 1e-5)
    # without a block (a device without the layout) or without a fitted cost: nothing changes
    assert CostModel(replace(flat_profile(), reorder_cost=1e-5)).sequential(g) == pytest.approx(plain.sequential(g))
    # never below the call cost, however many reorders a graph saves
    huge = CostModel(replace(flat_profile(per_op=1e-6), reorder_cost=1.0, layout_block=16))
    assert huge.sequential(g) == pytest.approx(1e-4)


def test_a_reorder_cost_column_is_recovered_beside_the_family_factors():
    import numpy as np

    from gspo.costmodel.fit import REORDER_UNIT, scale_fit

    rng = np.random.default_rng(2)
    truth, reorder = np.array([0.9, 0.5]), 1.2e-5
    costs = rng.uniform(1e-4, 1e-3, (60, 2))
    deltas = -rng.integers(0, 8, 60).astype(float)  # reorders saved
    measured = costs @ truth + reorder * deltas
    x = costs / measured[:, None]
    extra = (deltas * REORDER_UNIT / measured)[:, None]
    scales, r = scale_fit(x, 0.0, extra)
    assert scales == pytest.approx(truth, rel=1e-3)
    assert r[0] * REORDER_UNIT == pytest.approx(reorder, rel=1e-3)


def _onnxruntime_reorders(graph) -> int:
    from gspo.runtime import optimized_op_types

    return sum(op in ("ReorderInput", "ReorderOutput") for op in optimized_op_types(graph))


def _layout_cases():
    def conv(b, x, cin, cout, name, group=1):
        return b.op("Conv", [x, b.weight(name, (cout, cin // group, 3, 3))], pads=[1, 1, 1, 1], kernel_shape=[3, 3],
                    group=group)

    cases = {}
    for c in (64, 88):  # whole blocks of 16 and not
        for case in ("relu", "add_two_convs", "add_input", "concat_two_convs", "maxpool", "global_pool", "fanout",
                     "shared_input", "bn", "mul"):
            b = GraphBuilder(seed=1)
            x = b.input("x", (1, c, 14, 14))
            y = conv(b, x, c, c, "w1")
            if case == "relu":
                z = conv(b, b.op("Relu", [y]), c, c, "w2")
            elif case == "add_two_convs":
                z = b.op("Add", [y, conv(b, x, c, c, "w2")])
            elif case == "add_input":
                z = b.op("Add", [y, x])
            elif case == "concat_two_convs":
                z = b.op("Concat", [y, conv(b, x, c, c, "w2")], axis=1)
            elif case == "maxpool":
                z = b.op("MaxPool", [y], kernel_shape=[3, 3])
            elif case == "global_pool":
                z = b.op("GlobalAveragePool", [b.op("Softmax", [y])])
            elif case == "fanout":
                b.output(b.op("Sigmoid", [y]))
                z = conv(b, y, c, c, "w2")
            elif case == "shared_input":
                b.output(conv(b, x, c, c, "w2"))
                z = y
            elif case == "bn":
                z = b.op("BatchNormalization", [b.op("Relu", [y])] + [b.weight(n, (c,), loc=1.0, scale=0.1) for n in "gbmv"])
            else:
                z = b.op("Mul", [y, conv(b, x, c, c, "w2")])
            cases[f"{case}-{c}"] = b.output(z).build()
    b = GraphBuilder(seed=1)  # a stem: three input channels, read in the plain layout
    x = b.input("x", (1, 3, 32, 32))
    cases["stem"] = b.output(b.op("MaxPool", [conv(b, x, 3, 32, "w")], kernel_shape=[2, 2], strides=[2, 2])).build()
    b = GraphBuilder(seed=1)
    x = b.input("x", (1, 32, 14, 14))
    cases["depthwise"] = b.output(conv(b, x, 32, 32, "w", group=32)).build()
    b = GraphBuilder(seed=1)  # global pooling of a plain tensor another op produced stays plain
    cases["global_pool_of_plain"] = b.output(b.op("GlobalAveragePool", [b.op("Relu", [b.input("x", (1, 64, 7, 7))])])).build()
    return cases


@pytest.mark.parametrize("name", sorted(_layout_cases()))
def test_reorders_are_counted_where_onnxruntime_puts_them(name):
    from gspo.costmodel.calibrate import detect_block
    from gspo.costmodel.layout import count_reorders

    block = detect_block()
    if block == 0:
        pytest.skip("onnxruntime uses no blocked layout on this CPU")
    g = _layout_cases()[name]
    assert count_reorders(g, block) == _onnxruntime_reorders(g)


def test_an_op_alone_reorders_as_its_own_graph_does():
    from gspo.costmodel.calibrate import detect_block
    from gspo.costmodel.layout import count_reorders, own_reorders, reorder_delta

    block = detect_block()
    if block == 0:
        pytest.skip("onnxruntime uses no blocked layout on this CPU")
    for g in _layout_cases().values():
        for i, node in enumerate(g.nodes):
            from gspo.ir.subgraph import extract

            alone, _ = extract(g, [i])
            if node.op_type in ("Conv", "MaxPool", "GlobalAveragePool"):
                assert own_reorders(g, node, block) == _onnxruntime_reorders(alone) == count_reorders(alone, block)
    g = conv_chain(channels=32, convs=3, tail="Softmax")
    assert reorder_delta(g, block) == 2 - 3 * 2
    # a subset of the nodes is counted as the session it would be (a segment)
    assert count_reorders(g, block, [0]) == 2 and count_reorders(g, block, [0, 1]) == 2
