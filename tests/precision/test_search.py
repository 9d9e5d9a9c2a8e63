"""Fitting a precision kind to the budget: pieces go back to fp32, the largest error first."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from gspo.ir import load_bytes
from gspo.precision.accuracy import ErrorBudget
from gspo.precision.search import Pieces, fit, outputs_of, reduce_again
from gspo.precision.variants import Kind
from gspo.timing.deadline import Deadline

#: How much each piece's weight moves when the fake kind "reduces" it.
EPS = (1e-4, 1e-1, 1e-3)


def chain(scales=(0.0, 0.0, 0.0)) -> bytes:
    """x[1, 16] -> MatMul -> Relu -> MatMul -> Relu -> MatMul -> y; weight i scaled by 1 + scales[i]."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i, s in enumerate(scales):
        w = (rng.standard_normal((16, 16)) / 4).astype(np.float32) * np.float32(1 + s)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]))
        prev = f"m{i}"
        if i < len(scales) - 1:
            nodes.append(helper.make_node("Relu", [prev], [f"r{i}"]))
            prev = f"r{i}"
    nodes[-1].output[0] = "y"
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


#: Each piece's node ids (node id = the name of a node's first output).
PIECES = Pieces((frozenset({"m0", "r0"}), frozenset({"m1", "r1"}), frozenset({"y"})))


def fake_kind(built: list) -> Kind:
    def build(reduced):
        scales = tuple(EPS[i] if PIECES.ops[i] <= reduced else 0.0 for i in range(3))
        built.append(scales)
        return load_bytes(chain(scales))

    return Kind("fake", "int8", "ort", lambda ops: True, build)


def data(n=4):
    rng = np.random.default_rng(1)
    samples = [{"x": rng.standard_normal((1, 16)).astype(np.float32)} for _ in range(2 * n)]
    return SimpleNamespace(calibration=samples[:n], validation=samples[n:])


def reference(d):
    base = load_bytes(chain())
    return {"calibration": outputs_of(base, d.calibration), "validation": outputs_of(base, d.validation)}


def test_the_piece_with_the_largest_error_goes_back_first():
    d, built = data(), []
    fitted = fit(fake_kind(built), PIECES, d, reference(d), ErrorBudget.parse("nmse=1e-4"), None)
    assert fitted.reduced == (0, 2)
    assert fitted.pieces[0] == fitted.pieces[2] == "reduced"
    assert fitted.pieces[1].startswith("back to fp32: the calibration data broke the budget (y: nmse")
    assert "ranked 1" in fitted.pieces[1]
    assert fitted.validation.holds and fitted.calibration.holds
    assert fitted.validation.outputs["y"]["nmse"] <= 1e-4
    # all three reduced, then each alone (the ranking), then without piece 1 on both data sets
    assert built[0] == EPS and built[1:4] == [(EPS[0], 0, 0), (0, EPS[1], 0), (0, 0, EPS[2])]
    assert built[4:] == [(EPS[0], 0, EPS[2]), (EPS[0], 0, EPS[2])]


def test_a_budget_nothing_holds_drops_the_kind_with_every_piece_back_at_fp32():
    d = data()
    fitted = fit(fake_kind([]), PIECES, d, reference(d), ErrorBudget.parse("nmse=1e-14"), None)
    assert fitted.reduced is None and fitted.graph is None
    assert fitted.note == "every piece went back to fp32 to hold the budget"
    assert all(fitted.pieces[i].startswith("back to fp32: the calibration data broke the budget (y: nmse")
               for i in range(3))
    ranks = sorted(int(fitted.pieces[i].rsplit(" ", 1)[1]) for i in range(3))
    assert ranks == [1, 2, 3]
    assert "ranked 1" in fitted.pieces[1]  # the largest error alone


