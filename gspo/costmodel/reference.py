"""A speed reference: a fixed small workload timed next to every measurement.

These machines are shared: the same graph measured minutes apart differs by tens of percent (up
to 2x between consecutive sets, measured; see the README). A cost profile fitted on such
measurements inherits the drift as noise, and an accuracy check mostly measures the machine.
So calibration and ``--evaluate`` time this reference right after each measurement and express
every measurement in *reference units*: ``seconds x (nominal / reference seconds now)``, where
``nominal`` is the reference's median over the whole calibration (stored in the profile as
``reference_s``). What remains is the cost model's own error; the raw error is reported beside it.

The reference mixes what the zoo models spend time on: a 3x3 convolution, a matrix product and
elementwise work, about a millisecond on this CPU.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gspo.ir import Graph
from gspo.ir.builder import GraphBuilder

__all__ = ["reference_graph", "SpeedReference", "normalize"]


def reference_graph() -> Graph:
    """The small fixed graph (Conv, MatMul, elementwise) timed as the speed reference."""
    b = GraphBuilder("gspo-speed-reference", seed=11)
    x = b.input("x", (1, 32, 28, 28))
    y = b.op("Conv", [x, b.weight("w", (32, 32, 3, 3))], pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    y = b.op("Relu", [y])
    y = b.op("Reshape", [y, b.const("shape", np.array([32, 784], np.int64))])
    z = b.op("MatMul", [y, b.weight("m", (784, 256))])
    z = b.op("Add", [z, b.weight("bias", (256,), scale=0.1)])
    z = b.op("Tanh", [z])
    return b.output(b.op("Mul", [z, z])).build()


class SpeedReference:
    """Times the reference graph on the CPU: ``measure()`` returns its median seconds now."""

    def __init__(self, timer: Callable[[Callable[[], object]], float]):
        from gspo.runtime import make_session, random_inputs

        g = reference_graph()
        self._session = make_session(g)
        self._feeds = random_inputs(g)
        self._timer = timer

    def measure(self) -> float:
        """The reference graph's median seconds now."""
        return self._timer(lambda: self._session.run(None, self._feeds))


def normalize(seconds: float, reference_now: float | None, nominal: float) -> float:
    """``seconds`` in reference units (unchanged without a reference)."""
    if not reference_now or not nominal:
        return seconds
    return seconds * nominal / reference_now
