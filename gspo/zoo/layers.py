"""Layer helpers shared by the zoo builders (random weights, batch 1, NCHW)."""

from __future__ import annotations

from collections.abc import Sequence

from gspo.ir.builder import GraphBuilder

__all__ = ["conv", "bn", "relu", "conv_bn", "conv_bn_relu", "linear", "same_pads", "classifier"]


def _pair(v: int | Sequence[int]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def same_pads(size: Sequence[int], kernel, stride) -> list[int]:
    """TensorFlow ``SAME`` padding as explicit ONNX pads ``[top, left, bottom, right]``."""
    k, s = _pair(kernel), _pair(stride)
    begin, end = [], []
    for i in range(2):
        out = -(-size[i] // s[i])
        total = max((out - 1) * s[i] + k[i] - size[i], 0)
        begin.append(total // 2)
        end.append(total - total // 2)
    return begin + end


def conv(
    b: GraphBuilder,
    x: str,
    cout: int,
    kernel: int | Sequence[int] = 1,
    stride: int | Sequence[int] = 1,
    pad: int | Sequence[int] | str = 0,
    group: int = 1,
    bias: bool = False,
) -> str:
    """Conv with random He-initialized weights; ``pad="same"`` gives TF SAME padding."""
    cin = b.shape(x)[1]
    k, s = _pair(kernel), _pair(stride)
    if pad == "same":
        pads = same_pads(b.shape(x)[2:], k, s)
    elif isinstance(pad, int):
        pads = [pad] * 4
    else:
        p = _pair(pad)
        pads = [p[0], p[1], p[0], p[1]]
    w = b.weight("W", (cout, cin // group, k[0], k[1]))
    inputs = [x, w] + ([b.weight("B", (cout,), scale=0.05)] if bias else [])
    return b.op("Conv", inputs, kernel_shape=list(k), strides=list(s), pads=pads, group=group)


def bn(b: GraphBuilder, x: str, eps: float = 1e-5) -> str:
    """Inference BatchNormalization with random but well-conditioned statistics."""
    c = b.shape(x)[1]
    gamma = b.weight("gamma", (c,), loc=0.5, scale=0.5, dist="uniform")
    beta = b.weight("beta", (c,), scale=0.1)
    mean = b.weight("mean", (c,), scale=0.1)
    var = b.weight("var", (c,), loc=0.5, scale=1.0, dist="uniform")
    return b.op("BatchNormalization", [x, gamma, beta, mean, var], epsilon=eps)


def relu(b: GraphBuilder, x: str) -> str:
    """``Relu(x)``."""
    return b.op("Relu", [x])


def conv_bn(b: GraphBuilder, x: str, cout: int, kernel=1, stride=1, pad=0, group=1, eps=1e-5) -> str:
    """Conv followed by BatchNormalization."""
    return bn(b, conv(b, x, cout, kernel, stride, pad, group), eps)


def conv_bn_relu(b: GraphBuilder, x: str, cout: int, kernel=1, stride=1, pad=0, group=1, eps=1e-5) -> str:
    """Conv, BatchNormalization, Relu."""
    return relu(b, conv_bn(b, x, cout, kernel, stride, pad, group, eps))


def linear(b: GraphBuilder, x: str, nout: int, bias: bool = True, scale: float | None = None) -> str:
    """``x @ W (+ b)`` as MatMul + Add (the form exporters emit for 3-D inputs)."""
    nin = b.shape(x)[-1]
    y = b.op("MatMul", [x, b.weight("W", (nin, nout), scale=scale or (1.0 / nin) ** 0.5)])
    if bias:
        y = b.op("Add", [y, b.weight("B", (nout,), scale=0.02)])
    return y


def classifier(b: GraphBuilder, x: str, classes: int) -> str:
    """GlobalAveragePool -> Flatten -> Gemm, the usual CNN head."""
    x = b.op("GlobalAveragePool", [x])
    x = b.op("Flatten", [x], axis=1)
    nin = b.shape(x)[1]
    w = b.weight("fc_W", (classes, nin), scale=(1.0 / nin) ** 0.5)
    bias = b.weight("fc_B", (classes,), scale=0.02)
    return b.op("Gemm", [x, w, bias], transB=1, out="logits")
