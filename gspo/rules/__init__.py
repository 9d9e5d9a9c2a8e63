"""Rewrite rules (JOCG_R): exact substitutions, merges and their inverses.

Each family lives in its own module ending in a ``RULES`` list; ``DEFAULT_RULES`` collects them.
``MERGE_RULES`` are the ones that merge operators (what ``gspo rules`` counts as merge sites).
"""

from __future__ import annotations

from collections.abc import Sequence

from gspo.ir import Graph
from gspo.rules import canon, combine, cse, enlarge, fold, merge, move, split
from gspo.rules.base import Fail, Match, Rule

__all__ = ["DEFAULT_RULES", "MERGE_RULES", "Fail", "Match", "Rule", "apply_greedily", "rule_by_name"]

DEFAULT_RULES: tuple[Rule, ...] = tuple(
    fold.RULES + canon.RULES + cse.RULES + enlarge.RULES + merge.RULES + combine.RULES + split.RULES + move.RULES
)
MERGE_RULES: tuple[Rule, ...] = tuple(r for r in DEFAULT_RULES if r.merges)


def rule_by_name(name: str) -> Rule:
    for r in DEFAULT_RULES:
        if r.name == name:
            return r
    raise KeyError(name)


def apply_greedily(graph: Graph, rules: Sequence[Rule], max_steps: int = 100_000) -> tuple[Graph, dict[str, int]]:
    """Apply the first match of the first rule that matches, until none does.

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
            for m in list(rule.match(graph)):
                present = {n.key for n in graph.nodes}
                if not all(n.key in present for n in m.site):
                    continue
                again = rule.check(graph, m.site)
                if not isinstance(again, Match):
                    continue
                graph = rule.apply(graph, again)
                counts[rule.name] = counts.get(rule.name, 0) + 1
                changed = True
                steps += 1
                if steps >= max_steps:
                    raise RuntimeError(f"rules still matched after {max_steps} steps")
    return graph, counts

