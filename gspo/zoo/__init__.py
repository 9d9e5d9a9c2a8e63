"""The GSPO paper's model set, built in code with random weights from a fixed seed.

Each model has two sizes: ``tiny`` (runs in milliseconds, for tests) and ``full`` (the real
architecture, for benchmarks).

Example:
    >>> from gspo.zoo import build
    >>> g = build("nasrnn", "tiny")
    >>> [v.name for v in g.inputs]
    ['x0', 'x1', 'x2']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gspo.errors import GspoError
from gspo.ir.graph import Graph
from gspo.zoo import bert, inception, nasnet, nasrnn, resnet, squeezenet

__all__ = ["MODELS", "SIZES", "ZooModel", "build"]

SIZES = ("tiny", "full")


@dataclass(frozen=True)
class ZooModel:
    """A model of the zoo: its name, a description and a builder per size."""
    name: str
    description: str
    builders: dict[str, Callable[[int], Graph]]


def _entry(name: str, description: str, sizes: dict, fn: Callable) -> ZooModel:
    return ZooModel(name, description, {s: (lambda seed, c=cfg: fn(c, seed=seed)) for s, cfg in sizes.items()})


MODELS: dict[str, ZooModel] = {
    m.name: m
    for m in [
        _entry("resnet50", "ResNet-50, 224x224", resnet.SIZES, resnet.resnet50),
        _entry("inception_v3", "Inception-v3, 299x299, no aux head", inception.SIZES, inception.inception_v3),
        _entry("squeezenet", "SqueezeNet 1.1, 224x224", squeezenet.SIZES, squeezenet.squeezenet),
        _entry("nasnet_large", "NASNet-A Large, 331x331", nasnet.LARGE,
               lambda c, seed: nasnet.nasnet(c, "nasnet_large", seed)),
        _entry("nasnet_mobile", "NASNet-A Mobile, 224x224", nasnet.MOBILE,
               lambda c, seed: nasnet.nasnet(c, "nasnet_mobile", seed)),
        _entry("nasrnn", "NasRNN cell, hidden 512, 5 steps, shared weights", nasrnn.SIZES, nasrnn.nasrnn),
        _entry("bert", "BERT-base, 12 layers, hidden 768, sequence 128", bert.SIZES, bert.bert),
    ]
}


def build(name: str, size: str = "tiny", seed: int = 0) -> Graph:
    """Build zoo model ``name`` at ``size`` (``tiny`` or ``full``)."""
    if name not in MODELS:
        raise GspoError(f"unknown zoo model {name!r} (known: {', '.join(MODELS)})")
    if size not in SIZES:
        raise GspoError(f"unknown size {size!r} (use tiny or full)")
    return MODELS[name].builders[size](seed)
