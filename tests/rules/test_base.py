"""The parts every rule is made of: reasons, patterns and roots."""

from __future__ import annotations

import pytest

from gspo.ir.builder import GraphBuilder
from gspo.rules.base import Fail, Mismatch, OpSet, Rule, need, require


def test_need_passes_a_value_and_raises_a_fail_with_its_own_or_a_given_reason():
    assert need(3) == 3 and need(None) is None
    with pytest.raises(Mismatch) as e:
        need(Fail("no weight", ("conv",)))
    assert e.value.fail == Fail("no weight", ("conv",))
    with pytest.raises(Mismatch) as e:
        need(Fail("no weight"), "the piece is not a Conv's output")
    assert e.value.fail.reason == "the piece is not a Conv's output"


def test_require_raises_only_when_the_condition_fails():
    require(True, "never")
    with pytest.raises(Mismatch, match="strides differ"):
        require(False, "strides differ")


class _Relus(Rule):
    """Test-only rule: matches every elementwise op that reads a Concat."""

    pattern = (OpSet("Relu", ("Relu", "Sigmoid")), "Concat")

    def check(self, graph, site):
        require(site[0].op_type == "Relu", "not a Relu")
        return self._match(site)


def _graph(op):
    b = GraphBuilder()
    x = b.input("x", (1, 4))
    return b.output(b.op(op, [x])).build()


def test_a_pattern_states_its_positions_and_its_root_once():
    rule = _Relus()
    assert list(rule.pattern) == ["Relu", "Concat"]  # what `gspo rules --list` shows
    assert rule.positions() == (frozenset({"Relu", "Sigmoid"}), frozenset({"Concat"}))
    assert rule.root_ops == frozenset({"Relu", "Sigmoid"})


def test_sites_are_the_root_op_nodes_and_failures_carry_the_reason():
    rule = _Relus()
    assert rule.may_match(_graph("Sigmoid")) and not rule.may_match(_graph("Tanh"))
    assert [f.reason for f in rule.match(_graph("Sigmoid"), explain=True)] == ["not a Relu"]
    assert [m.rule for m in rule.match(_graph("Relu"))] == ["_Relus"]
    assert list(rule.match(_graph("Tanh"), explain=True)) == []


def test_a_rule_without_a_pattern_may_match_any_graph():
    class Anything(Rule):
        def sites(self, graph):
            return ((n,) for n in graph.nodes)

    assert Anything().root_ops is None and Anything().may_match(_graph("Tanh"))


def test_broadcasts_within_names_what_grows_the_output_and_what_does_not_broadcast():
    from gspo.rules.base import broadcasts_within

    broadcasts_within((1, 4, 8, 8), (4, 1, 1))
    with pytest.raises(Mismatch, match="bias broadcasts the output to a larger shape"):
        broadcasts_within((1, 4), (3, 4), "bias")
    with pytest.raises(Mismatch, match="shapes do not broadcast"):
        broadcasts_within((1, 4), (3,))


def test_static_values_refuses_an_unknown_shape():
    from gspo.rules.base import static_values

    g = _graph("Relu")
    (x,) = static_values(g, g.inputs[0].name)
    assert x.shape == (1, 4)
    with pytest.raises(Mismatch, match="unknown shapes"):
        static_values(g, "no-such-value")