def test_a_loose_budget_keeps_every_piece_reduced_after_one_check_on_each_data_set():
    d, built = data(), []
    fitted = fit(fake_kind(built), PIECES, d, reference(d), ErrorBudget.parse("nmse=1"), None)
    assert fitted.reduced == (0, 1, 2) and built == [EPS, EPS]


def test_the_validation_data_can_send_pieces_back_after_the_calibration_data_held():
    d = data()
    ref = reference(d)
    # the validation reference is off by 10% everywhere: the calibration holds, the validation never does
    ref["validation"] = [{"y": o["y"] * np.float32(1.1)} for o in ref["validation"]]
    fitted = fit(fake_kind([]), PIECES, d, ref, ErrorBudget.parse("nmse=1e-3"), None)
    assert fitted.reduced is None
    assert any("the validation data broke the budget" in why for why in fitted.pieces.values())


def test_the_deadline_ends_the_fit_with_a_note():
    d = data()
    ticks = iter([0.0, 100.0, 200.0, 300.0])
    fitted = fit(fake_kind([]), PIECES, d, reference(d), ErrorBudget.parse("nmse=1e-4"),
                 deadline=Deadline(50.0, clock=lambda: next(ticks)))
    assert fitted.reduced is None
    assert fitted.note == "the time budget ended before the error was within the budget"


def test_the_pieces_a_kind_does_not_touch_are_built_as_reduced_and_pinned_ones_are_not():
    """A piece with nothing the kind reduces is handed to every build as reduced (its ops left to
    the kind, as with the whole model reduced), and reported as untouched; a pinned piece never."""
    d, seen = data(), []
    base = fake_kind([])

    def build(reduced):
        seen.append(reduced)
        return base.build(reduced)

    kind = Kind("partial", "int8", "ort", lambda ops: "y" not in ops, build)
    fitted = fit(kind, PIECES, d, reference(d), ErrorBudget.parse("nmse=1e-4"), None, pinned={1: "kept at fp32"})
    assert seen and all(PIECES.ops[2] <= r and not PIECES.ops[1] & r for r in seen)
    assert fitted.reduced == (0,) and fitted.validation.holds
    assert fitted.pieces == {0: "reduced", 1: "kept at fp32", 2: "nothing in it this kind reduces"}


def test_a_kind_that_touches_nothing_is_dropped_with_the_reason():
    d = data()
    kind = Kind("none", "int8", "ort", lambda ops: False, lambda reduced: load_bytes(chain()))
    fitted = fit(kind, PIECES, d, reference(d), ErrorBudget.parse("nmse=1e-4"), None)
    assert fitted.reduced is None and fitted.note == "nothing in the model this kind reduces"
    assert set(fitted.pieces.values()) == {"nothing in it this kind reduces"}


def test_chain_is_a_valid_model():
    onnx.checker.check_model(onnx.load_from_string(chain()))


def test_the_fits_end_early_enough_to_leave_the_timing_its_time():
    from gspo.precision.stage import TIMING_SHARE, fits_deadline
    from tests.search.fakes import FakeClock

    clock = FakeClock(now=0.0)
    deadline = Deadline.after(100.0, clock)
    assert fits_deadline(None, 3, 0.1) is None
    assert not fits_deadline(Deadline.after(None, clock), 3, 0.1).limited
    low, high = TIMING_SHARE
    assert fits_deadline(deadline, 3, 0.0).at == 100.0 * (1 - low)  # the least kept for timing
    assert fits_deadline(deadline, 3, 1.0).at == 100.0 * (1 - high)  # the most
    rounds = (23 * 4 * 0.1)  # (20 rounds + 3 warm-up) x (fp32 and 3 kinds) x 0.1 s
    assert abs(fits_deadline(deadline, 3, 0.1).at - (100.0 - 2 * rounds)) < 1e-9


