"""Inception-v3 (Szegedy et al. 2016), torchvision layout without the auxiliary head."""

from __future__ import annotations

from dataclasses import dataclass

from gspo.ir.builder import GraphBuilder
from gspo.ir.graph import Graph
from gspo.zoo.layers import classifier, conv_bn_relu

__all__ = ["InceptionConfig", "inception_v3"]


@dataclass(frozen=True)
class InceptionConfig:
    """Inception-v3's input size, width multiplier and classes."""
    image: int = 299
    width: float = 1.0
    classes: int = 1000


SIZES = {"full": InceptionConfig(), "tiny": InceptionConfig(75, 0.0625, 10)}


class _Net:
    def __init__(self, b: GraphBuilder, width: float):
        self.b, self.width = b, width

    def c(self, ch: int) -> int:
        return max(2, int(ch * self.width))

    def bc(self, x: str, cout: int, k=1, s=1, p=0) -> str:
        return conv_bn_relu(self.b, x, self.c(cout), k, s, p, eps=1e-3)

    def avg(self, x: str) -> str:
        return self.b.op("AveragePool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], count_include_pad=1)

    def maxp(self, x: str) -> str:
        return self.b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2])

    def cat(self, xs: list[str]) -> str:
        return self.b.op("Concat", xs, axis=1)

    def block_a(self, x: str, pool_features: int) -> str:
        b1 = self.bc(x, 64)
        b5 = self.bc(self.bc(x, 48), 64, 5, 1, 2)
        b3 = self.bc(self.bc(self.bc(x, 64), 96, 3, 1, 1), 96, 3, 1, 1)
        bp = self.bc(self.avg(x), pool_features)
        return self.cat([b1, b5, b3, bp])

    def block_b(self, x: str) -> str:
        b3 = self.bc(x, 384, 3, 2)
        bd = self.bc(self.bc(self.bc(x, 64), 96, 3, 1, 1), 96, 3, 2)
        return self.cat([b3, bd, self.maxp(x)])

    def block_c(self, x: str, c7: int) -> str:
        b1 = self.bc(x, 192)
        b7 = self.bc(self.bc(self.bc(x, c7), c7, (1, 7), 1, (0, 3)), 192, (7, 1), 1, (3, 0))
        bd = self.bc(x, c7)
        for cout, k, p in [(c7, (7, 1), (3, 0)), (c7, (1, 7), (0, 3)), (c7, (7, 1), (3, 0)), (192, (1, 7), (0, 3))]:
            bd = self.bc(bd, cout, k, 1, p)
        bp = self.bc(self.avg(x), 192)
        return self.cat([b1, b7, bd, bp])

    def block_d(self, x: str) -> str:
        b3 = self.bc(self.bc(x, 192), 320, 3, 2)
        b7 = self.bc(self.bc(self.bc(x, 192), 192, (1, 7), 1, (0, 3)), 192, (7, 1), 1, (3, 0))
        b7 = self.bc(b7, 192, 3, 2)
        return self.cat([b3, b7, self.maxp(x)])

    def block_e(self, x: str) -> str:
        b1 = self.bc(x, 320)
        t = self.bc(x, 384)
        b3 = self.cat([self.bc(t, 384, (1, 3), 1, (0, 1)), self.bc(t, 384, (3, 1), 1, (1, 0))])
        d = self.bc(self.bc(x, 448), 384, 3, 1, 1)
        bd = self.cat([self.bc(d, 384, (1, 3), 1, (0, 1)), self.bc(d, 384, (3, 1), 1, (1, 0))])
        bp = self.bc(self.avg(x), 192)
        return self.cat([b1, b3, bd, bp])


def inception_v3(cfg: InceptionConfig = InceptionConfig(), seed: int = 0) -> Graph:
    """Inception-v3 with random weights, batch 1."""
    b = GraphBuilder("inception_v3", seed=seed)
    n = _Net(b, cfg.width)
    x = b.input("input", (1, 3, cfg.image, cfg.image))
    with b.scope("stem"):
        x = n.bc(x, 32, 3, 2)
        x = n.bc(x, 32, 3)
        x = n.maxp(n.bc(x, 64, 3, 1, 1))
        x = n.maxp(n.bc(n.bc(x, 80), 192, 3))
    blocks = [("Mixed_5b", n.block_a, (32,)), ("Mixed_5c", n.block_a, (64,)), ("Mixed_5d", n.block_a, (64,)),
              ("Mixed_6a", n.block_b, ()), ("Mixed_6b", n.block_c, (128,)), ("Mixed_6c", n.block_c, (160,)),
              ("Mixed_6d", n.block_c, (160,)), ("Mixed_6e", n.block_c, (192,)),
              ("Mixed_7a", n.block_d, ()), ("Mixed_7b", n.block_e, ()), ("Mixed_7c", n.block_e, ())]
    for name, fn, args in blocks:
        with b.scope(name):
            x = fn(x, *args)
    x = b.op("Dropout", [x])
    return b.output(classifier(b, x, cfg.classes)).build()
