from __future__ import annotations

import pytest

from gspo.runtime import interleaved


def test_interleaved_rotates_order_and_counts_runs():
    calls = []
    runners = [(name, lambda name=name: calls.append(name)) for name in "ABC"]
    timings = interleaved(runners, runs=3, warmup=1)
    assert calls[:3] == ["A", "B", "C"]  # warm-up
    assert calls[3:] == ["A", "B", "C", "B", "C", "A", "C", "A", "B"]
    assert [t.label for t in timings] == ["A", "B", "C"] and all(len(t.seconds) == 3 for t in timings)
    assert timings[0].ratio_to(timings[0]) == 1.0


def test_interleaved_rejects_bad_counts():
    with pytest.raises(ValueError):
        interleaved([("A", lambda: None)], runs=0)
