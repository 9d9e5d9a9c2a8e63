"""One way to reduce precision, a kind of the precision fit (:mod:`gspo.precision.variants` makes
the CPU's, :mod:`gspo.precision.floats` the torch runtime's)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from gspo.ir import Graph

__all__ = ["Kind"]


@dataclass(frozen=True)
class Kind:
    """One way to reduce precision: its name, the precision, the backend it runs on, which pieces
    it can touch (``touches(ops)``), how it builds a graph from the set of reduced pieces'
    node ids (``build(reduced_node_ids)``), and the precision of the pieces it leaves
    (``rest``: fp32, or bf16 where the whole model runs at bf16 under the reduced pieces), and
    what one judgment of it is estimated to cost (``cost``, seconds; ``sample_s`` of them one
    sample's run), with what its first build does once (``first``, ``once``)."""

    name: str
    precision: str
    backend: str
    touches: Callable[[Collection[str]], bool]
    build: Callable[[frozenset[str]], Graph]
    rest: str = "fp32"
    #: Seconds one judgment of it (a build, its session, a run of the data) is estimated to
    #: take: a fit starts no judgment its deadline cannot hold (0: only a passed deadline stops it).
    cost: float = 0.0
    #: What its first build does once, for every later one to reuse: "" (nothing), "quantize"
    #: (onnxruntime's static quantization of the whole model), "nncf" (NNCF's quantization).
    first: str = ""
    #: Seconds that work is estimated to take, on top of the first judgment's :attr:`cost`.
    once: float = 0.0
    #: Seconds of ``cost`` one sample's run takes (a judgment on fewer samples costs less; 0:
    #: unknown, every judgment costs ``cost``).
    sample_s: float = 0.0