def test_a_slow_kind_takes_its_share_of_the_time_not_the_next_kinds():
    from gspo.precision.stage import fit_kinds
    from tests.search.fakes import FakeClock

    clock, d = FakeClock(now=0.0), data()

    def slow(reduced):  # every build takes 10 s of the fake clock, and nothing ever holds
        clock.advance(10.0)
        return load_bytes(chain(tuple(0.5 if PIECES.ops[i] <= reduced else 0.0 for i in range(3))))

    kinds = [Kind("slow", "int8", "ort", lambda ops: True, slow), fake_kind([])]
    fitted = fit_kinds(kinds, PIECES, (d, reference(d), ErrorBudget.parse("nmse=1e-4")),
                       Deadline.after(40.0, clock), lambda text: None)
    assert fitted[0].reduced is None and fitted[0].note == "the time budget ended before the error was within the budget"
    assert fitted[1].reduced == (0, 2) and fitted[1].validation.holds  # fitted in the time the slow one left
    assert clock.now <= 40.0 + 10.0  # the slow kind stopped at its share (one build may run over)


def test_more_pieces_than_are_ranked_go_back_in_runs_of_neighbours_then_each_is_tried_again(monkeypatch):
    import gspo.precision.search as search

    monkeypatch.setattr(search, "MAX_RANKED", 2)  # three pieces, two units: (0,) and (1, 2)
    d, built = data(), []
    budget = ErrorBudget.parse("nmse=1e-4")
    fitted = fit(fake_kind(built), PIECES, d, reference(d), budget, None)
    assert fitted.reduced == (0,) and fitted.validation.holds and fitted.sent == ((1, 2),)
    assert fitted.pieces[1] == fitted.pieces[2] and "the error of pieces 1-2 alone ranked 1" in fitted.pieces[1]
    # all three, then each unit alone (two judgments for three pieces), then piece 0 on both data sets
    assert built == [EPS, (EPS[0], 0, 0), (0, EPS[1], EPS[2]), (EPS[0], 0, 0), (EPS[0], 0, 0)]
    reduce_again(fitted, PIECES, d, reference(d), budget, None)
    assert fitted.reduced == (0, 2) and fitted.validation.holds and fitted.calibration.holds
    assert fitted.validation.outputs["y"]["nmse"] <= 1e-4
    assert fitted.pieces[2] == "reduced"  # its error alone is small: reduced again
    assert "reduced again on its own, the calibration data broke the budget (y: nmse" in fitted.pieces[1]
    # then piece 1 with piece 0 (broke the calibration data), then piece 2 (held on both)
    assert built[5:] == [(EPS[0], EPS[1], 0), (EPS[0], 0, EPS[2]), (EPS[0], 0, EPS[2])]
    assert fitted.graph is not None and built[-1] == (EPS[0], 0, EPS[2])  # the graph of what holds


def test_the_deadline_during_the_second_tries_keeps_what_held(monkeypatch):
    import gspo.precision.search as search

    monkeypatch.setattr(search, "MAX_RANKED", 2)
    d = data()
    budget = ErrorBudget.parse("nmse=1e-4")
    fitted = fit(fake_kind([]), PIECES, d, reference(d), budget, None)
    reduce_again(fitted, PIECES, d, reference(d), budget, deadline=Deadline(50.0, clock=lambda: 100.0))
    assert fitted.reduced == (0,) and fitted.validation.holds and fitted.note == ""
    assert fitted.pieces[1] == fitted.pieces[2] and "reduced again" not in fitted.pieces[1]


def test_a_fit_that_sent_pieces_back_one_at_a_time_has_nothing_to_try_again():
    d, built = data(), []
    budget = ErrorBudget.parse("nmse=1e-4")
    fitted = fit(fake_kind(built), PIECES, d, reference(d), budget, None)
    assert fitted.sent == ((1,),)
    n = len(built)
    reduce_again(fitted, PIECES, d, reference(d), budget, None)
    assert len(built) == n and fitted.reduced == (0, 2)


