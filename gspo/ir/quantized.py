"""The ONNX side of quantizing a gspo graph with onnxruntime's quantizers (which take and give
``ModelProto``s): the model they are given, with every node named; the graph read back from what
they made; excluded nodes rewired to float values (:mod:`gspo.runtime.quantize` runs them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

import numpy as np
import onnx

from gspo.errors import GspoError, first_line
from gspo.ir.graph import Graph, Node
from gspo.ir.onnx_io import load_bytes, to_model
from gspo.ir.protos import unique_name, value_info

__all__ = ["INFER_KEY", "from_quantized", "gemms_as_matmuls", "named_model", "rewire_excluded"]

#: The metadata entry that tells onnxruntime's quantizers shapes were inferred already (they
#: would otherwise save the model to a file to infer them again), and its value.
INFER_KEY = "onnx.infer"
_INFER_VALUE = "onnxruntime.quant"


def _node_id(node: Node) -> str | None:
    """The node's id as :func:`gspo.streams.schedule.node_id` gives it (its first named output),
    ``None`` when it has none."""
    return next((v.name for v in node.outputs if v.name), None)


def named_model(graph: Graph) -> tuple[onnx.ModelProto, dict[str, str]]:
    """The model onnxruntime's quantizers are given, and node id -> ``NodeProto`` name.

    Every node gets a unique name (its own when it has one); every value gspo knows the type of
    is listed in ``value_info`` (what the quantizers read types from), and the model is marked
    as shape-inferred so that they do not save it to a file to infer them again. Stream ids are
    dropped (the quantized graph has nodes no schedule knows).
    """
    if any(n.stream is not None for n in graph.nodes):
        graph = graph.with_nodes([n.replace(stream=None) for n in graph.nodes])
    model = to_model(graph)
    taken = {p.name for p in model.graph.node if p.name}
    seen: set[str] = set()
    names: dict[str, str] = {}
    for n, p in zip(graph.nodes, model.graph.node):
        if not p.name or p.name in seen:
            p.name = unique_name(f"{p.op_type}_{_node_id(n) or 'node'}", taken)
        seen.add(p.name)
        if _node_id(n) is not None:
            names[_node_id(n)] = p.name
    io = {v.name for v in graph.inputs} | set(graph.output_names())
    dynamic = bool(graph.extras.static_refused)
    del model.graph.value_info[:]
    model.graph.value_info.extend(
        value_info(dataclasses.replace(v, shape=None) if dynamic else v)
        for n in graph.nodes for v in n.outputs if v.name and v.is_tensor and v.name not in io)
    model.metadata_props.add(key=INFER_KEY, value=_INFER_VALUE)
    return model, names


def from_quantized(model: onnx.ModelProto, like: Graph) -> Graph:
    """The quantized ``model`` as a graph, pinned and described as ``like`` was."""
    props = [(p.key, p.value) for p in model.metadata_props if p.key != INFER_KEY]
    del model.metadata_props[:]
    for k, v in props:
        model.metadata_props.add(key=k, value=v)
    try:
        data = model.SerializeToString()
    except ValueError as e:
        raise GspoError(f"the quantized model cannot be serialized: {first_line(e)}") from None
    shapes = {v.name: v.shape for v in like.inputs if v.is_static}
    out = load_bytes(data, shapes, label="<quantized model>")
    ex = like.extras
    return dataclasses.replace(out, extras=dataclasses.replace(
        out.extras, dynamic_io=ex.dynamic_io, defaulted=ex.defaulted, static_refused=ex.static_refused))


def rewire_excluded(model: onnx.ModelProto, excluded: set[str]) -> None:
    """Rewire the nodes named ``excluded`` to read the float value before each activation's
    QuantizeLinear -> DequantizeLinear pair (``QDQQuantizer`` feeds every consumer of a tensor
    it quantized from the pair), then drop the pairs and constants nothing reads any more."""
    producer = {o: p for p in model.graph.node for o in p.output}
    for p in model.graph.node:
        if p.name not in excluded:
            continue
        for i, name in enumerate(p.input):
            dq = producer.get(name)
            q = producer.get(dq.input[0]) if dq is not None and dq.op_type == "DequantizeLinear" else None
            if q is not None and q.op_type == "QuantizeLinear":
                p.input[i] = q.input[0]
    outputs = {o.name for o in model.graph.output}
    for op in ("DequantizeLinear", "QuantizeLinear"):
        read = {i for p in model.graph.node for i in p.input} | outputs
        dead = [p for p in model.graph.node if p.op_type == op and not any(o in read for o in p.output)]
        for p in dead:
            model.graph.node.remove(p)
    read = {i for p in model.graph.node for i in p.input} | outputs
    kept = [t for t in model.graph.initializer if t.name in read]
    if len(kept) != len(model.graph.initializer):
        del model.graph.initializer[:]
        model.graph.initializer.extend(kept)


def gemms_as_matmuls(model, names: Collection[str]) -> None:
    """Each Gemm of ``model`` named in ``names`` (alpha 1, transA 0, beta 1, a constant 2-D B: the
    caller's check) in place as a MatMul of the same name, of B transposed into an initializer of
    its own where transB, and, with a bias, an Add of it named ``<name>/bias`` that writes the
    Gemm's output: the same products and sum."""
    from onnx import helper, numpy_helper

    if not names:
        return
    inits = {t.name: t for t in model.graph.initializer}
    nodes = []
    for n in model.graph.node:
        if n.op_type != "Gemm" or n.name not in names:
            nodes.append(n)
            continue
        b = n.input[1]
        if any(a.name == "transB" and a.i for a in n.attribute):
            t = numpy_helper.from_array(np.ascontiguousarray(numpy_helper.to_array(inits[b]).T), f"{b}/{n.name}/T")
            model.graph.initializer.append(t)
            b = t.name
        bias = n.input[2] if len(n.input) > 2 and n.input[2] else None
        product = f"{n.output[0]}/matmul" if bias else n.output[0]
        nodes.append(helper.make_node("MatMul", [n.input[0], b], [product], name=n.name))
        if bias:
            nodes.append(helper.make_node("Add", [product, bias], [n.output[0]], name=f"{n.name}/bias"))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
