"""How ``--max-error`` writes an output's name (:mod:`gspo.precision.accuracy`): as it is, or
in double quotes when it holds a character the spec uses (``,`` between limits, ``=`` before a
value), with ``\\"`` and ``\\\\`` inside the quotes for ``"`` and ``\\``::

    "out,1":nmse=1e-2,nmse=1e-3      the output named out,1 at 1e-2, every other at 1e-3
"""

from __future__ import annotations

from gspo.errors import GspoError

__all__ = ["quote_output", "quoted_output", "split_items"]


def quote_output(name: str) -> str:
    """An output name as a spec writes it: as it is, or in double quotes (``\\"`` and ``\\\\``
    escaped) when it holds ``,``, ``=``, ``"`` or ``\\``, or starts or ends with a space."""
    if any(c in name for c in ',="\\') or name != name.strip() or not name:
        return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return name


def split_items(spec: str, form: str) -> list[str]:
    """The items of a spec: split at the commas outside double quotes (a backslash in quotes
    escapes the next character); ``form``: how to write a limit, which an error ends with.

    Raises:
        GspoError: a quote not closed.
    """
    items, current, quoted, escaped = [], [], False, False
    for c in spec:
        if escaped:
            escaped = False
        elif quoted and c == "\\":
            escaped = True
        elif c == '"':
            quoted = not quoted
        elif c == "," and not quoted:
            items.append("".join(current))
            current = []
            continue
        current.append(c)
    if quoted:
        raise GspoError(f"--max-error {spec!r}: a double quote is not closed {form}")
    return items + ["".join(current)]


def quoted_output(item: str, form: str) -> tuple[str, str]:
    """The output name of an item that starts with a double quote (escapes undone), and the
    rest after its ``:``."""
    text = item.strip()
    name, i = [], 1
    while i < len(text) and text[i] != '"':
        i += 1 if text[i] != "\\" else 2
        name.append(text[i - 1])
    rest = text[i + 1:].lstrip()
    if not rest.startswith(":"):
        raise GspoError(f"--max-error: {item.strip()!r}: a quoted output name must be followed by ':' {form}")
    return "".join(name), rest[1:]