def test_each_kind_is_tried_at_the_default_threads_and_at_every_count_worth_trying():
    from gspo.precision.search import thread_settings

    graph = load_bytes(chain())  # (which count is fastest is decided by the whole-model trial: tests/search/test_reduced.py)
    assert thread_settings(graph, cores=2) == (0, 1, 2) and thread_settings(graph, cores=1) == (0, 1)


def test_a_model_too_large_for_more_sessions_is_timed_at_the_default_threads_only():
    from gspo.ir.builder import GraphBuilder
    from gspo.precision.search import thread_settings

    b = GraphBuilder("large")  # a lazy weight of 512 MB, never computed
    huge = b.output(b.op("MatMul", [b.input("x", (1, 1 << 13)), b.weight("w", (1 << 13, 1 << 14))])).build()
    assert thread_settings(huge, cores=2) == (0,)


def test_a_kind_whose_share_ran_out_goes_on_in_the_time_the_others_left_losing_no_judgment():
    from gspo.precision.stage import fit_kinds
    from tests.search.fakes import FakeClock

    clock, d, said, built = FakeClock(now=0.0), data(), [], []
    base = fake_kind(built)

    def slow(reduced):  # every build takes 10 s of the fake clock; the fit needs six
        clock.advance(10.0)
        return base.build(reduced)

    kinds = [Kind("slow", "int8", "ort", lambda ops: True, slow), fake_kind([])]
    fitted = fit_kinds(kinds, PIECES, (d, reference(d), ErrorBudget.parse("nmse=1e-4")),
                       Deadline.after(30.0, clock), said.append, again=lambda n: Deadline.after(200.0, clock))
    assert said == ["fitting slow", "fitting fake", "fitting slow, on from where its share ended"]
    assert fitted[0].reduced == (0, 2) and fitted[0].validation.holds and fitted[0].note == ""
    assert fitted[0].progress is None and "ranked 1" in fitted[0].pieces[1]
    # the same six builds as a fit in one go: two in the first share, four after it
    assert built == [EPS, (EPS[0], 0, 0), (0, EPS[1], 0), (0, 0, EPS[2]), (EPS[0], 0, EPS[2]), (EPS[0], 0, EPS[2])]
    assert fitted[1].reduced == (0, 2)


def test_no_judgment_starts_that_the_deadline_cannot_hold():
    import dataclasses

    from tests.search.fakes import FakeClock

    clock, d, built = FakeClock(now=0.0), data(), []

    def slow(reduced):  # every build takes 5 s of the fake clock, and nothing ever holds
        built.append(reduced)
        clock.advance(5.0)
        return load_bytes(chain(tuple(0.5 if PIECES.ops[i] <= reduced else 0.0 for i in range(3))))

    kind = dataclasses.replace(Kind("slow", "int8", "ort", lambda ops: True, slow), cost=6.0)
    fitted = fit(kind, PIECES, d, reference(d), ErrorBudget.parse("nmse=1e-4"), Deadline.after(10.0, clock))
    assert fitted.note == "the time budget ended before the error was within the budget"
    assert len(built) == 1 and clock.now == 5.0  # a second judgment (6 s) would end past 10 s: not begun


def test_a_kind_whose_share_cannot_hold_one_judgment_is_not_fitted():
    import dataclasses

    from gspo.precision.stage import NOT_FITTED, fit_kinds
    from tests.search.fakes import FakeClock

    clock, d, built = FakeClock(now=0.0), data(), []
    heavy = dataclasses.replace(fake_kind(built), name="heavy", cost=30.0)  # a 400 MB model's quantization, say
    fitted = fit_kinds([heavy, fake_kind([])], PIECES, (d, reference(d), ErrorBudget.parse("nmse=1e-4")),
                       Deadline.after(40.0, clock), lambda text: None)
    assert built == [] and fitted[0].reduced is None and fitted[0].note.startswith(NOT_FITTED)
    assert "about 30.0 s" in fitted[0].note and "its share of the time left: 20.0 s" in fitted[0].note
    assert fitted[1].reduced == (0, 2)  # the next kind had its time
