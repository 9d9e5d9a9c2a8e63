"""SqueezeNet 1.1 (Iandola et al. 2016)."""

from __future__ import annotations

from dataclasses import dataclass

from gspo.ir.builder import GraphBuilder
from gspo.ir.graph import Graph
from gspo.zoo.layers import conv, relu

__all__ = ["SqueezeNetConfig", "squeezenet"]


@dataclass(frozen=True)
class SqueezeNetConfig:
    """SqueezeNet 1.1's input size, width multiplier and classes."""
    image: int = 224
    width: float = 1.0
    classes: int = 1000


SIZES = {"full": SqueezeNetConfig(), "tiny": SqueezeNetConfig(64, 0.25, 10)}

# (squeeze, expand1x1, expand3x3) per fire module; None marks a max pool.
_LAYOUT = [(16, 64, 64), (16, 64, 64), None, (32, 128, 128), (32, 128, 128), None,
           (48, 192, 192), (48, 192, 192), (64, 256, 256), (64, 256, 256)]


def _fire(b: GraphBuilder, x: str, s: int, e1: int, e3: int) -> str:
    sq = relu(b, conv(b, x, s, 1, bias=True))
    a = relu(b, conv(b, sq, e1, 1, bias=True))
    c = relu(b, conv(b, sq, e3, 3, pad=1, bias=True))
    return b.op("Concat", [a, c], axis=1)


def _pool(b: GraphBuilder, x: str) -> str:
    return b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)


def squeezenet(cfg: SqueezeNetConfig = SqueezeNetConfig(), seed: int = 0) -> Graph:
    """SqueezeNet 1.1 with random weights, batch 1."""
    b = GraphBuilder("squeezenet1_1", seed=seed)
    w = lambda c: max(4, int(c * cfg.width))  # noqa: E731
    x = b.input("input", (1, 3, cfg.image, cfg.image))
    x = _pool(b, relu(b, conv(b, x, w(64), 3, 2, bias=True)))
    for i, spec in enumerate(_LAYOUT):
        if spec is None:
            x = _pool(b, x)
            continue
        with b.scope(f"fire{i}"):
            x = _fire(b, x, *(w(c) for c in spec))
    x = b.op("Dropout", [x])
    x = relu(b, conv(b, x, cfg.classes, 1, bias=True))
    x = b.op("GlobalAveragePool", [x])
    x = b.op("Flatten", [x], axis=1, out="logits")
    return b.output(x).build()
