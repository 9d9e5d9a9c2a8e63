"""The run's deadline, re-exported from :mod:`gspo.timing.deadline` (where it lives, below both
the search and the precision fit)."""

from gspo.timing.deadline import Deadline

__all__ = ["Deadline"]
