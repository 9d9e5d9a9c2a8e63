"""FLOPs, bytes and parameter counts per node."""

from __future__ import annotations

from gspo.ir import graph_features, node_features
from gspo.ir.builder import GraphBuilder
from gspo.zoo import build


def test_conv_matmul_and_elementwise_counts():
    b = GraphBuilder()
    x = b.input("x", (1, 3, 8, 8))
    c = b.op("Conv", [x, b.weight("w", (4, 3, 3, 3)), b.weight("bias", (4,))], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    r = b.op("Relu", [c])
    f = b.op("Flatten", [r], axis=1)
    m = b.op("MatMul", [f, b.weight("m", (256, 10))])
    g = b.output(m).build()
    conv, relu, flat, mm = (node_features(g, n) for n in g.nodes)
    assert conv.macs == 4 * 8 * 8 * 3 * 3 * 3
    assert conv.flops == 2 * conv.macs + 4 * 8 * 8  # bias add
    assert conv.params == 4 * 3 * 3 * 3 + 4
    assert conv.bytes_read == 4 * (3 * 64 + 108 + 4) and conv.bytes_written == 4 * 256
    assert relu.flops == 256 and relu.macs == 0
    assert flat.flops == 0 and flat.bytes_written == 4 * 256
    assert mm.macs == 256 * 10
    assert graph_features(g).params == 108 + 4 + 2560


def test_resnet50_full_is_4_1_gmac():
    feats = graph_features(build("resnet50", "full"))
    assert abs(feats.macs - 4.1e9) / 4.1e9 < 0.01
    assert abs(feats.flops / 2 - feats.macs) / feats.macs < 0.01  # conv/matmul dominate
