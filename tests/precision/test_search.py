"""Fitting a precision kind to the budget: the pieces ranked by the error each adds in one run, the
fewest of the most harmful sent back to fp32 found by bisection on a subset, the answer judged on
all the data."""

from __future__ import annotations

import dataclasses
import re
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gspo.errors import GspoError
from gspo.ir import load_bytes
from gspo.precision.accuracy import ErrorBudget, measure
from gspo.precision.search import (
    OUT_OF_TIME,
    Pieces,
    cpu_executor,
    fit,
    outputs_of,
    reduce_again,
    resume,
)
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


#: The fp32 model the fake kinds reduce (the one-run ranking's reference) and its pieces' node ids
#: (node id = the name of a node's first output).
BASE = load_bytes(chain())
PIECES = Pieces((frozenset({"m0", "r0"}), frozenset({"m1", "r1"}), frozenset({"y"})), BASE)


def pieces_of(n: int) -> Pieces:
    """The pieces of ``chain`` of ``n`` MatMuls (fp32): each MatMul with its Relu."""
    return Pieces(tuple(frozenset({f"m{i}", f"r{i}"}) for i in range(n - 1)) + (frozenset({"y"}),),
                  load_bytes(chain((0.0,) * n)))


def scaled(eps, built: list, pieces: Pieces = PIECES, name: str = "fake") -> Kind:
    """A kind that "reduces" piece i by scaling its weight by 1 + eps[i] (through the Relus the
    output scales by the product: the error each piece adds does not depend on the data)."""
    def build(reduced):
        scales = tuple(e if pieces.ops[i] <= reduced else 0.0 for i, e in enumerate(eps))
        built.append(scales)
        return load_bytes(chain(scales))

    return Kind(name, "int8", "ort", lambda ops: True, build)


def fake_kind(built: list) -> Kind:
    return scaled(EPS, built)


class Sessions:
    """:func:`cpu_executor` that records each session it makes: ``[outputs, samples run]``."""

    def __init__(self):
        self.log: list[list[int]] = []

    def __call__(self, graph):
        ex, entry = cpu_executor(graph), [len(graph.outputs), 0]
        self.log.append(entry)

        class Counted:
            def run(self, sample):
                entry[1] += 1
                return ex.run(sample)

            def close(self):
                ex.close()

        return Counted()


def data(n=4):
    rng = np.random.default_rng(1)
    samples = [{"x": rng.standard_normal((1, 16)).astype(np.float32)} for _ in range(2 * n)]
    return SimpleNamespace(calibration=samples[:n], validation=samples[n:])


def reference(d, base=BASE):
    return {"calibration": outputs_of(base, d.calibration), "validation": outputs_of(base, d.validation)}


def test_the_piece_that_adds_the_most_error_goes_back_after_one_ranking_run_and_a_bisection():
    d, built, runs = data(), [], Sessions()
    fitted = fit(fake_kind(built), PIECES, d, reference(d), ErrorBudget.parse("nmse=1e-4"), None, executor=runs)
    assert fitted.reduced == (0, 2) and fitted.sent == ((1,),)
    assert fitted.pieces[0] == fitted.pieces[2] == "reduced"
    assert fitted.pieces[1].startswith("back to fp32: the calibration data broke the budget (y: nmse")
    assert "with every piece reduced; ranked 1 of 3 by the error it adds (its outputs' nmse " in fitted.pieces[1]
    assert fitted.pieces[1].endswith("above its inputs', on 2 calibration samples)")
    assert fitted.validation.holds and fitted.calibration.holds
    assert fitted.validation.outputs["y"]["nmse"] <= 1e-4
    # all three reduced; then piece 1 back, built once and judged on 2 calibration samples, on all 4 and on
    # the validation data (the ranking runs the first build again and the fp32 model, with their borders exposed)
    assert built == [EPS, (EPS[0], 0, EPS[2])]
    assert runs.log == [[1, 4], [3, 2], [3, 2], [1, 2], [1, 4], [1, 4]]


def test_the_one_run_ranking_blames_the_piece_that_adds_the_error_not_the_later_ones_that_carry_it():
    from gspo.precision.sensitivity import harm

    eps, d = (1e-1, 1e-3, 1e-3), data()
    reduced = load_bytes(chain(eps))
    carried = measure(reference(d)["calibration"], outputs_of(reduced, d.calibration), ErrorBudget.parse("nmse=1"))
    measured = harm(reduced, BASE, PIECES.ops, d.calibration, cpu_executor)
    assert carried.outputs["y"]["nmse"] > measured.errors["r0"]  # the output carries the most error
    assert measured.added[0] > 10 * max(measured.added[1], measured.added[2])  # piece 0 made it
    fitted = fit(scaled(eps, []), PIECES, d, reference(d), ErrorBudget.parse("nmse=1e-4"), None)
    assert fitted.reduced == (1, 2) and "ranked 1 of 3 by the error it adds" in fitted.pieces[0]


