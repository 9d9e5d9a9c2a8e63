"""Output names in ``--max-error``: one holding ',' or '=' is written in double quotes."""

from __future__ import annotations

import numpy as np

from gspo.precision.accuracy import ErrorBudget, Limit
from gspo.precision.spec import quote_output


def test_an_output_named_with_a_comma_or_equals_sign_gets_its_own_limit_in_quotes():
    budget = ErrorBudget.parse('"out,1":nmse=1e-2,nmse=1e-3,"a=b":cosine=0.99')
    assert budget.limits == (Limit("nmse", 1e-2, "out,1"), Limit("nmse", 1e-3), Limit("cosine", 0.99, "a=b"))
    assert ErrorBudget.parse(str(budget)) == budget  # the canonical spec reads back
    assert str(budget) == '"out,1":nmse=0.01,nmse=0.001,"a=b":cosine=0.99'
    budget.check_outputs({"out,1": np.float32, "a=b": np.float32, "plain": np.float32})
    assert [lim.bound for lim in budget.limits_for("out,1", True)] == [1e-2, 1e-3]


def test_quotes_and_backslashes_inside_quotes_are_escaped():
    assert quote_output("logits") == "logits" and quote_output("a:b") == "a:b"  # as before
    name = 'say "hi", \\ there '
    assert quote_output(name) == '"say \\"hi\\", \\\\ there "'
    budget = ErrorBudget.parse(f"{quote_output(name)}:top1=0.9")
    assert budget.limits == (Limit("top1", 0.9, name),) and ErrorBudget.parse(str(budget)) == budget

