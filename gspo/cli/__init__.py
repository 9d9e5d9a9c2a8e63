"""The ``gspo`` command line: a thin click layer over the library.

``common`` holds the group and what commands share; each other module registers its commands.

Loading them (click, numpy, onnx and the rest) takes most of a second, so this package loads
nothing itself: :func:`main`, the ``gspo`` entry point, loads them where Ctrl-C is the one line
it is once a command runs (a SIGINT 0.2-0.5 s after ``gspo optimize`` was a 30-57-line
traceback). ``cli`` and ``progress_printer`` are loaded on first use.
"""

from __future__ import annotations

import signal
import sys

__all__ = ["main", "cli", "progress_printer"]

#: What an interrupted gspo prints (``gspo.cli.common`` says the same once a command runs).
STOPPED = "gspo: stopped (SIGINT); nothing was written"


def _loaded():
    """``gspo.cli.common``, with every command registered on its group."""
    from gspo.cli import calibrate, common, execute, models, optimize, regress  # noqa: F401  (they register the commands)

    return common


def __getattr__(name: str):
    if name in ("cli", "progress_printer"):
        return getattr(_loaded(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """The ``gspo`` entry point: the command line run, and Ctrl-C while gspo is still loading
    one line and exit 130, as it is later (nothing has been written yet)."""
    try:
        common = _loaded()
        common.main()  # its group handles SIGINT from when it starts; this, what comes before
    except KeyboardInterrupt:
        sys.stderr.write(STOPPED + "\n")
        sys.exit(128 + signal.SIGINT)