def test_the_bisection_takes_a_logarithmic_number_of_judgments_on_the_subset_and_the_last_on_all_the_data():
    n = 32
    eps = tuple(float(e) for e in 10 ** np.random.default_rng(3).uniform(-5, -2, n))
    pieces = pieces_of(n)
    d, built, runs = data(8), [], Sessions()
    ref = reference(d, pieces.graph)
    fitted = fit(scaled(eps, built, pieces), pieces, d, ref, ErrorBudget.parse("nmse=1e-4"), None, executor=runs)
    k = len(fitted.sent)
    assert 1 < k < n and fitted.calibration.holds and fitted.validation.holds
    assert fitted.calibration.samples == fitted.validation.samples == 8
    # every piece reduced on the 8 calibration samples; the ranking's two runs and ceil(log2(32)) = 5
    # bisection judgments on 2 of them; the answer on all 8 and on the validation data
    assert [s for _, s in runs.log] == [8, 2, 2, 2, 2, 2, 2, 2, 8, 8]
    assert all(outputs > 1 for outputs, _ in runs.log[1:3]) and all(outputs == 1 for outputs, _ in runs.log[3:])
    assert len(built) <= 1 + 5 + 1
    # the answer is the fewest: with the last piece sent back reduced the subset broke the budget
    order = fitted.progress.order
    one_fewer = frozenset(i for unit in order[:k - 1] for i in unit)
    assert not fitted.progress.judged[(one_fewer, "subset")].holds
    assert fitted.pieces[order[0][0]].startswith("back to fp32: the first 2 calibration samples broke the budget")
    assert f"with the {k - 1} most harmful back; ranked 1 of 32 by the error it adds" in fitted.pieces[order[0][0]]


def test_an_answer_the_validation_data_breaks_moves_the_bound_and_the_bisection_goes_on_there():
    n = 8
    pieces = pieces_of(n)
    d, built = data(), []
    ref = reference(d, pieces.graph)
    # the validation reference is 0.4% low: 4 pieces at +0.2% each hold nmse=1e-4 on the calibration
    # data, only 2 on the validation data
    ref["validation"] = [{"y": o["y"] * np.float32(0.996)} for o in ref["validation"]]
    fitted = fit(scaled((2e-3,) * n, built, pieces), pieces, d, ref, ErrorBudget.parse("nmse=1e-4"), None)
    assert len(fitted.reduced) == 2 and fitted.validation.holds and len(fitted.sent) == 6
    judged = fitted.progress.judged
    order = fitted.progress.order
    back = [frozenset(i for unit in order[:k] for i in unit) for k in range(n + 1)]
    assert judged[(back[4], "calibration")].holds and not judged[(back[4], "validation")].holds  # the first answer
    assert not judged[(back[5], "validation")].holds and judged[(back[6], "validation")].holds  # then bisected there
    assert (back[5], "calibration") not in judged  # the validation data decided
    sent = fitted.pieces[order[0][0]]
    assert sent.startswith("back to fp32: the validation data broke the budget (y: nmse") and "the 5 most harmful" in sent


def test_a_budget_nothing_holds_drops_the_kind_with_every_piece_back_at_fp32():
    d = data()
    fitted = fit(fake_kind([]), PIECES, d, reference(d), ErrorBudget.parse("nmse=1e-14"), None)
    assert fitted.reduced is None and fitted.graph is None
    assert fitted.note == "every piece went back to fp32 to hold the budget"
    assert all(fitted.pieces[i].startswith("back to fp32: the first 2 calibration samples broke the budget (y: nmse")
               for i in range(3))
    ranks = sorted(int(re.search(r"ranked (\d) of 3", fitted.pieces[i])[1]) for i in range(3))
    assert ranks == [1, 2, 3]
    assert "ranked 1 of 3" in fitted.pieces[1]  # the largest error added


def test_a_loose_budget_keeps_every_piece_reduced_after_one_build_judged_on_each_data_set():
    d, built, runs = data(), [], Sessions()
    fitted = fit(fake_kind(built), PIECES, d, reference(d), ErrorBudget.parse("nmse=1"), None, executor=runs)
    assert fitted.reduced == (0, 1, 2) and built == [EPS] and runs.log == [[1, 4], [1, 4]]


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
    rounds = (23 * 4 * 0.15)  # (20 rounds + 3 warm-up) x (fp32 and 3 kinds) x 0.15 s
    assert low * 100.0 < 2 * rounds < high * 100.0
    assert abs(fits_deadline(deadline, 3, 0.15).at - (100.0 - 2 * rounds)) < 1e-9


