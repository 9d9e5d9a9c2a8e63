"""The rule table: which rules the search, the greedy variants and the whole model get, in order."""

from __future__ import annotations

from gspo.ir.builder import GraphBuilder
from gspo.rules import (
    DEFAULT_RULES,
    GREEDY_RULES,
    MERGE_RULES,
    WHOLE_MODEL_RULES,
    applicable,
    apply_greedily,
    move,
    rule_by_name,
    split,
)
from gspo.rules.base import Rule
from gspo.rules.edit import Edit


def test_every_rule_is_in_the_table_once_under_its_own_name():
    names = [r.name for r in DEFAULT_RULES]
    assert len(names) == len(set(names))
    assert all(rule_by_name(n).name == n for n in names)


def test_greedy_rules_never_include_the_rules_only_the_search_explores():
    greedy = {r.name for r in GREEDY_RULES}
    assert not greedy & {r.name for r in split.RULES}
    assert greedy & {r.name for r in move.RULES} == {"SwapNestedSplits"}
    assert set(MERGE_RULES) <= set(DEFAULT_RULES) and all(r.merges for r in MERGE_RULES)


def test_the_whole_model_batches_shared_weight_matmuls_first():
    assert WHOLE_MODEL_RULES[0].name == "BatchSharedWeightMatMuls"
    assert [r.name for r in WHOLE_MODEL_RULES[1:]] == [r.name for r in GREEDY_RULES]


def test_applicable_keeps_the_order_and_drops_rules_whose_root_op_is_absent():
    b = GraphBuilder()
    x = b.input("x", (1, 4, 8, 8))
    y = b.op("Relu", [b.op("Conv", [x, b.weight("w", (4, 4, 1, 1))], kernel_shape=[1, 1])])
    g = b.output(y).build()
    found = applicable(DEFAULT_RULES, g)
    assert [r for r in DEFAULT_RULES if r in found] == found
    names = {r.name for r in found}
    assert {"SplitConv", "FoldPadIntoConv", "MergeDuplicates", "PushThroughConcat"} <= names
    assert not names & {"FoldBatchNorm", "CanonicalGelu", "MergeBinaryOfSplits", "SplitMatMul"}


class _Replace(Rule):
    """Test-only rule: replaces every ``source`` op by a ``target`` op, noting each rewrite."""

    def __init__(self, source, target, log):
        self.pattern, self.target, self.log = (source,), target, log

    def check(self, graph, site):
        return self._match(site)

    def apply(self, graph, match):
        node = match.nodes[0]
        self.log.append(f"{node.op_type}->{self.target}")
        e = Edit(graph).drop(node)
        e.node(self.target, node.inputs, outputs=[node.outputs[0].name], like=node)
        return e.commit()


def test_greedy_application_tries_a_rule_whose_root_op_an_earlier_rewrite_created_in_the_same_pass():
    b = GraphBuilder()
    x = b.input("x", (1, 4))
    g = b.output(b.op("Relu", [x]), b.op("Exp", [x])).build()
    log: list[str] = []
    rules = [_Replace("Relu", "Sigmoid", log), _Replace("Sigmoid", "Tanh", log), _Replace("Exp", "Neg", log)]
    out, counts = apply_greedily(g, rules)
    assert log == ["Relu->Sigmoid", "Sigmoid->Tanh", "Exp->Neg"]
    assert sorted(n.op_type for n in out.nodes) == ["Neg", "Tanh"]
