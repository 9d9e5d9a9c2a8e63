"""The main graph's structure checked, and its nodes put in a topological order.

onnxruntime runs a graph whose nodes are listed in any order (it sorts them); onnx's checker
refuses one, and for a graph that cannot run (a value nothing defines, a cycle) its message
names the node on a second line. :func:`topologically_sorted` sorts the nodes as onnxruntime
does and says, in one line, which node reads which value when the graph cannot be sorted.
"""

from __future__ import annotations

import heapq

import onnx

from gspo.errors import ModelLoadError
from gspo.ir.protos import subgraph_reads

__all__ = ["topologically_sorted"]


def _describe(index: int, node: onnx.NodeProto) -> str:
    return f"{node.name!r} ({node.op_type})" if node.name else f"#{index} ({node.op_type})"


def _reads(node: onnx.NodeProto) -> list[str]:
    """What a node reads: its inputs, then the outer values its subgraphs read."""
    reads = [i for i in node.input if i]
    for a in node.attribute:
        for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
            reads += sorted(subgraph_reads(sub))
    return reads


def _check_defined(g: onnx.GraphProto, producer: dict[str, int], label: str) -> None:
    outer = {vi.name for vi in g.input} | {t.name for t in g.initializer}
    outer |= {t.values.name for t in g.sparse_initializer}
    for i, n in enumerate(g.node):
        for name in n.input:
            if name and name not in outer and name not in producer:
                raise ModelLoadError(f"{label}: node {_describe(i, n)} reads {name!r}, which is not a graph input, "
                                     "an initializer or the output of any node")
    for vi in g.output:
        if vi.name not in outer and vi.name not in producer:
            raise ModelLoadError(f"{label}: graph output {vi.name!r} is not a graph input, an initializer or the "
                                 "output of any node")


def _cycle_error(g: onnx.GraphProto, left: set[int], deps: list[list[tuple[int, str]]], label: str) -> ModelLoadError:
    """The error naming a node on a cycle among the nodes ``left`` unsorted, and the value it reads."""
    seen: list[int] = []
    node = min(left)
    while node not in seen:  # walk back along producers still unsorted until a node repeats
        seen.append(node)
        node = next(p for p, _ in deps[node] if p in left)
    before, value = next((p, v) for p, v in deps[node] if p in left)
    this = _describe(node, g.node[node])
    if before == node:
        return ModelLoadError(f"{label}: the graph has a cycle: node {this} reads its own output {value!r}")
    return ModelLoadError(
        f"{label}: the graph has a cycle: node {this} reads {value!r}, the output of node "
        f"{_describe(before, g.node[before])}, which depends on the output of node {this}")


def topologically_sorted(model: onnx.ModelProto, label: str = "<model>") -> onnx.ModelProto:
    """``model`` with its main graph's nodes in a topological order (a copy if they were not).

    Raises:
        ModelLoadError: a node reads a value nothing defines, a graph output is never defined, or
            the nodes form a cycle; one line naming the node and the value.
    """
    g = model.graph
    producer = {o: i for i, n in enumerate(g.node) for o in n.output if o}
    _check_defined(g, producer, label)
    deps = [[(producer[r], r) for r in _reads(n) if r in producer] for n in g.node]
    users: list[list[int]] = [[] for _ in g.node]
    waiting = [len({p for p, _ in d}) for d in deps]
    for i, d in enumerate(deps):
        for p in {p for p, _ in d}:
            users[p].append(i)
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(order) < len(g.node):
        raise _cycle_error(g, set(range(len(g.node))) - set(order), deps, label)
    if order == list(range(len(g.node))):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(g.node[i] for i in order)
    return out
