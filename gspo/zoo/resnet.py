"""ResNet-50 (He et al. 2016; torchvision v1.5 layout: stride on the 3x3 conv)."""

from __future__ import annotations

from dataclasses import dataclass

from gspo.ir.builder import GraphBuilder
from gspo.ir.graph import Graph
from gspo.zoo.layers import classifier, conv_bn, conv_bn_relu, relu

__all__ = ["ResNetConfig", "resnet50"]


@dataclass(frozen=True)
class ResNetConfig:
    """ResNet-50's input size, stage widths and blocks per stage."""
    image: int = 224
    widths: tuple[int, ...] = (64, 128, 256, 512)
    blocks: tuple[int, ...] = (3, 4, 6, 3)
    classes: int = 1000


SIZES = {"full": ResNetConfig(), "tiny": ResNetConfig(32, (8, 16, 32, 64), (1, 1, 1, 1), 10)}


def _bottleneck(b: GraphBuilder, x: str, mid: int, stride: int) -> str:
    out = mid * 4
    y = conv_bn_relu(b, x, mid, 1)
    y = conv_bn_relu(b, y, mid, 3, stride, 1)
    y = conv_bn(b, y, out, 1)
    short = x
    if stride != 1 or b.shape(x)[1] != out:
        short = conv_bn(b, x, out, 1, stride)
    return relu(b, b.op("Add", [y, short]))


def resnet50(cfg: ResNetConfig = ResNetConfig(), seed: int = 0) -> Graph:
    """ResNet-50 (bottleneck blocks) with random weights, batch 1."""
    b = GraphBuilder("resnet50", seed=seed)
    x = b.input("input", (1, 3, cfg.image, cfg.image))
    with b.scope("stem"):
        x = conv_bn_relu(b, x, cfg.widths[0], 7, 2, 3)
        x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    for stage, (width, count) in enumerate(zip(cfg.widths, cfg.blocks)):
        for i in range(count):
            with b.scope(f"layer{stage + 1}.{i}"):
                x = _bottleneck(b, x, width, 2 if (i == 0 and stage > 0) else 1)
    x = classifier(b, x, cfg.classes)
    return b.output(x).build()
