"""NasRNN: the recurrent cell found by Zoph & Le (2017), as in TASO's benchmark.

Each step combines the input ``x_t`` and the state ``h`` through eight gates
``x_t @ Wx_i + h @ Wh_i``; the weights are shared across the unrolled steps, as in a real
recurrent network (TASO's benchmark draws new weights per step).
"""

from __future__ import annotations

from dataclasses import dataclass

from gspo.ir.builder import GraphBuilder
from gspo.ir.graph import Graph

__all__ = ["NasRNNConfig", "nasrnn"]


@dataclass(frozen=True)
class NasRNNConfig:
    """NasRNN's hidden size and number of time steps."""
    hidden: int = 512
    steps: int = 5


SIZES = {"full": NasRNNConfig(), "tiny": NasRNNConfig(32, 3)}


def nasrnn(cfg: NasRNNConfig = NasRNNConfig(), seed: int = 0) -> Graph:
    """An unrolled NasRNN cell with random weights, batch 1."""
    b = GraphBuilder("nasrnn", seed=seed)
    hsz = cfg.hidden
    wx = [b.weight(f"Wx{i}", (hsz, hsz), scale=(1.0 / hsz) ** 0.5) for i in range(8)]
    wh = [b.weight(f"Wh{i}", (hsz, hsz), scale=(1.0 / hsz) ** 0.5) for i in range(8)]
    state = b.weight("h0", (1, hsz), scale=0.5)
    xs = [b.input(f"x{t}", (1, hsz)) for t in range(cfg.steps)]

    def f(op: str, *args: str, out: str | None = None) -> str:
        return b.op(op, list(args), out=out)

    for t, x in enumerate(xs):
        with b.scope(f"step{t}"):
            g = [f("Add", f("MatMul", x, wx[i]), f("MatMul", state, wh[i])) for i in range(8)]
            m0 = f("Add", f("Relu", g[0]), f("Sigmoid", g[3]))
            m1 = f("Add", f("Sigmoid", g[1]), f("Tanh", g[2]))
            m2 = f("Mul", f("Sigmoid", g[4]), f("Tanh", g[5]))
            m3 = f("Mul", f("Sigmoid", g[6]), f("Relu", g[7]))
            m4 = f("Add", f("Sigmoid", m1), f("Tanh", m2))
            m5 = f("Mul", f("Tanh", m0), f("Tanh", m3))
            m6 = f("Mul", f("Tanh", m4), f("Tanh", m5))
            state = f("Tanh", m6, out="state" if t == cfg.steps - 1 else None)
    return b.output(state).build()
