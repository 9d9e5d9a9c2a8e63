"""Conversions between ONNX protobuf messages and gspo's IR: nodes, attributes, values."""

from __future__ import annotations

import functools

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from gspo.ir.graph import Attr, Graph, Node, Value

__all__ = ["STREAM_KEY", "attr_from_proto", "attr_to_proto", "control_flow_depth", "is_understood", "node_attrs",
           "node_from_proto", "node_to_proto", "set_stream", "stream_of", "subgraph_reads", "tensor_value", "type_of",
           "unique_name", "value_info", "value_of"]

#: The key of a node's stream id in ``NodeProto.metadata_props``.
STREAM_KEY = "gspo.stream"
_SUBGRAPH_TYPES = (AttributeProto.GRAPH, AttributeProto.GRAPHS)
_PROTO_ATTRS = {
    AttributeProto.TENSOR: ("t", TensorProto),
    AttributeProto.SPARSE_TENSOR: ("sparse_tensor", onnx.SparseTensorProto),
    AttributeProto.TYPE_PROTO: ("tp", onnx.TypeProto),
}
_PROTO_LIST_ATTRS = {
    AttributeProto.TENSORS: ("tensors", TensorProto),
    AttributeProto.SPARSE_TENSORS: ("sparse_tensors", onnx.SparseTensorProto),
    AttributeProto.TYPE_PROTOS: ("type_protos", onnx.TypeProto),
}


def type_of(vi: onnx.ValueInfoProto) -> tuple:
    """The element type and shape a ValueInfoProto declares: ``(dtype, shape)`` for a tensor
    (``(0, None)`` when it declares no type), ``(0, None, type_proto)`` for a value of another
    type (sequence, map, optional, sparse tensor), its ``TypeProto`` serialized."""
    if not vi.type.HasField("tensor_type"):
        if vi.type.WhichOneof("value") is None:
            return (0, None)
        return (0, None, vi.type.SerializeToString())
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return (tt.elem_type, None)
    dims = tuple(
        int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim
    )
    return (tt.elem_type, dims)


def value_of(vi: onnx.ValueInfoProto, values) -> Value:
    """The IR value of ``vi``, with the inferred type and shape where ``values`` has them."""
    return Value(vi.name, *(values.get(vi.name) or type_of(vi)))


def is_understood(n: onnx.NodeProto) -> bool:
    """Whether gspo interprets the node (a default-domain op with a schema and no subgraph)."""
    if n.domain not in ("", "ai.onnx"):
        return False
    if any(a.type in _SUBGRAPH_TYPES for a in n.attribute):
        return False
    return onnx.defs.has(n.op_type)


def attr_from_proto(a: AttributeProto) -> Attr:
    """The IR attribute of an AttributeProto (proto-valued ones kept serialized)."""
    if a.type in _PROTO_ATTRS:
        field_name, _ = _PROTO_ATTRS[a.type]
        return Attr(a.name, a.type, getattr(a, field_name).SerializeToString())
    if a.type in _PROTO_LIST_ATTRS:
        field_name, _ = _PROTO_LIST_ATTRS[a.type]
        return Attr(a.name, a.type, tuple(x.SerializeToString() for x in getattr(a, field_name)))
    value = helper.get_attribute_value(a)
    if isinstance(value, list):
        value = tuple(value)
    return Attr(a.name, a.type, value)


def attr_to_proto(a: Attr) -> AttributeProto:
    """The AttributeProto of an IR attribute."""
    if a.type in _PROTO_ATTRS:
        field_name, cls = _PROTO_ATTRS[a.type]
        proto = AttributeProto(name=a.name, type=a.type)
        getattr(proto, field_name).CopyFrom(cls.FromString(a.value))
        return proto
    if a.type in _PROTO_LIST_ATTRS:
        field_name, cls = _PROTO_LIST_ATTRS[a.type]
        proto = AttributeProto(name=a.name, type=a.type)
        getattr(proto, field_name).extend(cls.FromString(x) for x in a.value)
        return proto
    return helper.make_attribute(a.name, list(a.value) if isinstance(a.value, tuple) else a.value, attr_type=a.type)


def subgraph_reads(g: onnx.GraphProto) -> set[str]:
    """Names a subgraph reads from enclosing scopes."""
    defined = {vi.name for vi in g.input} | {t.name for t in g.initializer}
    defined |= {t.values.name for t in g.sparse_initializer}
    reads: set[str] = set()
    for n in g.node:
        reads.update(i for i in n.input if i and i not in defined)
        for a in n.attribute:
            for sub in ([a.g] if a.type == AttributeProto.GRAPH else list(a.graphs)):
                reads.update(r for r in subgraph_reads(sub) if r not in defined)
        defined.update(n.output)
    reads.update(o.name for o in g.output if o.name not in defined)
    return reads


def stream_of(n: onnx.NodeProto) -> int | None:
    """The stream id gspo recorded in the node's metadata, if any."""
    for p in n.metadata_props:
        if p.key == STREAM_KEY:
            try:
                return int(p.value)
            except ValueError:
                return None
    return None


