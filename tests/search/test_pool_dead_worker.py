"""A search process that dies (``kill -9``, the out-of-memory killer) or hangs does not hang the
pool: its piece is kept as given, with the reason, and the other pieces keep their searches."""

from __future__ import annotations

import itertools
import os
import signal
import time

import pytest

from gspo.costmodel import CostModel, load_profile
from gspo.partition import partition
from gspo.search.backtrack import search
from gspo.search.config import OptimizeConfig
from gspo.search.driver import resolved
from gspo.search.pool import search_pieces
from gspo.timing import Deadline
from gspo.zoo import build


@pytest.fixture(autouse=True)
def _guard():
    """A hang fails the test (SIGALRM interrupts the wait) instead of hanging the suite."""
    def expired(*_):
        raise TimeoutError("search_pieces hung")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(60)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _pieces():
    g = build("nasrnn", "tiny")
    parts = partition(g, 24)
    assert len(parts.pieces) >= 3
    return parts.pieces


def _cost_fn():
    model = CostModel(load_profile("cpu", force=True))
    return lambda g, s: model.cost(g, s)


def _cfg():
    return resolved(OptimizeConfig.of(budget=2, jobs=2, time_budget=None, backends=("ort",)), cores=2)


def _dies_on(victim, how):
    """A search that ``how``s its own process on the graph ``victim`` (the forked process holds
    the same objects) and searches the others as usual."""
    def searching(graph, cost_fn, cfg, deadline=None):
        if graph is victim:
            how()
        return search(graph, cost_fn, cfg, deadline=deadline)
    return searching


def test_a_search_process_killed_with_sigkill_keeps_its_piece_as_given_and_says_why():
    pieces = _pieces()
    victim = 1
    found = search_pieces(pieces, _cost_fn(), _cfg(), None, None,
                          search_fn=_dies_on(pieces[victim].graph, lambda: os.kill(os.getpid(), signal.SIGKILL)))
    assert [r.index for r in found] == list(range(len(pieces)))
    lost = found[victim]
    assert lost.lost and "SIGKILL" in lost.lost
    assert len(lost.found) == 1  # the piece as given, nothing else
    assert lost.candidates(pieces[victim].graph)[0].graph.key == pieces[victim].graph.key
    assert any("SIGKILL" in why for why, _ in lost.invalid_reasons)  # what the report shows for the piece
    assert all(r.lost is None for k, r in enumerate(found) if k != victim)


def test_a_search_process_that_hangs_past_the_deadline_is_ended_and_its_piece_kept():
    """On a clock that runs 10 s a look, the hung search is past its deadline and the grace at
    once (the guard's alarm fails the test if it is never ended)."""
    pieces = _pieces()
    clock = itertools.count(0.0, 10.0).__next__
    found = search_pieces(pieces, _cost_fn(), _cfg(), 1.0, None, deadline=Deadline.after(1.0, clock),
                          search_fn=_dies_on(pieces[0].graph, lambda: time.sleep(600)))
    assert found[0].lost and "past its time" in found[0].lost
    assert len(found[0].found) == 1


def test_an_error_in_a_search_process_is_raised_in_the_caller():
    pieces = _pieces()

    def broken():
        raise ValueError("the search broke")

    with pytest.raises(ValueError, match="the search broke"):
        search_pieces(pieces, _cost_fn(), _cfg(), None, None, search_fn=_dies_on(pieces[0].graph, broken))
