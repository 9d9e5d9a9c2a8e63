"""A model's own metadata entries (``ModelProto.metadata_props``), read and replaced on a graph.

The graph keeps them in :attr:`~gspo.ir.ModelExtras.metadata` and writes them back on save, so a
setting stored here travels with the model file (the schedule and the placement have keys of
their own, see :mod:`gspo.ir.onnx_io`).
"""

from __future__ import annotations

import dataclasses

from gspo.ir.graph import Graph

__all__ = ["metadata_value", "with_metadata"]


def metadata_value(graph: Graph, key: str) -> str | None:
    """The value of the model's metadata entry ``key`` (``None``: no such entry)."""
    return next((v for k, v in graph.extras.metadata if k == key), None)


def with_metadata(graph: Graph, key: str, value: str | None) -> Graph:
    """``graph`` with its metadata entry ``key`` set to ``value`` (``None``: removed); the
    other entries keep their order."""
    kept = tuple((k, v) for k, v in graph.extras.metadata if k != key)
    entries = kept if value is None else (*kept, (key, value))
    if entries == graph.extras.metadata:
        return graph
    return dataclasses.replace(graph, extras=dataclasses.replace(graph.extras, metadata=entries))
