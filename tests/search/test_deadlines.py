"""Time as deadlines: no module of gspo makes an object with ``object.__new__``, and the stages'
deadlines computed from one ``--time-budget`` on a fake clock are the numbers pinned from the
code before its time object was split (the run's plan of shares, its log and build rates)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import gspo
from gspo.search.budget import Shares, Timebox
from gspo.search.report_parts import Skip
from tests.search.fakes import FakeClock


def test_no_module_of_gspo_makes_an_object_with_object_new():
    root = Path(gspo.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Attribute) and node.attr == "__new__" and isinstance(node.value, ast.Name)
                    and node.value.id == "object"):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    assert found == []


def _stages(reduced: bool) -> list:
    """The deadlines ``optimize``'s stages get from a 60 s budget, loading having taken 4 s."""
    clock = FakeClock(100.0)
    b = Timebox.of(60.0, Shares(), clock=clock, started=98.0, reduced=reduced)
    clock.advance(4.0)
    b = b.reserve_final(17.0)
    out = [b.end.at, b.whole.at, b.final_s, b.search_seconds(pieces=5, jobs=2), b.search_share().end.at]
    clock.advance(3.0)
    until = b.until_final()
    verify = until.share(1 - b.shares.placement)
    out += [until.end.at, verify.end.at, b.timing(2.0, 0.5).at, b.timing(100.0, 0.5).at]
    clock.advance(30.0)
    precision = b.precision_share()
    return out + [precision.end.at, precision.final_s, precision.remaining()]


def test_the_stages_deadlines_are_those_the_old_budget_gave_on_a_fake_clock():
    # pinned from the Timebox before the split (the same calls, printed)
    assert _stages(False) == pytest.approx([158.0, 158.0, 17.0, 9.8, 128.5, 141.0, 127.4, 109.0, 132.5, 158.0, 21.0, 21.0])
    assert _stages(True) == pytest.approx([128.0, 158.0, 16.0, 2.8, 111.0, 112.0, 110.0, 109.0, 117.5, 158.0, 21.0, 21.0])


def test_the_skip_log_and_the_build_rates_are_the_runs_shared_by_every_share_of_its_time():
    b = Timebox.of(10.0, clock=FakeClock())
    b.share(0.5).until_final().skip("search", "a piece", "out of time")
    b.precision_share().rates.record("ort", 100, 1.0)
    assert b.run.skipped == [Skip("search", "a piece", "out of time")] and b.log is b.run.skipped
    assert b.rates is b.run.rates and b.rates.estimate("ort", 100) == b.share(0.1).rates.estimate("ort", 100)