def node_from_proto(n: onnx.NodeProto, values, outer: set[str]) -> Node:
    """The IR node of ``n``; one gspo does not interpret is kept as its bytes (opaque), with the
    outer-scope values its subgraphs read (``outer``: the names defined so far)."""
    outputs = tuple(Value(o, *values.get(o, (0, None))) if o else Value("", 0, None) for o in n.output)
    stream = stream_of(n)
    if is_understood(n):
        return Node(
            op_type=n.op_type,
            inputs=tuple(n.input),
            outputs=outputs,
            attrs=tuple(attr_from_proto(a) for a in n.attribute),
            domain=n.domain,
            name=n.name,
            stream=stream,
        )
    implicit: set[str] = set()
    for a in n.attribute:
        for sub in ([a.g] if a.type == AttributeProto.GRAPH else list(a.graphs) if a.type == AttributeProto.GRAPHS else []):
            implicit |= subgraph_reads(sub)
    clean = onnx.NodeProto()
    clean.CopyFrom(n)
    set_stream(clean, None)
    return Node(
        op_type=n.op_type,
        inputs=tuple(n.input),
        outputs=outputs,
        domain=n.domain,
        name=n.name,
        stream=stream,
        opaque=clean.SerializeToString(),
        implicit_inputs=tuple(sorted(i for i in implicit & outer if i not in n.input)),
    )


def set_stream(proto: onnx.NodeProto, stream: int | None) -> None:
    """Record ``stream`` in the node's metadata (``None``: remove it)."""
    keep = [(p.key, p.value) for p in proto.metadata_props if p.key != STREAM_KEY]
    del proto.metadata_props[:]
    for k, v in keep:
        proto.metadata_props.add(key=k, value=v)
    if stream is not None:
        proto.metadata_props.add(key=STREAM_KEY, value=str(stream))


def value_info(v: Value) -> onnx.ValueInfoProto:
    """The ValueInfoProto of an IR value (symbolic dimensions kept by name; a value that is not
    a tensor with its own type; a tensor of unknown element type with its name alone)."""
    if v.type_proto:
        return onnx.ValueInfoProto(name=v.name, type=onnx.TypeProto.FromString(v.type_proto))
    if v.dtype == 0:
        return onnx.ValueInfoProto(name=v.name)
    shape = None if v.shape is None else [d if isinstance(d, int) else (None if d == "?" else d) for d in v.shape]
    return helper.make_tensor_value_info(v.name, v.dtype, shape)


def unique_name(label: str, taken: set[str]) -> str | None:
    """Node names must be unique in ONNX; labels a rewrite duplicated get a suffix."""
    if not label:
        return None
    name, k = label, 1
    while name in taken:
        name, k = f"{label}__{k}", k + 1
    taken.add(name)
    return name


def node_to_proto(n: Node, labels: set[str]) -> onnx.NodeProto:
    """The NodeProto of an IR node (an opaque one as it was loaded), its stream recorded;
    ``labels``: the node names used so far (a duplicate gets a suffix)."""
    if n.opaque is not None:
        proto = onnx.NodeProto.FromString(n.opaque)
    else:
        proto = helper.make_node(n.op_type, list(n.inputs), list(n.output_names), name=unique_name(n.name, labels),
                                 domain=n.domain or None)
        proto.attribute.extend(attr_to_proto(a) for a in n.attrs)
    set_stream(proto, n.stream)
    return proto


def tensor_value(data: bytes) -> np.ndarray:
    """The array of a TENSOR attribute's value (a serialized ``TensorProto``, as :class:`Attr` holds it)."""
    return numpy_helper.to_array(TensorProto.FromString(data))


@functools.lru_cache(maxsize=1024)
def _opaque_attrs(proto: bytes) -> tuple[Attr, ...]:
    return tuple(attr_from_proto(a) for a in onnx.NodeProto.FromString(proto).attribute)


def node_attrs(node: Node) -> tuple[Attr, ...]:
    """A node's attributes; an opaque node's (kept as its serialized proto) read from its bytes."""
    return _opaque_attrs(node.opaque) if node.is_opaque else node.attrs


_CONTROL_FLOW = frozenset({"If", "Loop", "Scan"})
#: A NodeProto's op_type (field 4) of each control-flow op, as serialized: a model without any
#: of them is not parsed again to count its nesting.
_CONTROL_FLOW_TAGS = (b'"\x02If', b'"\x04Loop', b'"\x04Scan')


def _nesting(nodes) -> int:
    """The deepest control-flow nesting of NodeProtos ``nodes`` (counted without recursion)."""
    deepest = 0
    todo = [(n, 0) for n in nodes]
    while todo:
        node, above = todo.pop()
        level = above + (node.op_type in _CONTROL_FLOW)
        deepest = max(deepest, level)
        for a in node.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                todo.extend((n, level) for n in g.node)
    return deepest


def control_flow_depth(model: bytes | Graph) -> int | None:
    """How deep control flow (If, Loop, Scan) is nested in ``model``, a graph or a serialized
    model (0: none; ``None``: nested too deep for protobuf to parse)."""
    if isinstance(model, Graph):
        return max((_nesting([onnx.NodeProto.FromString(n.opaque)]) for n in model.nodes if n.is_opaque), default=0)
    if not any(tag in model for tag in _CONTROL_FLOW_TAGS):
        return 0
    try:
        return _nesting(onnx.ModelProto.FromString(model).graph.node)
    except Exception:
        return None
