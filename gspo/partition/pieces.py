"""Pieces of a partitioned graph as standalone graphs, and the exact merge back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gspo.errors import GspoError
from gspo.ir import Graph, toposort
from gspo.ir.subgraph import extract

__all__ = ["Piece", "make_piece", "merge_pieces"]


@dataclass(frozen=True)
class Piece:
    """A standalone graph cut out of a larger one.

    Attributes:
        graph: the piece; its inputs are the original graph inputs it reads followed by its
            *virtual inputs*, values produced by earlier pieces (shape and dtype kept). Its
            outputs are the values later pieces read, and original graph outputs.
        ops: indices of its nodes in the original graph.
        virtual_inputs: names of the values that come from earlier pieces.
    """

    graph: Graph
    ops: tuple[int, ...]
    virtual_inputs: tuple[str, ...]

    @property
    def size(self) -> int:
        """Number of ops in the piece."""
        return len(self.ops)


def make_piece(graph: Graph, ops: Sequence[int], index: int = 0) -> Piece:
    """The piece of ``graph`` made of the nodes at ``ops`` (in graph order)."""
    sub, virtual = extract(graph, ops, name=f"{graph.name}/piece{index}")
    return Piece(sub, tuple(sorted(ops)), virtual)


def _interface(g: Graph) -> tuple:
    return (tuple((v.name, v.dtype, v.shape) for v in g.inputs), tuple((v.name, v.dtype, v.shape) for v in g.outputs))


def merge_pieces(original: Graph, pieces: Sequence[Piece], replacements: Sequence[Graph] | None = None) -> Graph:
    """Stitch (optimized) pieces back into one graph.

    Args:
        original: the graph that was partitioned (gives inputs, outputs, model fields).
        pieces: its pieces.
        replacements: a graph per piece with the same inputs and outputs (default: the pieces).

    Raises:
        GspoError: a replacement changed its piece's inputs or outputs.
    """
    graphs = list(replacements) if replacements is not None else [p.graph for p in pieces]
    if len(graphs) != len(pieces):
        raise GspoError("one replacement per piece is needed")
    used = {name for n in original.nodes for name in n.reads()}
    weights = {name: w for name, w in original.weights.items() if name not in used}
    retired = dict(original.retired_weights)
    nodes, seen = [], set()
    for piece, g in zip(pieces, graphs):
        if _interface(g) != _interface(piece.graph):
            raise GspoError(f"{piece.graph.name}: the optimized piece changed its inputs or outputs")
        weights.update(g.weights)
        retired.update(g.retired_weights)
        for n in g.nodes:
            if n.key not in seen:
                seen.add(n.key)
                nodes.append(n)
    merged = Graph(
        inputs=original.inputs,
        outputs=original.outputs,
        nodes=tuple(toposort(nodes)),
        weights=weights,
        opsets=original.opsets,
        name=original.name,
        store=original.store,
        extras=original.extras,
        retired_weights=retired,
    )
    return merged.check()
