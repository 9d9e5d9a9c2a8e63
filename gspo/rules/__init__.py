"""Rewrite rules (JOCG_R): exact substitutions, merges and their inverses.

Each family lives in its own module ending in a ``RULES`` list. The rule sets below are the
table the search and optimize read; adding a rule is adding it to its family's ``RULES`` (and
setting ``greedy = False`` on a rule that undoes another, as splits and moves do).

A rule is three parts (:mod:`gspo.rules.base`): a :class:`~gspo.rules.pattern.Pattern` naming
the nodes :meth:`Rule.match` binds at a site (the root, its producers by input position, the
readers of its outputs), a ``check`` holding the conditions on the bound nodes and returning a
:class:`Match` with everything the rewrite needs, and an ``apply`` that builds the rewrite from
that match alone (``tests/rules/test_rule_shape.py`` holds every rule to it).
"""

from __future__ import annotations

from collections.abc import Sequence

from gspo.ir import Graph
from gspo.rules import canon, combine, cse, enlarge, fold, merge, move, simplify, split
from gspo.rules.base import Fail, Match, Rule

__all__ = [
    "DEFAULT_RULES",
    "GREEDY_RULES",
    "WHOLE_MODEL_RULES",
    "MERGE_RULES",
    "Fail",
    "Match",
    "Rule",
    "apply_greedily",
    "applicable",
    "rule_by_name",
]

#: The families in the order the search tries their rules.
SEARCH_ORDER = (fold, simplify, canon, cse, enlarge, merge, combine, split, move)
#: The families in the order optimize's greedy variants apply their greedy rules.
GREEDY_ORDER = (fold, simplify, canon, cse, enlarge, combine, merge, move)

#: Every rule, in search order.
DEFAULT_RULES: tuple[Rule, ...] = tuple(r for family in SEARCH_ORDER for r in family.RULES)
#: The TASO-like greedy variant every piece also gets verified with: folds, canonical forms, CSE,
#: enlargement and merges applied wherever they match (no splits or moves, which only the search
#: explores, except swapping nested Splits, which only ever removes Splits).
GREEDY_RULES: tuple[Rule, ...] = tuple(r for family in GREEDY_ORDER for r in family.RULES if r.greedy)
#: The same over the whole model, batching first: merges across pieces (an unrolled RNN's input
#: projections sit in different pieces, one per step) need the whole graph, and batching them
#: must come before the per-step merges that would use up their MatMuls.
WHOLE_MODEL_RULES: tuple[Rule, ...] = (merge.BatchSharedWeightMatMuls(), *GREEDY_RULES)
#: The rules that merge operators (what ``gspo rules`` counts as merge sites).
MERGE_RULES: tuple[Rule, ...] = tuple(r for r in DEFAULT_RULES if r.merges)


def rule_by_name(name: str) -> Rule:
    """The default rule called ``name`` (a KeyError when there is none)."""
    for r in DEFAULT_RULES:
        if r.name == name:
            return r
    raise KeyError(name)


def applicable(rules: Sequence[Rule], graph: Graph) -> list[Rule]:
    """The rules of ``rules``, in their order, whose root op occurs in ``graph`` (a graph
    without Concats is not searched for Concat patterns)."""
    return [r for r in rules if r.may_match(graph)]


def apply_greedily(graph: Graph, rules: Sequence[Rule], max_steps: int = 100_000) -> tuple[Graph, dict[str, int]]:
    """Apply every match of each rule in turn, rule after rule, until none matches.

    Only for rule sets that cannot undo each other (e.g. folds and merges, not splits): the
    search (``gspo.search``) is what explores rules in both directions.

    Returns:
        The rewritten graph and how often each rule applied.
    """
    counts: dict[str, int] = {}
    steps = 0
    changed = True
    while changed:
        changed = False
        for rule in rules:
            if not rule.may_match(graph):
                continue
            for m in list(rule.match(graph)):
                present = {n.key for n in graph.nodes}
                if not all(n.key in present for n in m.site):
                    continue
                again = rule.match_site(graph, m.site)
                if not isinstance(again, Match):
                    continue
                graph = rule.apply(graph, again)
                counts[rule.name] = counts.get(rule.name, 0) + 1
                changed = True
                steps += 1
                if steps >= max_steps:
                    raise RuntimeError(f"rules still matched after {max_steps} steps")
    return graph, counts
