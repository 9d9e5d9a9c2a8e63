"""Flow-based graph partition (GSPO Section 3.1).

``partition(graph, threshold=T)`` cuts the graph recursively with balanced minimum vertex cuts,
weighted by how many rule patterns each op can take part in, until every piece has at most
``T`` ops; ``merge_pieces`` stitches (optimized) pieces back.

Example:
    >>> from gspo.zoo import build
    >>> g = build("resnet50", "tiny")
    >>> p = partition(g, threshold=20)
    >>> max(piece.size for piece in p.pieces) <= 20, merge_pieces(g, p.pieces) == g
    (True, True)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from networkx.algorithms.flow import boykov_kolmogorov

from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.ir.dag import dependencies
from gspo.partition.cut import Cut, min_vertex_cut
from gspo.partition.pieces import Piece, make_piece, merge_pieces
from gspo.partition.weights import EPSILON, op_weight, op_weights
from gspo.rules import DEFAULT_RULES, Rule

__all__ = [
    "DEFAULT_THRESHOLD",
    "Cut",
    "EPSILON",
    "Partition",
    "Piece",
    "merge_pieces",
    "min_vertex_cut",
    "op_weight",
    "op_weights",
    "partition",
]

#: Default maximum ops per piece (see the README for the measurement behind it).
DEFAULT_THRESHOLD = 64


@dataclass(frozen=True)
class Partition:
    """Pieces in a topological order, and every cut made to get them."""

    graph: Graph
    pieces: tuple[Piece, ...]
    cuts: tuple[Cut, ...]
    weights: tuple[float, ...]
    threshold: int

    @property
    def cut_ops(self) -> tuple[int, ...]:
        """The ops at the partition's cuts, sorted."""
        return tuple(sorted(v for c in self.cuts for v in c.cut))

    @property
    def cut_weight(self) -> float:
        """Total weight of the cut ops: the substitution opportunities the cuts may lose."""
        return sum(c.value for c in self.cuts)

    @property
    def total_weight(self) -> float:
        """The sum of the pieces' weights."""
        return sum(self.weights)

    def merge(self, replacements: Sequence[Graph] | None = None) -> Graph:
        """The whole graph again, with each piece replaced by its entry of ``replacements`` (when given)."""
        return merge_pieces(self.graph, self.pieces, replacements)


def partition(
    graph: Graph,
    threshold: int = DEFAULT_THRESHOLD,
    balance: float = 0.25,
    rules: Sequence[Rule] = DEFAULT_RULES,
    cut_fn: Callable = boykov_kolmogorov,
) -> Partition:
    """Cut ``graph`` until every piece has at most ``threshold`` ops.

    Args:
        graph: the graph.
        threshold: T, the largest piece allowed (at least 2).
        balance: each cut leaves at least this fraction of the ops on either side.
        rules: the rules whose patterns weigh the ops.
        cut_fn: the networkx flow function that solves each min cut.

    Raises:
        GspoError: ``threshold`` < 2 or ``balance`` outside (0, 0.5].
    """
    if threshold < 2:
        raise GspoError(f"the threshold must be at least 2 ops (got {threshold})")
    if not 0 < balance <= 0.5:
        raise GspoError(f"the balance must be in (0, 0.5] (got {balance})")
    deps = dependencies(graph)
    weights = op_weights(graph, rules)
    cuts: list[Cut] = []
    segments: list[tuple[int, ...]] = []
    stack = [tuple(range(len(graph.nodes)))]
    while stack:
        ops = stack.pop()
        if len(ops) <= threshold:
            segments.append(ops)
            continue
        cut = min_vertex_cut(deps, weights, ops, balance, cut_fn)
        cuts.append(cut)
        stack.append(cut.after)
        stack.append(cut.before)
    pieces = tuple(make_piece(graph, seg, i) for i, seg in enumerate(segments) if seg or len(segments) == 1)
    return Partition(graph, pieces, tuple(cuts), tuple(weights), threshold)
