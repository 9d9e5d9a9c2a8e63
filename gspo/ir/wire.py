"""Serialized models put together on the wire: a model serialized without its initializers,
then each initializer as a further occurrence of ``ModelProto.graph`` holding it alone. A parser
merges repeated occurrences of a message field and appends to its repeated fields, so the bytes
parse as the model with its initializers in order (protobuf's encoding rules), and no message
holding every weight is built first."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["with_initializers"]

_MODEL_GRAPH = 7  # ModelProto.graph
_GRAPH_INITIALIZER = 5  # GraphProto.initializer
_LENGTH_DELIMITED = 2


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload_size: int) -> bytes:
    """The tag and length of a length-delimited field of ``payload_size`` bytes."""
    return _varint(number << 3 | _LENGTH_DELIMITED) + _varint(payload_size)


def with_initializers(model: bytes, tensors: Iterable[bytes]) -> bytes:
    """``model`` (a serialized ``ModelProto``) with the serialized ``TensorProto`` s ``tensors``
    appended to its graph's initializers, in order."""
    parts = [model]
    for t in tensors:
        inner = _field(_GRAPH_INITIALIZER, len(t))
        parts += [_field(_MODEL_GRAPH, len(inner) + len(t)), inner, t]
    return b"".join(parts)
