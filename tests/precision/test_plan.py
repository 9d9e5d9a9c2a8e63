"""A precision fit's expected cost: stated up front, shaped to the share."""

from __future__ import annotations

import doctest
from types import SimpleNamespace

from gspo.precision import plan as plan_module
from gspo.precision.plan import Plan, plan, subset_size
from gspo.timing.deadline import Deadline
from tests.search.fakes import FakeClock


def test_the_examples_in_the_docstrings_hold():
    assert doctest.testmod(plan_module).failed == 0


def test_the_subset_is_two_samples_or_a_quarter_never_more_than_there_are():
    assert [subset_size(n) for n in (1, 2, 8, 9, 64)] == [1, 2, 2, 2, 16]


def test_the_judgments_grow_with_the_log_of_the_pieces():
    judgments = [Plan("k", units, 8, 8, 1.0, 0.1, None).judgments for units in (1, 2, 16, 100, 1000)]
    assert judgments == [2, 6, 9, 12, 15]  # 3 on all the data, 2 ranking, ceil(log2(n)) bisecting


def test_a_share_too_short_for_the_estimate_cuts_the_subset_to_one_sample_and_says_so():
    kind = SimpleNamespace(name="int8 on onnxruntime", cost=3.0, sample_s=0.2)
    clock = FakeClock(now=0.0)
    roomy = plan(kind, 100, 8, 8, Deadline.after(60.0, clock))
    assert roomy.subset == 2 and not roomy.shrunk and "more than" not in roomy.line()
    tight = plan(kind, 100, 8, 8, Deadline.after(20.0, clock))
    assert tight.subset == 1 and tight.shrunk and tight.seconds < roomy.seconds
    assert tight.line().endswith("in its 20 s share; the subset cut to 1 sample to fit the share; more than the share "
                                 "holds: what it leaves goes on in the second round")
    assert plan(kind, 100, 8, 8, None).line().endswith("with no time limit")
    unknown = SimpleNamespace(name="k", cost=3.0, sample_s=0.0)  # no run time known: the subset is no cheaper
    assert plan(unknown, 100, 8, 8, Deadline.after(1.0, clock)).subset == 2


def test_a_judgment_on_all_the_samples_is_said_once_where_the_subset_is_all_of_them():
    assert Plan("k", 5, 2, 2, 1.5, 0.1, 30.0).line() == "k: about 8 judgments of 1.5 s (12 s) in its 30 s share"
