"""What the cost model sees of an op: its family and numeric features."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gspo.ir import Graph, Node, node_features
from gspo.ir.features import DATA_MOVEMENT_OPS, is_misaligned_depthwise
from gspo.ir.shapes import BINARY_OPS, UNARY_OPS

__all__ = ["FAMILIES", "family_of", "OpFeatures", "op_features", "feature_vector", "FEATURE_NAMES",
           "CONV_FEATURE_NAMES"]

FAMILIES = ("conv", "matmul", "elementwise", "pool", "norm", "softmax", "data", "other")
FEATURE_NAMES = ("log_flops", "log_bytes", "log_out", "log_k")
#: Convolutions have one more: 1 for a depthwise Conv off onnxruntime's fast path (channels not a
#: multiple of 4, see :func:`gspo.ir.features.is_misaligned_depthwise`), else 0.
CONV_FEATURE_NAMES = FEATURE_NAMES + ("slow_depthwise",)


def family_of(node: Node) -> str:
    op = node.op_type
    if node.is_opaque:
        return "other"
    if op in ("Conv", "ConvTranspose"):
        return "conv"
    if op in ("MatMul", "Gemm"):
        return "matmul"
    if op in UNARY_OPS or op in BINARY_OPS or op in ("Sum", "Where", "Erf"):
        return "data" if op in ("Identity", "Dropout") else "elementwise"
    if op in ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceSum", "ReduceMax"):
        return "pool"
    if op in ("BatchNormalization", "LayerNormalization"):
        return "norm"
    if op in ("Softmax", "LogSoftmax"):
        return "softmax"
    if op in DATA_MOVEMENT_OPS:
        return "data"
    return "other"


@dataclass(frozen=True)
class OpFeatures:
    family: str
    flops: float
    bytes: float
    out_elems: float
    k: float  # reduction length: MACs per output element (1 for non-linear-algebra ops)
    slow_depthwise: float = 0.0


def op_features(graph: Graph, node: Node) -> OpFeatures:
    f = node_features(graph, node)
    out = sum(
        math.prod(v.shape) for v in node.outputs if v.name and v.is_static
    )
    k = f.macs / out if f.macs and out else 1.0
    return OpFeatures(family_of(node), float(f.flops), float(f.bytes_read + f.bytes_written), float(out), float(k),
                      1.0 if is_misaligned_depthwise(graph, node) else 0.0)


def feature_vector(f: OpFeatures) -> list[float]:
    """The regression's inputs: log10 features (``FEATURE_NAMES``; ``CONV_FEATURE_NAMES`` for convolutions)."""
    v = [math.log10(f.flops + 1), math.log10(f.bytes + 1), math.log10(f.out_elems + 1), math.log10(f.k + 1)]
    return v + [f.slow_depthwise] if f.family == "conv" else v
