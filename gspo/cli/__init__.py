"""The ``gspo`` command line: a thin click layer over the library.

``common`` holds the group and what commands share; each other module registers its commands.
"""

from gspo.cli import calibrate, execute, models, optimize, regress  # noqa: F401  (registers the commands)
from gspo.cli.common import cli, main, progress_printer

__all__ = ["main", "cli", "progress_printer"]
