"""A standalone graph made of some of a graph's nodes (used by partition and by the runtime)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gspo.ir.graph import Graph, ModelExtras

__all__ = ["extract"]


def extract(graph: Graph, ops: Sequence[int], name: str | None = None, also_export: Iterable[str] = (),
            copies: Iterable[int] = ()) -> tuple[Graph, tuple[str, ...]]:
    """The nodes at ``ops`` as a graph, and the names of its *virtual* inputs.

    Its inputs are the original graph inputs it reads, then the values other nodes produce
    (virtual inputs, shape and dtype kept); its outputs are the values it produces that other
    nodes read or that are graph outputs (plus ``also_export``). ``copies`` are nodes computed
    again inside the piece (constants it reads) whose outputs it never exports.
    """
    copied = set(copies) - set(ops)
    chosen = sorted(set(ops) | copied)
    mine = set(chosen)
    nodes = [graph.nodes[i] for i in chosen]
    produced = {v.name for n in nodes for v in n.outputs if v.name}
    graph_inputs = {v.name for v in graph.inputs}
    read: dict[str, None] = {}
    for n in nodes:
        for value in n.reads():
            if value not in produced:
                read.setdefault(value)
    virtual = tuple(v for v in read if v not in graph_inputs and v not in graph.weights)
    inputs = [v for v in graph.inputs if v.name in read] + [graph.values[v] for v in virtual]
    outside: set[str] = set(graph.output_names()) | set(also_export)
    for i, n in enumerate(graph.nodes):
        if i not in mine:
            outside.update(n.reads())
    outputs = [v for i, n in zip(chosen, nodes) if i not in copied for v in n.outputs if v.name and v.name in outside]
    sub = Graph(
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        nodes=tuple(nodes),
        weights={w: graph.weights[w] for w in read if w in graph.weights},
        opsets=graph.opsets,
        name=name or graph.name,
        store=graph.store,
        extras=_piece_extras(graph.extras),
        retired_weights=graph.retired_weights,
    )
    return sub, virtual


def _piece_extras(extras: ModelExtras) -> ModelExtras:
    """What a piece keeps of its graph's extras: the IR version and, when onnxruntime refuses
    the graph with its inputs pinned, the inputs and outputs as declared (a piece holding its
    control flow is refused alike)."""
    if not extras.static_refused:
        return ModelExtras(ir_version=extras.ir_version)
    return ModelExtras(ir_version=extras.ir_version, dynamic_io=extras.dynamic_io, static_refused=extras.static_refused)
