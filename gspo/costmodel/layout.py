"""onnxruntime's blocked (NCHWc) layout on the CPU, and the reorders it costs.

On x86, onnxruntime runs 2-D convolutions and pooling in a blocked layout (channels in blocks of
8 with AVX2, 16 with AVX-512) and inserts a ``ReorderInput`` where a tensor enters a blocked region
and a ``ReorderOutput`` where one leaves it. A convolution measured alone pays both (its input
comes from outside, its output leaves the graph); inside a chain of convolutions only the region's
ends pay. On this machine a reorder took 20-200 us (ad hoc, onnxruntime's profiler), up to 40% of
a small convolution measured alone, so a single-op cost carries a reorder share that a piece may or
may not pay: the cost model adds ``reorder_cost x reorder_delta(graph)`` (the reorders the graph
makes minus those its ops made when measured alone; usually negative).

:func:`count_reorders` mimics onnxruntime's placement (checked against the optimized models
onnxruntime writes, see the tests; 197 of 200 zoo pieces counted exactly):

- every 2-D ``Conv`` runs blocked; its input needs a ``ReorderInput`` unless it has fewer channels
  than a block (and one group), when the blocked kernel reads the plain layout directly;
- ``MaxPool``/``AveragePool`` run blocked when their channels fill whole blocks; global pooling
  only when its input is already blocked or is a graph input;
- activations, ``BatchNormalization``, ``Dropout``/``Identity`` keep a blocked input blocked;
  ``Add``/``Sum``/``Mul`` of blocked tensors of one shape, and a channel ``Concat`` of blocked
  tensors whose channels fill whole blocks, stay blocked;
- any other reader of a blocked tensor, and a blocked graph output, needs a ``ReorderOutput``
  (one per tensor, however many readers).
"""

from __future__ import annotations

from collections.abc import Iterable

from gspo.ir import Graph

__all__ = ["count_reorders", "own_reorders", "reorder_delta"]

_ACTIVATIONS = frozenset({"Relu", "Sigmoid", "Tanh", "Clip", "LeakyRelu", "HardSigmoid"})
_POOLS = frozenset({"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"})
_BINARY = frozenset({"Add", "Sum", "Mul"})
_PASS = frozenset({"Dropout", "Identity"})
#: Ops that run blocked when measured alone (the ones a single-op cost includes reorders for).
BLOCKED_OPS = frozenset({"Conv"}) | _POOLS


def _channels(graph: Graph, name: str) -> int | None:
    v = graph.values.get(name)
    if v is None or v.shape is None or len(v.shape) != 4 or not isinstance(v.shape[1], int):
        return None
    return v.shape[1]


def _is_4d(graph: Graph, name: str) -> bool:
    v = graph.values.get(name)
    return v is not None and v.shape is not None and len(v.shape) == 4


def _conv_reads_plain(graph: Graph, node, block: int) -> bool:
    """A convolution whose input has fewer channels than a block (one group) reads it unblocked."""
    c = _channels(graph, node.inputs[0])
    return c is not None and c < block and int(node.attr("group", 1)) == 1


def _pool_fills_blocks(graph: Graph, name: str, block: int) -> bool:
    c = _channels(graph, name)
    return c is not None and c % block == 0


def count_reorders(graph: Graph, block: int, nodes: Iterable[int] | None = None) -> int:
    """Reorders onnxruntime makes running ``nodes`` (indices into ``graph``, default all) as one
    session: tensors from outside the set are plain inputs, tensors read outside it (or graph
    outputs) are outputs. 0 when ``block`` is 0 (no blocked layout on the device)."""
    if block <= 0:
        return 0
    index = range(len(graph.nodes)) if nodes is None else sorted(nodes)
    inside = set(index)
    produced = {v.name for i in index for v in graph.nodes[i].outputs}
    blocked: set[str] = set()
    to_blocked: set[str] = set()
    to_plain: set[str] = set()

    def need_blocked(name: str) -> None:
        if name not in blocked:
            to_blocked.add(name)

    def need_plain(name: str) -> None:
        if name in blocked:
            to_plain.add(name)

    for i in index:
        node = graph.nodes[i]
        ins = [n for n in node.inputs if n and n not in graph.weights]
        out = node.outputs[0].name if node.outputs else None
        op = node.op_type
        four = out is not None and _is_4d(graph, out)
        if op == "Conv" and four and ins and not node.is_opaque:
            if _conv_reads_plain(graph, node, block):
                need_plain(ins[0])
            else:
                need_blocked(ins[0])
            for n in ins[1:]:
                need_plain(n)
            blocked.add(out)
        elif op in _PASS and ins:
            if ins[0] in blocked:
                blocked.add(out)
        elif (op in _POOLS and four and ins and _pool_fills_blocks(graph, ins[0], block)
              and (not op.startswith("Global") or ins[0] in blocked or ins[0] not in produced)):
            need_blocked(ins[0])
            blocked.add(out)
        elif op in _ACTIVATIONS and ins and ins[0] in blocked:
            blocked.add(out)
        elif op == "BatchNormalization" and ins and ins[0] in blocked:
            blocked.add(out)
        elif (op in _BINARY and four and ins and all(n in blocked for n in ins)
              and len({getattr(graph.values.get(n), "shape", None) for n in ins}) == 1):
            blocked.add(out)
        elif (op == "Concat" and four and ins and int(node.attr("axis", 0)) in (1, -3)
              and all(n in blocked and (_channels(graph, n) or 1) % block == 0 for n in ins)):
            blocked.add(out)
        else:
            for n in ins:
                need_plain(n)
    return len(to_blocked) + len(to_plain | _leaving(graph, blocked, inside))


def _leaving(graph: Graph, blocked: set[str], inside: set[int]) -> set[str]:
    """The blocked tensors read outside ``inside`` (node indices) or that are graph outputs."""
    outputs = set(graph.output_names())
    inside_ids = {id(graph.nodes[i]) for i in inside}
    return {name for name in blocked
            if name in outputs or any(id(n) not in inside_ids for n in graph.consumers.get(name, ()))}


def own_reorders(graph: Graph, node, block: int) -> int:
    """Reorders ``node`` makes measured alone (its inputs graph inputs, its output the graph's)."""
    if block <= 0 or node.op_type not in BLOCKED_OPS or node.is_opaque or not node.outputs:
        return 0
    ins = [n for n in node.inputs if n and n not in graph.weights]
    if not ins or not _is_4d(graph, node.outputs[0].name):
        return 0
    if node.op_type == "Conv":
        return 1 if _conv_reads_plain(graph, node, block) else 2
    return 2 if _pool_fills_blocks(graph, ins[0], block) else 0


def reorder_delta(graph: Graph, block: int, nodes: Iterable[int] | None = None) -> int:
    """Reorders of ``nodes`` run together minus those of each op measured alone."""
    if block <= 0:
        return 0
    index = range(len(graph.nodes)) if nodes is None else list(nodes)
    own = sum(own_reorders(graph, graph.nodes[i], block) for i in index)
    return count_reorders(graph, block, index) - own
