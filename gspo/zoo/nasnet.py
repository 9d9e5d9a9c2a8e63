"""NASNet-A Large and Mobile (Zoph et al. 2018), after the TF-slim reference (``nasnet.py``).

Cells are given by TF-slim's tables: ``operations``, ``hiddenstate_indices`` and
``used_hiddenstates``. Padding is TensorFlow's SAME, written as explicit ONNX pads; average
pools exclude padding, as TensorFlow's do.
"""

from __future__ import annotations

from dataclasses import dataclass

from gspo.ir.builder import GraphBuilder
from gspo.ir.graph import Graph
from gspo.zoo.layers import bn, conv, same_pads

__all__ = ["NASNetConfig", "nasnet"]


@dataclass(frozen=True)
class NASNetConfig:
    """A NASNet-A variant's input size, stem, cells and filters."""
    image: int
    stem_multiplier: float
    num_cells: int
    num_conv_filters: int
    skip_reduction_layer_input: bool
    classes: int = 1000
    num_reduction_layers: int = 2
    filter_scaling_rate: float = 2.0


LARGE = {"full": NASNetConfig(331, 3.0, 18, 168, True),
         "tiny": NASNetConfig(64, 1.0, 3, 8, True, classes=10)}
MOBILE = {"full": NASNetConfig(224, 1.0, 12, 44, False),
          "tiny": NASNetConfig(64, 1.0, 3, 8, False, classes=10)}

NORMAL = dict(
    operations=["separable_5x5_2", "separable_3x3_2", "separable_5x5_2", "separable_3x3_2",
                "avg_pool_3x3", "none", "avg_pool_3x3", "avg_pool_3x3", "separable_3x3_2", "none"],
    used=[1, 0, 0, 0, 0, 0, 0],
    indices=[0, 1, 1, 1, 0, 1, 1, 1, 0, 0],
)
REDUCTION = dict(
    operations=["separable_5x5_2", "separable_7x7_2", "max_pool_3x3", "separable_7x7_2",
                "avg_pool_3x3", "separable_5x5_2", "none", "avg_pool_3x3", "separable_3x3_2",
                "max_pool_3x3"],
    used=[1, 1, 1, 0, 0, 0, 0],
    indices=[0, 1, 0, 1, 0, 1, 3, 2, 2, 0],
)


