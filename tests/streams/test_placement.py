"""Placements cut a stream's runs of ops where the backend changes; OpenVINO's f32 and bf16 ops,
neighbours, stay in one run."""

from __future__ import annotations

from gspo.streams.placement import Placement, kept_f32, split_runs

RUN = [(0, ("a", "b", "c", "d", "e"))]


def test_a_run_is_cut_where_the_backend_changes():
    placement = Placement.of({"b": "openvino", "c": "openvino", "e": "openvino"})
    assert split_runs(RUN, placement) == [(0, ("a",), "ort"), (0, ("b", "c"), "openvino"), (0, ("d",), "ort"),
                                          (0, ("e",), "openvino")]
    assert split_runs(RUN, None) == [(0, RUN[0][1], "ort")]


def test_openvinos_f32_and_bf16_neighbours_are_one_run_at_bf16_with_the_f32_ops_named():
    placement = Placement.of({"a": "openvino", "b": "openvino:bf16", "c": "openvino", "e": "openvino:bf16"})
    runs = split_runs(RUN, placement)
    assert runs == [(0, ("a", "b", "c"), "openvino:bf16"), (0, ("d",), "ort"), (0, ("e",), "openvino:bf16")]
    assert kept_f32(runs[0][1], runs[0][2], placement) == ("a", "c")
    assert kept_f32(runs[2][1], runs[2][2], placement) == ()


def test_a_run_all_at_f32_stays_at_f32_and_keeps_nothing():
    placement = Placement.of({op: "openvino" for op in "abcde"})
    assert split_runs(RUN, placement) == [(0, RUN[0][1], "openvino")]
    assert kept_f32(RUN[0][1], "openvino", placement) == ()


def test_each_stream_is_cut_on_its_own():
    placement = Placement.of({"a": "openvino:bf16", "x": "openvino"})
    runs = split_runs([(0, ("a",)), (1, ("x", "y"))], placement)
    assert runs == [(0, ("a",), "openvino:bf16"), (1, ("x",), "openvino"), (1, ("y",), "ort")]
