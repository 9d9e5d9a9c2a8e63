"""Common subexpressions: two identical deterministic nodes on the same inputs become one."""

from __future__ import annotations

from gspo.rules.base import Rule, can_rewire, need, require
from gspo.rules.edit import Edit
from gspo.rules.pattern import Pattern, SiteNode

__all__ = ["MergeDuplicates", "RULES"]

_RANDOM = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial", "Dropout"}


class MergeDuplicates(Rule):
    """``f(x), f(x)`` -> ``f(x)`` once (identical op, attributes and inputs; not random ops)."""

    pattern = Pattern(SiteNode("keep", None, 0), SiteNode("dup", None, 1))

    def sites(self, graph):
        """Each node with an identical earlier one: (that earlier node, the node)."""
        first: dict[tuple, object] = {}
        for n in graph.nodes:
            if n.is_opaque or n.op_type in _RANDOM:
                continue
            sig = (n.op_type, n.domain, n.inputs, n.attrs, len(n.outputs))
            if sig in first:
                yield (first[sig], n)
            else:
                first[sig] = n

    def check(self, graph, site):
        keep, dup = site["keep"], site["dup"]
        for v in dup.outputs:
            if v.name:
                need(can_rewire(graph, v.name))
        skipped = any(a.name and not b.name for a, b in zip(dup.outputs, keep.outputs))
        require(not skipped, "an output the duplicate has is skipped by the original")
        return self._match([keep, dup])

    def apply(self, graph, match):
        keep, dup = match.nodes
        e = Edit(graph).drop(dup)
        e.rewire_all({mine.name: theirs.name for mine, theirs in zip(dup.outputs, keep.outputs) if mine.name})
        return e.commit()


RULES = [MergeDuplicates()]