class _Cells:
    def __init__(self, b: GraphBuilder):
        self.b = b

    def ch(self, x: str) -> int:
        return self.b.shape(x)[1]

    def hw(self, x: str) -> int:
        return self.b.shape(x)[2]

    def relu(self, x: str) -> str:
        return self.b.op("Relu", [x])

    def conv1x1_bn(self, x: str, cout: int, stride: int = 1) -> str:
        return bn(self.b, conv(self.b, x, cout, 1, stride), eps=1e-3)

    def separable(self, x: str, cout: int, k: int, stride: int) -> str:
        dw = conv(self.b, x, self.ch(x), k, stride, "same", group=self.ch(x))
        return conv(self.b, dw, cout, 1)

    def stacked_separable(self, x: str, op: str, filters: int, stride: int) -> str:
        layers = int(op.split("_")[-1])
        k = int(op.split("x")[0][-1])
        for _ in range(layers - 1):
            x = bn(self.b, self.separable(self.relu(x), filters, k, stride), eps=1e-3)
            stride = 1
        return bn(self.b, self.separable(self.relu(x), filters, k, stride), eps=1e-3)

    def pool(self, x: str, op: str, stride: int) -> str:
        pads = same_pads(self.b.shape(x)[2:], 3, stride)
        if op.startswith("avg"):
            return self.b.op("AveragePool", [x], kernel_shape=[3, 3], strides=[stride] * 2,
                             pads=pads, count_include_pad=0)
        return self.b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[stride] * 2, pads=pads)

    def factorized_reduction(self, x: str, filters: int, stride: int) -> str:
        if stride == 1:
            return self.conv1x1_bn(x, filters)
        sub = dict(kernel_shape=[1, 1], strides=[stride, stride])
        p1 = conv(self.b, self.b.op("AveragePool", [x], **sub), filters // 2, 1)
        shifted = self.b.op("Pad", [x, self.b.const("pads", [0, 0, 0, 0, 0, 0, 1, 1])])
        shifted = self.b.op("Slice", [shifted, self.b.const("starts", [1, 1]),
                                      self.b.const("ends", [1 << 30, 1 << 30]),
                                      self.b.const("axes", [2, 3])])
        p2 = conv(self.b, self.b.op("AveragePool", [shifted], **sub), filters // 2 + filters % 2, 1)
        return bn(self.b, self.b.op("Concat", [p1, p2], axis=1), eps=1e-3)

    def reduce_prev(self, prev: str | None, cur: str, filters: int) -> str:
        if prev is None:
            return cur
        if self.hw(prev) != self.hw(cur):
            return self.factorized_reduction(self.relu(prev), filters, 2)
        if self.ch(prev) != filters:
            return self.conv1x1_bn(self.relu(prev), filters)
        return prev

    def apply_op(self, x: str, op: str, stride: int, from_input: bool, filters: int) -> str:
        if stride > 1 and not from_input:
            stride = 1
        if op.startswith("separable"):
            return self.stacked_separable(x, op, filters, stride)
        if op == "none":
            if stride > 1 or self.ch(x) != filters:
                return self.conv1x1_bn(self.relu(x), filters, stride)
            return x
        y = self.pool(x, op, stride)
        return self.conv1x1_bn(y, filters) if self.ch(y) != filters else y

    def cell(self, spec: dict, net: str, prev: str | None, filters: int, stride: int) -> str:
        prev = self.reduce_prev(prev, net, filters)
        h = self.conv1x1_bn(self.relu(net), filters)
        states = [h, prev]
        ops, idx = spec["operations"], spec["indices"]
        for i in range(0, len(ops), 2):
            left = self.apply_op(states[idx[i]], ops[i], stride, idx[i] < 2, filters)
            right = self.apply_op(states[idx[i + 1]], ops[i + 1], stride, idx[i + 1] < 2, filters)
            states.append(self.b.op("Add", [left, right]))
        final_hw, final_c = self.hw(states[-1]), self.ch(states[-1])
        for i, used in enumerate(spec["used"]):
            if not used and (self.hw(states[i]) != final_hw or self.ch(states[i]) != final_c):
                stride_r = 2 if self.hw(states[i]) != final_hw else 1
                states[i] = self.factorized_reduction(states[i], final_c, stride_r)
        keep = [s for s, used in zip(states, spec["used"]) if not used]
        return self.b.op("Concat", keep, axis=1)


def _reduction_indices(num_cells: int, num_reductions: int) -> list[int]:
    return [int(float(p) / (num_reductions + 1) * num_cells) for p in range(1, num_reductions + 1)]


def nasnet(cfg: NASNetConfig, name: str = "nasnet", seed: int = 0) -> Graph:
    """A NASNet-A network with random weights, batch 1."""
    b = GraphBuilder(name, seed=seed)
    cells = _Cells(b)
    x = b.input("input", (1, 3, cfg.image, cfg.image))
    with b.scope("stem"):
        net = bn(b, conv(b, x, int(32 * cfg.stem_multiplier), 3, 2), eps=1e-3)
    outputs: list[str | None] = [None, net]
    scaling = 1.0 / cfg.filter_scaling_rate**2
    for i in range(2):
        with b.scope(f"cell_stem_{i}"):
            net = cells.cell(REDUCTION, net, outputs[-2], int(cfg.num_conv_filters * scaling), 2)
        outputs.append(net)
        scaling *= cfg.filter_scaling_rate
    scaling = 1.0
    reductions = _reduction_indices(cfg.num_cells, cfg.num_reduction_layers)
    for i in range(cfg.num_cells):
        prev = outputs[-2]
        if i in reductions:
            scaling *= cfg.filter_scaling_rate
            with b.scope(f"reduction_cell_{reductions.index(i)}"):
                net = cells.cell(REDUCTION, net, outputs[-2], int(cfg.num_conv_filters * scaling), 2)
            outputs.append(net)
        if not cfg.skip_reduction_layer_input:
            prev = outputs[-2]
        with b.scope(f"cell_{i}"):
            net = cells.cell(NORMAL, net, prev, int(cfg.num_conv_filters * scaling), 1)
        outputs.append(net)
    net = b.op("Relu", [net])
    net = b.op("GlobalAveragePool", [net])
    net = b.op("Flatten", [net], axis=1)
    net = b.op("Dropout", [net])
    nin = b.shape(net)[1]
    w = b.weight("fc_W", (cfg.classes, nin), scale=(1.0 / nin) ** 0.5)
    out = b.op("Gemm", [net, w, b.weight("fc_B", (cfg.classes,), scale=0.02)], transB=1,
               out="logits")
    return b.output(out).build()
