"""What the cost model sees of an op: its family and numeric features."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gspo.ir import Graph, Node, node_features
from gspo.ir.features import DATA_MOVEMENT_OPS, is_misaligned_depthwise
from gspo.ir.shapes import BINARY_OPS, UNARY_OPS

__all__ = ["FAMILIES", "family_of", "OpFeatures", "op_features", "feature_vector", "FEATURE_NAMES",
           "CONV_FEATURE_NAMES", "skip_norm_add"]

#: ``skipnorm`` is a LayerNormalization that onnxruntime fuses with the residual Add before it into
#: one SkipLayerNormalization kernel (see :func:`skip_norm_add`): on this CPU that kernel takes
#: several times as long as the two ops run apart ([1,128,768]: 494 us vs 148 + 166 us including
#: the call, interleaved, ad hoc; the calibration suite measured it at 0.79 ms vs 0.06 ms for the
#: LayerNormalization alone), so it is costed as its own family, with its own microbenchmarks.
#: ``copy`` is data movement that copies every element (Concat, Split, Transpose, ...); ``data`` is
#: data movement onnxruntime can do without touching the elements (Reshape and its kin, Identity,
#: Dropout). One family for both shared one in-context factor between Concats and BERT's Reshapes;
#: split, they moved the held-out error by less than a point (see the README).
FAMILIES = ("conv", "matmul", "elementwise", "pool", "norm", "skipnorm", "softmax", "copy", "data", "other")
#: Data movement without a copy of the elements (the output can alias the input).
ALIASING_OPS = frozenset("Reshape Flatten Squeeze Unsqueeze Identity Dropout Shape Constant".split())
FEATURE_NAMES = ("log_flops", "log_bytes", "log_out", "log_k")
#: Convolutions have one more: 1 for a depthwise Conv off onnxruntime's fast path (channels not a
#: multiple of 4, see :func:`gspo.ir.features.is_misaligned_depthwise`), else 0.
CONV_FEATURE_NAMES = FEATURE_NAMES + ("slow_depthwise",)


def family_of(node: Node) -> str:
    """The op family ``node`` is costed as (conv, matmul, elementwise, ...)."""
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
    if op in ALIASING_OPS:
        return "data"
    if op in DATA_MOVEMENT_OPS:
        return "copy"
    return "other"


#: Element types onnxruntime's SkipLayerNormFusion accepts: float, float16, bfloat16.
_SKIP_NORM_DTYPES = frozenset({1, 10, 16})


def skip_norm_add(graph: Graph, node: Node) -> Node | None:
    """The Add that onnxruntime fuses with ``node`` (a LayerNormalization) into a
    SkipLayerNormalization, or None. Mirrors onnxruntime's ``SkipLayerNormFusion`` (format 3, which
    formats 1 and 2 extend with a bias Add): the normalization's first input comes from an Add
    whose two inputs are 3-D of the same static shape, whose output is read by nothing else and
    is not a graph output."""
    if node.op_type != "LayerNormalization" or node.is_opaque or not node.inputs:
        return None
    prod = graph.producers.get(node.inputs[0])
    if prod is None or prod[0].op_type != "Add" or prod[0].is_opaque:
        return None
    add = prod[0]
    if len(graph.consumers.get(node.inputs[0], ())) != 1 or node.inputs[0] in graph.output_names():
        return None
    if sum(1 for name in node.inputs if name == node.inputs[0]) != 1:
        return None
    values = [graph.values.get(name) for name in add.inputs[:2]]
    if any(v is None or v.dtype not in _SKIP_NORM_DTYPES for v in values):
        return None
    shapes = [v.shape if v.is_static else None for v in values]
    if len(shapes) != 2 or shapes[0] is None or len(shapes[0]) != 3 or shapes[0] != shapes[1]:
        return None
    return add


@dataclass(frozen=True)
class OpFeatures:
    """What an op's cost is fitted on: family, FLOPs, bytes moved, output elements, reduction length."""

    family: str
    flops: float
    bytes: float
    out_elems: float
    k: float  # reduction length: MACs per output element (1 for non-linear-algebra ops)
    slow_depthwise: float = 0.0


def op_features(graph: Graph, node: Node) -> OpFeatures:
    """The cost features of ``node`` in ``graph``."""
    f = node_features(graph, node)
    out = sum(
        math.prod(v.shape) for v in node.outputs if v.name and v.is_static
    )
    k = f.macs / out if f.macs and out else 1.0
    family = "skipnorm" if skip_norm_add(graph, node) is not None else family_of(node)
    return OpFeatures(family, float(f.flops), float(f.bytes_read + f.bytes_written), float(out), float(k),
                      1.0 if is_misaligned_depthwise(graph, node) else 0.0)


def feature_vector(f: OpFeatures) -> list[float]:
    """The regression's inputs: log10 features (``FEATURE_NAMES``; ``CONV_FEATURE_NAMES`` for convolutions)."""
    v = [math.log10(f.flops + 1), math.log10(f.bytes + 1), math.log10(f.out_elems + 1), math.log10(f.k + 1)]
    return v + [f.slow_depthwise] if f.family == "conv" else v
