"""Op weights W(O): how many ways an op maps onto an op of a rule's source pattern (GSPO 3.1)."""

from __future__ import annotations

from collections.abc import Sequence

from gspo.ir import Graph, Node
from gspo.rules import DEFAULT_RULES, Rule

__all__ = ["op_weight", "op_weights", "EPSILON"]

#: Weight of an op no rule can touch: cutting there loses (almost) nothing, but a cut of only
#: such ops still has a positive weight, so the fewest of them are cut.
EPSILON = 1e-3


def op_weight(node: Node, rules: Sequence[Rule] = DEFAULT_RULES) -> float:
    """Number of (rule, pattern position) pairs whose op types include ``node``'s op type."""
    if node.is_opaque:
        return EPSILON
    count = sum(1 for r in rules for ops in r.positions() if node.op_type in ops)
    return float(count) if count else EPSILON


def op_weights(graph: Graph, rules: Sequence[Rule] = DEFAULT_RULES) -> list[float]:
    """W(O) for every node of ``graph``, in node order."""
    cache: dict[str, float] = {}
    out = []
    for n in graph.nodes:
        key = "<opaque>" if n.is_opaque else n.op_type
        if key not in cache:
            cache[key] = op_weight(n, rules)
        out.append(cache[key])
    return out
