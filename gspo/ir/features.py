"""Per-node cost features: FLOPs, multiply-accumulates, bytes moved, parameters.

Conventions: a multiply-accumulate (MAC) counts as 2 FLOPs; elementwise ops count one FLOP per
output element (``Sigmoid``, ``Tanh``, ``Erf``, ``Gelu`` and friends count the same: they are a
few instructions each, and the cost model learns the per-op factor); data movement ops
(``Reshape``, ``Concat``, ``Split``, ``Transpose``, ...) count 0 FLOPs but their bytes.
Bytes are ``read`` (every input tensor, weights included) and ``written`` (every output).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gspo.ir.graph import Graph, Node, Value
from gspo.ir.shapes import BINARY_OPS, COMPARE_OPS, UNARY_OPS
from gspo.ir.weights import np_dtype

__all__ = ["NodeFeatures", "node_features", "graph_features", "GraphFeatures", "DATA_MOVEMENT_OPS",
           "DEPTHWISE_CHANNEL_MULTIPLE", "depthwise_channels", "is_misaligned_depthwise"]

#: onnxruntime's CPU depthwise convolution takes its blocked (NCHWc) kernel only when the channel
#: count is a multiple of this; otherwise it runs one small GEMM per channel, 3-4x slower
#: (measured in ``gspo/rules/enlarge.py``). The cost model has it as a feature; the rule
#: ``PadDepthwiseChannels`` pads to it.
DEPTHWISE_CHANNEL_MULTIPLE = 4

DATA_MOVEMENT_OPS = frozenset(
    "Reshape Flatten Squeeze Unsqueeze Identity Concat Split Slice Transpose Pad Gather Shape "
    "Constant ConstantOfShape Cast Expand Tile Dropout".split()
)


@dataclass(frozen=True)
class NodeFeatures:
    """What one node computes and moves: MACs, FLOPs and bytes read and written."""
    macs: int
    flops: int
    bytes_read: int
    bytes_written: int
    params: int

    @property
    def is_compute(self) -> bool:
        """Whether the node does arithmetic (any FLOPs)."""
        return self.flops > 0


@dataclass(frozen=True)
class GraphFeatures:
    """A graph's totals of the node features."""
    nodes: int
    macs: int
    flops: int
    bytes_read: int
    bytes_written: int
    params: int
    param_bytes: int


def numel(v: Value | None) -> int:
    """Elements of a static value (0 when unknown or dynamic)."""
    if v is None or not v.is_static:
        return 0
    return math.prod(v.shape)  # exact (numpy's int64 product wraps around)


def nbytes(v: Value | None) -> int:
    """Bytes of a value (0 when its size or type is unknown)."""
    if v is None:
        return 0
    try:
        return numel(v) * np_dtype(v.dtype).itemsize
    except (KeyError, TypeError, ValueError):
        return 0


def _macs(node: Node, ins: list[Value | None], outs: tuple[Value, ...]) -> int:
    op = node.op_type
    if op == "Conv" and ins[1] is not None and ins[1].is_static:
        w = ins[1].shape
        return numel(outs[0]) * int(np.prod(w[1:]))
    if op == "ConvTranspose" and ins[1] is not None and ins[1].is_static:
        w = ins[1].shape
        return numel(ins[0]) * int(np.prod(w[1:]))
    # The shapes below are what gspo holds, which may be wrong for ops onnx cannot infer (a
    # rank-0 shape reached a MatMul): a shape that cannot be the op's counts no MACs.
    if op == "MatMul" and len(ins) >= 2 and all(v is not None and v.is_static for v in ins[:2]) \
            and len(ins[0].shape) >= 1:
        return numel(outs[0]) * ins[0].shape[-1]  # A[..., k] @ B[..., k, n] (k = len(A) for a vector)
    if op == "Gemm" and ins and ins[0] is not None and ins[0].is_static and len(ins[0].shape) == 2:
        k = ins[0].shape[0] if node.attr("transA", 0) else ins[0].shape[1]
        return numel(outs[0]) * k
    return 0


def _other_flops(node: Node, ins: list[Value | None], outs: tuple[Value, ...]) -> int:
    op = node.op_type
    out = numel(outs[0]) if outs else 0
    if op in ("Conv", "ConvTranspose", "Gemm"):
        return out if len(ins) > 2 and ins[2] is not None else 0
    if op == "BatchNormalization":
        return 2 * out
    if op in ("MaxPool", "AveragePool"):
        return out * int(np.prod(node.attr("kernel_shape", (1,))))
    if op in ("GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceSum", "ReduceMax"):
        return numel(ins[0])
    if op in ("Softmax", "LogSoftmax"):
        return 4 * out
    if op == "LayerNormalization":
        return 8 * out
    if op in UNARY_OPS and op not in ("Identity", "Dropout"):
        return out
    if op in BINARY_OPS or op in COMPARE_OPS or op in ("Sum", "Where"):
        return out
    return 0


def node_features(graph: Graph, node: Node) -> NodeFeatures:
    """Features of one node of ``graph`` (unknown shapes count as 0)."""
    values = graph.values
    ins = [values.get(name) if name else None for name in node.inputs]
    macs = _macs(node, ins, node.outputs)
    flops = 2 * macs + _other_flops(node, ins, node.outputs)
    params = sum(
        numel(v)
        for name, v in zip(node.inputs, ins)
        if name and graph.is_weight(name) and v is not None and np_dtype(v.dtype).kind == "f"
    )
    return NodeFeatures(
        macs=int(macs),
        flops=int(flops),
        bytes_read=sum(nbytes(v) for v in ins),
        bytes_written=sum(nbytes(v) for v in node.outputs),
        params=int(params),
    )


def graph_features(graph: Graph) -> GraphFeatures:
    """Sums over nodes; ``params`` counts every floating-point weight once."""
    feats = [node_features(graph, n) for n in graph.nodes]
    float_weights = [w for w in graph.weights.values() if np_dtype(w.dtype).kind == "f"]
    return GraphFeatures(
        nodes=len(graph.nodes),
        macs=sum(f.macs for f in feats),
        flops=sum(f.flops for f in feats),
        bytes_read=sum(f.bytes_read for f in feats),
        bytes_written=sum(f.bytes_written for f in feats),
        params=sum(w.size for w in float_weights),
        param_bytes=sum(w.size * np_dtype(w.dtype).itemsize for w in float_weights),
    )


def depthwise_channels(graph: Graph, node: Node) -> int | None:
    """The channel count of a depthwise Conv (one input and one output channel per group), else ``None``."""
    if node.op_type != "Conv" or node.is_opaque or len(node.inputs) < 2:
        return None
    w = graph.values.get(node.inputs[1])
    group = node.attr("group", 1)
    if w is None or not w.is_static or len(w.shape) < 3 or group == 1:
        return None
    return group if w.shape[1] == 1 and w.shape[0] == group else None


def is_misaligned_depthwise(graph: Graph, node: Node) -> bool:
    """A depthwise Conv whose channel count is not a multiple of :data:`DEPTHWISE_CHANNEL_MULTIPLE`
    (what the cost model's feature and the rule ``PadDepthwiseChannels`` both go by)."""
    c = depthwise_channels(graph, node)
    return c is not None and c % DEPTHWISE_CHANNEL_MULTIPLE != 0
