"""The ``gspo`` command line: a thin click layer over the library.

``common`` holds the group and what commands share; each other module registers its commands.
"""

from gspo.cli import calibrate, execute, models, optimize, regress  # noqa: F401  (registers the commands)
from gspo.cli.common import _progress_printer, cli, main

__all__ = ["main", "cli", "_progress_printer"]
