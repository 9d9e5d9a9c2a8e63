"""The values an integer graph input accepts, read off the ops that consume it.

Random inputs must be valid inputs: a token id indexes an embedding table of some rows, a
token-type id one of two, an attention mask is 0 or 1. :func:`input_ranges` follows each
integer input through ops that keep its values (Cast to an integer type, Reshape, Unsqueeze,
Slice, Concat, ...) to the ops that constrain them: the indices of a ``Gather`` lie below the
size of the gathered axis, a ``OneHot`` index below its depth, and a value read as a condition
(``Where``, ``Not``/``And``/``Or``, ``Cast`` to bool) or named like a mask is 0 or 1; so are
the ids onnxruntime's fused ``EmbedLayerNormalization`` (com.microsoft) looks up in its tables
and its mask. A scalar compared for equality with a constant (a sample rate tested against 16000)
takes that constant.

Example:
    >>> from gspo.ir.builder import GraphBuilder
    >>> b = GraphBuilder()
    >>> ids = b.input("ids", (1, 8), dtype=7)  # int64
    >>> table = b.weight("table", (2, 4))
    >>> g = b.output(b.op("Gather", [table, ids])).build()
    >>> input_ranges(g)
    {'ids': (0, 2)}
"""

from __future__ import annotations

import numpy as np

from gspo.ir.graph import Graph, Node
from gspo.ir.protos import tensor_value
from gspo.ir.weights import np_dtype

__all__ = ["DEFAULT_INT_RANGE", "input_ranges"]

#: The range of an integer input that nothing constrains (high exclusive).
DEFAULT_INT_RANGE = (0, 16)
_MASK_RANGE = (0, 2)
#: Ops whose output holds the values of input 0 (rearranged, selected or converted).
_KEEPS_VALUES = frozenset({"Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Expand", "Identity", "Slice",
                           "Transpose", "Concat", "Tile", "Split", "Gather", "GatherElements"})
_BOOLEAN_OPS = frozenset({"Not", "And", "Or", "Xor"})
_BOOL = 9  # TensorProto.BOOL
#: onnxruntime's fused BERT embedding (com.microsoft): input position -> the position of the
#: table it indexes (word, segment, position embeddings); its mask (position 7) is 0 or 1.
_EMBED_TABLES = {0: 2, 1: 4, 8: 3}
_EMBED_MASK = 7


def _embed_limit(graph: Graph, node: Node, position: int) -> tuple[int | None, bool]:
    """What com.microsoft ``EmbedLayerNormalization`` says of the value at ``position``."""
    table = _EMBED_TABLES.get(position)
    if table is not None and table < len(node.inputs):
        shape = graph.values[node.inputs[table]].shape if node.inputs[table] in graph.values else None
        size = shape[0] if shape else None
        return (size if isinstance(size, int) and size > 0 else None), False
    return None, position == _EMBED_MASK


def _consumer_limit(graph: Graph, node: Node, position: int) -> tuple[int | None, bool]:
    """What reading a value at input ``position`` of ``node`` says: an exclusive upper bound on
    it, and whether it is used as a truth value."""
    op = node.op_type
    if node.domain == "com.microsoft":
        return _embed_limit(graph, node, position) if op == "EmbedLayerNormalization" else (None, False)
    if op in ("Gather", "GatherElements") and position == 1:
        data = graph.values.get(node.inputs[0])
        if data is None or data.shape is None:
            return None, False
        axis = node.attr("axis", 0)
        axis = axis + len(data.shape) if axis < 0 else axis
        size = data.shape[axis] if 0 <= axis < len(data.shape) else None
        return (size if isinstance(size, int) and size > 0 else None), False
    if op == "OneHot" and position == 0:
        depth = graph.weights.get(node.inputs[1]) if len(node.inputs) > 1 else None
        if depth is not None and depth.size == 1:
            return int(depth.evaluate(graph.store).reshape(-1)[0]), False
        return None, False
    if (op == "Where" and position == 0) or op in _BOOLEAN_OPS or (op == "Cast" and node.attr("to") == _BOOL):
        return None, True
    return None, False


def _keeps_values(node: Node, position: int) -> bool:
    if node.op_type not in _KEEPS_VALUES:
        return False
    if node.op_type == "Cast":
        return np_dtype(node.attr("to", 1)).kind in "iu"
    return position == 0 or node.op_type == "Concat"


def _constant(graph: Graph, name: str) -> int | None:
    """The integer a one-element constant (a weight or a ``Constant`` node) holds, else ``None``."""
    values = None
    if name in graph.weights and graph.weights[name].size == 1:
        values = graph.weights[name].evaluate(graph.store)
    producer = graph.producers.get(name)
    if producer is not None and producer[0].op_type == "Constant" and not producer[0].is_opaque:
        node = producer[0]
        if node.attr("value_int") is not None:
            values = np.array(node.attr("value_int"))
        elif node.attr("value") is not None:
            values = tensor_value(node.attr("value"))
    if values is None or values.size != 1 or values.dtype.kind not in "iu":
        return None
    return int(values.reshape(-1)[0])


def _selector(graph: Graph, name: str) -> int | None:
    """The constant a scalar integer input is compared with (``Equal``), if any: a selector
    such as a sample rate, whose other values the model may not run with."""
    for node in graph.consumers.get(name, ()):
        if node.op_type == "Equal" and not node.is_opaque and len(node.inputs) == 2:
            other = node.inputs[1] if node.inputs[0] == name else node.inputs[0]
            value = _constant(graph, other)
            if value is not None:
                return value
    return None


def _range_of(graph: Graph, name: str) -> tuple[int, int]:
    bound, mask = None, "mask" in name.lower()
    if graph.values[name].shape == ():
        selected = _selector(graph, name)
        if selected is not None:
            return (selected, selected + 1)
    todo, seen = [name], {name}
    while todo:
        value = todo.pop()
        for node in graph.consumers.get(value, ()):
            if node.is_opaque and node.domain != "com.microsoft":
                continue
            for position, read in enumerate(node.inputs):
                if read != value:
                    continue
                limit, truth = _consumer_limit(graph, node, position)
                mask |= truth
                if limit is not None:
                    bound = limit if bound is None else min(bound, limit)
                if _keeps_values(node, position):
                    for v in node.outputs:
                        if v.name and v.name not in seen:
                            seen.add(v.name)
                            todo.append(v.name)
    if bound is not None:
        return (0, min(bound, 2) if mask else bound)
    return _MASK_RANGE if mask else DEFAULT_INT_RANGE


def input_ranges(graph: Graph) -> dict[str, tuple[int, int]]:
    """For every integer graph input, the range ``[low, high)`` its random values are drawn from."""
    return {v.name: _range_of(graph, v.name) for v in graph.inputs if v.dtype and np_dtype(v.dtype).kind in "iu"}