def test_a_slow_kind_takes_its_share_of_the_time_not_the_next_kinds():
    from gspo.precision.stage import fit_kinds
    from tests.search.fakes import FakeClock

    clock, d = FakeClock(now=0.0), data()

    def slow(reduced):  # every build takes 10 s of the fake clock, and nothing ever holds
        clock.advance(10.0)
        return load_bytes(chain(tuple(0.5 if PIECES.ops[i] <= reduced else 0.0 for i in range(3))))

    kinds = [Kind("slow", "int8", "ort", lambda ops: True, slow), fake_kind([])]
    said = []
    fitted = fit_kinds(kinds, PIECES, (d, reference(d), ErrorBudget.parse("nmse=1e-4")),
                       Deadline.after(40.0, clock), said.append)
    assert fitted[0].reduced is None and fitted[0].note == "every piece went back to fp32 to hold the budget"
    assert said.index("fitting fake") < said.index("fitting slow, on from where its share ended")
    assert fitted[1].reduced == (0, 2) and fitted[1].validation.holds  # fitted in the time the slow one left
    assert clock.now <= 40.0 + 10.0  # the slow kind stopped at its share (one build may run over)


def refusing(graph):
    """An executor that cannot run a graph with more outputs than the model's (the exposed build)."""
    if len(graph.outputs) > 1:
        raise GspoError("no extra outputs here")
    return cpu_executor(graph)


def test_where_the_one_run_ranking_cannot_run_runs_of_neighbours_are_ranked_by_judgments_then_tried_again(monkeypatch):
    import gspo.precision.search as search

    monkeypatch.setattr(search, "MAX_RANKED", 2)  # three pieces, two units: (0,) and (1, 2)
    d, built = data(), []
    budget = ErrorBudget.parse("nmse=1e-4")
    fitted = fit(fake_kind(built), PIECES, d, reference(d), budget, None, executor=refusing)
    assert fitted.reduced == (0,) and fitted.validation.holds and fitted.sent == ((1, 2),)
    assert fitted.pieces[1] == fitted.pieces[2]
    assert fitted.pieces[1].endswith("ranked 1 of 2 by the error of pieces 1-2 alone (the one-run ranking could not "
                                     "run: no extra outputs here)")
    # all three, then each unit alone on the subset (two judgments for three pieces), then piece 0 again (the
    # subset's judgment of it looked up) on all the calibration data and the validation data
    assert built == [EPS, (EPS[0], 0, 0), (0, EPS[1], EPS[2]), (EPS[0], 0, 0)]
    assert fitted.to_refine == (2, 1)  # the least harmful first
    fitted = reduce_again(fitted, PIECES, d, reference(d), budget, None, executor=refusing)
    assert fitted.reduced == (0, 2) and fitted.validation.holds and fitted.calibration.holds
    assert fitted.validation.outputs["y"]["nmse"] <= 1e-4
    assert fitted.pieces[2] == "reduced"  # its error alone is small: reduced again
    assert "reduced again on its own, the calibration data broke the budget (y: nmse" in fitted.pieces[1]
    # piece 2 with piece 0 (held on both); piece 1 with both is every piece reduced: judged first, not again
    assert built[4:] == [(EPS[0], 0, EPS[2])] and fitted.to_refine == ()
    assert fitted.graph is not None and fitted.graph.key == load_bytes(chain((EPS[0], 0, EPS[2]))).key


def test_the_deadline_during_the_second_tries_keeps_what_held(monkeypatch):
    import gspo.precision.search as search

    monkeypatch.setattr(search, "MAX_RANKED", 2)
    d = data()
    budget = ErrorBudget.parse("nmse=1e-4")
    fitted = fit(fake_kind([]), PIECES, d, reference(d), budget, None, executor=refusing)
    fitted = reduce_again(fitted, PIECES, d, reference(d), budget, deadline=Deadline(50.0, clock=lambda: 100.0))
    assert fitted.reduced == (0,) and fitted.validation.holds and fitted.note == ""
    assert fitted.pieces[1] == fitted.pieces[2] and "reduced again" not in fitted.pieces[1]
    assert fitted.to_refine == (2, 1)  # still to try, where a later round has time


def test_trying_a_piece_again_that_a_judgment_already_decided_costs_no_judgment():
    d, built = data(), []
    budget = ErrorBudget.parse("nmse=1e-4")
    fitted = fit(fake_kind(built), PIECES, d, reference(d), budget, None)
    assert fitted.sent == ((1,),) and fitted.to_refine == (1,)
    n = len(built)
    fitted = reduce_again(fitted, PIECES, d, reference(d), budget, None)
    assert len(built) == n and fitted.reduced == (0, 2) and fitted.to_refine == ()
    assert fitted.pieces[1].endswith("; reduced again on its own, the calibration data broke the budget ("
                                     + "; ".join(fitted.progress.judged[(frozenset(), "calibration")].broken) + ")")


