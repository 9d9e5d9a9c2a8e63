"""Errors that reach the user as one line (the CLI prints ``gspo: error: <message>``)."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["GspoError", "ModelLoadError", "InputShapeError", "UnsupportedModelError", "clipped", "first_line",
           "read_json"]


def first_line(e: BaseException, limit: int = 300) -> str:
    """The first line of an exception's message (for one-line errors), or its type's name."""
    lines = str(e).strip().splitlines()
    return lines[0][:limit] if lines else type(e).__name__


def clipped(value, limit: int = 80, quote: bool = False) -> str:
    """``value`` as a one-line message shows what the user gave (a name, an environment variable,
    a stored row): cut to ``limit`` characters, with how long it was (``aaaa... (10000000
    characters)``), control characters and line breaks escaped; in quotes as ``repr`` writes
    them when ``quote`` (a value that is not text is shown as its ``repr``, cut the same way).

    A tampered schedule naming an op of 10,000,000 characters made an error "line" of 10 MB.
    """
    if not isinstance(value, str):
        value, quote = repr(value), False
    head = value[:limit]
    head = repr(head) if quote else "".join(c if c.isprintable() else repr(c)[1:-1] for c in head)
    return head if len(value) <= limit else f"{head}... ({len(value)} characters)"


class GspoError(Exception):
    """Base class of every error caused by what the user gave us (exit code 2)."""


class ModelLoadError(GspoError):
    """The file is missing, not a readable ONNX model, or fails the ONNX checker."""


class UnsupportedModelError(GspoError):
    """A valid ONNX model that gspo cannot handle (opset too old, ...)."""


class InputShapeError(GspoError):
    """Dynamic input dimensions left unpinned, or an ``--input-shape`` that does not fit."""


def read_json(path: Path, what: str):
    """The JSON document at ``path`` (the ``what`` of the messages: "baseline", "model set"...).

    Raises:
        GspoError: the file cannot be read, or is not valid JSON (one line naming it).
    """
    try:
        return json.loads(Path(path).read_text())
    except OSError as e:
        raise GspoError(f"{path}: cannot read the {what} ({e.strerror or e})") from None
    except (ValueError, RecursionError):
        raise GspoError(f"{path}: the {what} is not valid JSON") from None
