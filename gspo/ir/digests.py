"""Stable structural digests (never Python's salted ``hash``)."""

from __future__ import annotations

import hashlib

__all__ = ["digest", "combine"]

_MASK = (1 << 128) - 1


def digest(*parts: object) -> bytes:
    """16-byte blake2b digest of a canonical ``repr`` of primitive parts.

    Parts are ints, floats, strings, bytes, None, tuples of those, or objects with a ``key``
    attribute (their digest is used). ``repr`` of a float round-trips exactly, so equal values
    give equal digests and any change to a value changes it.
    """
    return hashlib.blake2b(repr(tuple(_canon(p) for p in parts)).encode(), digest_size=16).digest()


def combine(keys) -> int:
    """Order-independent combination of digests (sum modulo 2**128)."""
    total = 0
    for k in keys:
        total = (total + int.from_bytes(k, "little")) & _MASK
    return total


def _canon(p: object) -> object:
    if isinstance(p, (tuple, list)):
        return tuple(_canon(x) for x in p)
    if isinstance(p, bytes | bytearray | memoryview) and len(p) > 64:
        return hashlib.blake2b(p, digest_size=16).digest()
    key = getattr(p, "key", None)
    if isinstance(key, bytes):
        return key
    return p