def test_a_fit_is_frozen_and_trying_again_returns_a_new_one_leaving_the_one_given_as_it_was():
    d = data()
    budget = ErrorBudget.parse("nmse=1e-4")
    fitted = fit(fake_kind([]), PIECES, d, reference(d), budget, None)
    assert fitted.sent == ((1,),) and fitted.to_refine == (1,)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fitted.note = "changed"
    pieces = dict(fitted.pieces)
    again = reduce_again(fitted, PIECES, d, reference(d), budget, None)
    assert again is not fitted and again.refined == (1,) and "reduced again on its own" in again.pieces[1]
    assert fitted.refined == () and fitted.pieces == pieces and fitted.to_refine == (1,)  # as it was


def test_a_fit_the_deadline_stopped_goes_on_from_where_it_stopped_losing_no_judgment():
    from tests.search.fakes import FakeClock

    n = 8
    eps = tuple(float(e) for e in 10 ** np.random.default_rng(5).uniform(-5, -2, n))
    pieces = pieces_of(n)
    d = data()
    ref, budget = reference(d, pieces.graph), ErrorBudget.parse("nmse=1e-5")
    whole_built, whole_runs = [], Sessions()
    whole = fit(scaled(eps, whole_built, pieces), pieces, d, ref, budget, None, executor=whole_runs)
    clock, built, runs = FakeClock(now=0.0), [], Sessions()
    kind = scaled(eps, built, pieces)

    def slow(reduced):  # every build takes 10 s of the fake clock
        clock.advance(10.0)
        return kind.build(reduced)

    fitted = fit(Kind("fake", "int8", "ort", lambda ops: True, slow), pieces, d, ref, budget,
                 Deadline.after(15.0, clock), executor=runs)
    stops = 0
    while fitted.note == OUT_OF_TIME:  # a share of 15 s at a time: one or two builds each
        stops += 1
        fitted = resume(fitted, pieces, d, ref, budget, Deadline.after(15.0, clock), executor=runs)
    assert stops >= 2 and fitted.note == "" and fitted.reduced == whole.reduced
    assert built == whole_built and runs.log == whole_runs.log  # the same builds and runs as in one go
    assert fitted.progress.judged.keys() == whole.progress.judged.keys()  # each judgment made once, recorded
    assert fitted.pieces == whole.pieces


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

    def slow(reduced):  # every build takes 10 s of the fake clock; the fit needs two
        clock.advance(10.0)
        return base.build(reduced)

    kinds = [Kind("slow", "int8", "ort", lambda ops: True, slow), fake_kind([])]
    fitted = fit_kinds(kinds, PIECES, (d, reference(d), ErrorBudget.parse("nmse=1e-4")),
                       Deadline.after(30.0, clock), said.append, again=lambda n: Deadline.after(200.0, clock))
    assert said[0] == "fitting slow" and said[1].startswith("slow: about 7 judgments")
    assert said[2] == "fitting fake" and said[3].startswith("fake: about 7 judgments")
    assert said[4:] == ["fitting slow, on from where its share ended", "fitting slow piece by piece",
                        "fitting fake piece by piece"]
    assert fitted[0].reduced == (0, 2) and fitted[0].validation.holds and fitted[0].note == ""
    assert "ranked 1 of 3" in fitted[0].pieces[1]
    # the same two builds as a fit in one go: one in the first share (15 s), one after it
    assert built == [EPS, (EPS[0], 0, EPS[2])]
    assert fitted[1].reduced == (0, 2)


def test_the_expected_cost_is_said_before_each_fit_and_kept_for_the_notes():
    import dataclasses

    from gspo.precision.stage import fit_kinds
    from tests.search.fakes import FakeClock

    clock, d, said = FakeClock(now=0.0), data(), []
    kinds = [dataclasses.replace(fake_kind([]), name=name, cost=3.0, sample_s=0.2) for name in ("a", "b")]
    fitted = fit_kinds(kinds, PIECES, (d, reference(d), ErrorBudget.parse("nmse=1e-4")), Deadline.after(100.0, clock),
                       said.append)
    # 3 pieces: 3 judgments on all the data, the ranking's 2 and ceil(log2(3)) = 2 on the subset (2 of 4
    # samples: 3.0 s less two runs of 0.2 s)
    line = ("a: about 7 judgments (3 on all the data, 3.0 s each; 4 on 2 of 4 calibration samples, 2.6 s each, "
            "2 of them ranking the pieces in one run: 19 s) in its 50 s share")
    assert said[:2] == ["fitting a", line] and fitted[0].plan == line
    assert said[3].startswith("b: about 7 judgments") and said[3].endswith("in its 100 s share")


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
