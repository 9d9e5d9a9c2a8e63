"""The graph IR: immutable hash-consed graphs, lazy weights, ONNX load/save, shapes, features."""

from gspo.ir.features import GraphFeatures, NodeFeatures, graph_features, node_features
from gspo.ir.graph import Attr, Graph, GraphError, ModelExtras, Node, Value, fresh_name, toposort
from gspo.ir.onnx_io import load, load_bytes, parse_input_shapes, save, serialize, to_model
from gspo.ir.shapes import broadcast as broadcast_shapes
from gspo.ir.shapes import infer_shapes
from gspo.ir.weights import (
    Concat,
    Init,
    Literal,
    Pad,
    Random,
    Scale,
    SliceW,
    Weight,
    WeightStore,
    concat,
    slice_weight,
)

__all__ = [
    "Attr",
    "Concat",
    "Graph",
    "GraphError",
    "GraphFeatures",
    "Init",
    "Literal",
    "ModelExtras",
    "Node",
    "NodeFeatures",
    "Pad",
    "Random",
    "Scale",
    "SliceW",
    "Value",
    "Weight",
    "WeightStore",
    "concat",
    "slice_weight",
    "broadcast_shapes",
    "fresh_name",
    "graph_features",
    "infer_shapes",
    "load",
    "load_bytes",
    "node_features",
    "parse_input_shapes",
    "save",
    "serialize",
    "to_model",
    "toposort",
]
