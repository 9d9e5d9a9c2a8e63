"""The whole model on the streams its pieces chose (gspo/search/joint.py)."""

from __future__ import annotations

from gspo.partition import partition
from gspo.search.candidate import Candidate
from gspo.search.joint import joint_option, joint_schedule
from gspo.streams import Schedule, assign_streams, check_schedule
from gspo.zoo import build
from tests.helpers import branchy


def test_a_piece_on_streams_gives_the_whole_model_its_streams_and_events():
    g = branchy()
    piece = assign_streams(g, max_streams=2)
    s = joint_schedule(g, [piece])
    check_schedule(g, s)
    assert s.stream_of() == piece.stream_of() and s.events


def test_pieces_on_one_stream_give_no_joint_option():
    g = branchy()
    assert joint_schedule(g, [None]) is None
    assert joint_schedule(g, [Schedule.single(g)]) is None
    assert joint_option(g, [Candidate(g, label="unmodified")], (), lambda g, s: 0.0) == []


def test_several_pieces_reuse_the_streams_one_after_another():
    g = build("nasnet_mobile", "tiny")
    parts = partition(g, 24)
    assert len(parts.pieces) > 2
    schedules = [assign_streams(p.graph, max_streams=2) for p in parts.pieces]
    merged = parts.merge([p.graph for p in parts.pieces])
    s = joint_schedule(merged, schedules)
    check_schedule(merged, s)
    assert s.num_streams == 2
    want = {op: k for sch in schedules for op, k in sch.stream_of().items()}
    assert s.stream_of() == want  # every op on the stream its piece gave it
    [option] = joint_option(merged, [Candidate(p.graph, sch, label="c") for p, sch in zip(parts.pieces, schedules)], ("R",),
                            lambda g, sch: 1.0)
    assert option.label == "optimized+joint" and option.schedule == s and option.estimate == 1.0
