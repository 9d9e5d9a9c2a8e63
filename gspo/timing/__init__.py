"""Time below the command line, shared by the search and the precision fit: the run's
:class:`~gspo.timing.deadline.Deadline` and the paired rounds' sign test
(:func:`~gspo.timing.stats.sign_test`). It imports nothing else of gspo, so that every package
that keeps time can depend on it one way."""

from gspo.timing.deadline import Deadline
from gspo.timing.stats import sign_test

__all__ = ["Deadline", "sign_test"]
