"""The model as ``optimize`` prepared it: as given and as searched, and the inputs every check runs on."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gspo.ir import Graph

__all__ = ["Prepared"]


@dataclass
class Prepared:
    """The model as given and as searched, the inputs every check runs on, and what happened."""

    original: Graph
    #: The model as searched: through the front end (constants folded, shape arithmetic as
    #: constants; :attr:`original` itself when the front end was not used).
    plain: Graph
    feeds: list[dict[str, np.ndarray]]
    notes: list[str]
    #: The model file's bytes both graphs were loaded from, when they are the model as given
    #: (``None``: given as a Graph, with input shapes pinned, or with external data).
    data: bytes | None = None
    #: Seconds one run of the original took or, when the time budget could not hold that run, the
    #: least it is expected to take (the budget's estimates use it). ``feeds`` is empty when the
    #: budget ended while the random inputs were drawn (the input is then handed back).
    run_s: float = 0.0
