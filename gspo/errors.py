"""Errors that reach the user as one line (the CLI prints ``gspo: error: <message>``)."""

from __future__ import annotations

__all__ = ["GspoError", "ModelLoadError", "InputShapeError", "UnsupportedModelError", "first_line"]


def first_line(e: BaseException, limit: int = 300) -> str:
    """The first line of an exception's message (for one-line errors), or its type's name."""
    lines = str(e).strip().splitlines()
    return lines[0][:limit] if lines else type(e).__name__


class GspoError(Exception):
    """Base class of every error caused by what the user gave us (exit code 2)."""


class ModelLoadError(GspoError):
    """The file is missing, not a readable ONNX model, or fails the ONNX checker."""


class UnsupportedModelError(GspoError):
    """A valid ONNX model that gspo cannot handle (opset too old, ...)."""


class InputShapeError(GspoError):
    """Dynamic input dimensions left unpinned, or an ``--input-shape`` that does not fit."""
