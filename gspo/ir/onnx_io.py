"""ONNX load and save: the only place where gspo parses or writes ONNX protobufs.

``load`` checks the model, pins dynamic input dimensions, infers shapes and builds a
:class:`~gspo.ir.graph.Graph`; ``save`` materializes lazy weights, writes stream ids into
``NodeProto.metadata_props`` and the schedule into the model's ``metadata_props``, and stamps an
IR version the installed onnxruntime accepts.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import onnx
from google.protobuf.message import EncodeError
from onnx import helper

from gspo.errors import InputShapeError, ModelLoadError
from gspo.errors import first_line as _first_line
from gspo.ir import frontend
from gspo.ir.checks import (
    MIN_OPSET,
    check_model,
    check_sizes,
    check_text,
    negative_dims_unknown,
)
from gspo.ir.digests import digest
from gspo.ir.external import check_external_data, inline_bytes, inline_tensor, tensor_bytes
from gspo.ir.external_save import save_external
from gspo.ir.files import read_model_file
from gspo.ir.graph import Graph, ModelExtras
from gspo.ir.onnx_shapes import STRIP_ELEMENTS, infer_values
from gspo.ir.order import topologically_sorted
from gspo.ir.pinning import pin_inputs
from gspo.ir.protos import STREAM_KEY, node_from_proto, node_to_proto, value_info, value_of
from gspo.ir.weights import Init, WeightStore, materialize, materialized_bytes
from gspo.ir.wire import with_initializers
from gspo.outputs import atomic_write

__all__ = [
    "load",
    "load_bytes",
    "from_model",
    "to_model",
    "save",
    "serialize",
    "parse_input_shapes",
    "node_op_types",
    "saved_metadata",
    "saved_plan",
    "check_graph",
    "save_bytes",
    "read_model_file",
    "uses_external_data",
    "external_dir",
    "MAX_IR_VERSION",
    "MIN_OPSET",
    "STREAM_KEY",
    "SCHEDULE_KEY",
    "PLACEMENT_KEY",
]

log = logging.getLogger(__name__)

#: Highest IR version the supported onnxruntime (1.31) reads; onnx 1.23 stamps 14 by default.
MAX_IR_VERSION = 13
SCHEDULE_KEY = "gspo.schedule"
PLACEMENT_KEY = "gspo.placement"


# ---------------------------------------------------------------------- loading
def node_op_types(path: str | os.PathLike) -> list[str]:
    """The op type of every top-level node of the model at ``path``, in order, whatever its
    domain (e.g. the optimized model onnxruntime writes, with its own fused and layout ops)."""
    return [n.op_type for n in onnx.load(os.fspath(path), load_external_data=False).graph.node]


def saved_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The metadata of the model at ``path`` (``gspo optimize``'s schedule, placement and
    settings among it), read without its weights.

    Raises:
        ModelLoadError: the file cannot be read as an ONNX model.
    """
    try:
        model = onnx.load(os.fspath(path), load_external_data=False)
    except Exception as e:
        raise ModelLoadError(f"{path}: not an ONNX model ({_first_line(e)})") from None
    return {p.key: p.value for p in model.metadata_props}


def saved_plan(path: str | os.PathLike) -> tuple[str, str]:
    """The schedule and placement JSON ``gspo optimize`` saved in the model at ``path`` (""
    for each it did not save), read without its weights (see :func:`saved_metadata`)."""
    props = saved_metadata(path)
    return props.get(SCHEDULE_KEY, ""), props.get(PLACEMENT_KEY, "")


def parse_input_shapes(specs: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """Parse ``name=1,3,224,224`` strings (as given to ``--input-shape``)."""
    out: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        name, sep, dims = spec.rpartition("=")
        try:
            shape = tuple(int(d) for d in dims.split(",")) if dims.strip() else ()
        except ValueError:
            shape = None
        if not sep or not name or shape is None or any(d < 0 for d in shape):
            raise InputShapeError(
                f"bad --input-shape {spec!r}: expected NAME=D1,D2,... with non-negative integers"
            )
        out[name] = shape
    return out


def load(path: str | os.PathLike, input_shapes: Mapping[str, Sequence[int]] | None = None,
         plain: bool = False, refusal: Callable[[bytes], str | None] | None = None) -> Graph:
    """Load, check and shape-infer an ONNX file.

    Args:
        path: the ``.onnx`` file. External data must lie in its directory (or below).
        input_shapes: static shapes for graph inputs, replacing dynamic dimensions (the others
            get defaults, see :func:`from_model`).
        plain: pass the model through the front end first (:func:`gspo.ir.frontend.plain`).
        refusal: why the runtime refuses a serialized model (``None``: it loads it), to check
            a model with control flow once pinned (see :func:`from_model`).

    Raises:
        ModelLoadError, UnsupportedModelError, InputShapeError: with a one-line message.
    """
    p = Path(path)
    return load_bytes(read_model_file(p), input_shapes, base_dir=str(p.resolve().parent), label=str(p), plain=plain,
                      refusal=refusal, path=p)


def load_bytes(
    data: bytes,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    base_dir: str | None = None,
    label: str = "<model>",
    plain: bool = False,
    refusal: Callable[[bytes], str | None] | None = None,
    path: str | os.PathLike | None = None,
) -> Graph:
    """Like :func:`load`, from serialized bytes (external data resolved against ``base_dir``;
    ``path``: the file the bytes were read from, for onnx's checker to read its external data).

    Weights kept in external data are not read: the graph refers to them in their files
    (``graph.store``, read when a rewrite or a save needs their values), so that a model past
    protobuf's 2 GB limit loads, checks and runs without a copy of its weights in memory.
    """
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception:
        raise ModelLoadError(f"{label}: not an ONNX model (the protobuf does not parse)") from None
    if not data or not model.HasField("graph") or not model.opset_import:
        raise ModelLoadError(f"{label}: not an ONNX model (no graph or no opset)")
    check_text(model, label)
    external = check_external_data(model, base_dir, label)
    if external and path is not None:
        try:
            onnx.checker.check_model(os.fspath(path))  # the path API: external data read from files
        except Exception as e:
            raise ModelLoadError(f"{label}: fails the ONNX checker: {_first_line(e)}") from None
    graph = from_model(model, input_shapes, label=label, plain=plain, base_dir=base_dir if external else "",
                       refusal=refusal)
    if external:
        graph = dataclasses.replace(graph, extras=dataclasses.replace(graph.extras, external_data=True))
    return graph


def _extras(model: onnx.ModelProto, weight_names: set[str], defaulted, dynamic_io) -> ModelExtras:
    """What a model holds besides its graph, kept to be written back as it was."""
    g = model.graph
    return ModelExtras(
        ir_version=int(model.ir_version),
        producer_name=model.producer_name,
        producer_version=model.producer_version,
        domain=model.domain,
        model_version=int(model.model_version),
        doc_string=model.doc_string,
        graph_doc_string=g.doc_string,
        metadata=tuple((p.key, p.value) for p in model.metadata_props if p.key not in (SCHEDULE_KEY, PLACEMENT_KEY)),
        functions=tuple(f.SerializeToString() for f in model.functions),
        value_info=tuple(vi.SerializeToString() for vi in g.value_info),
        weight_inputs=tuple(vi.name for vi in g.input if vi.name in weight_names),
        input_order=tuple(vi.name for vi in g.input),
        schedule=next((p.value for p in model.metadata_props if p.key == SCHEDULE_KEY), ""),
        placement=next((p.value for p in model.metadata_props if p.key == PLACEMENT_KEY), ""),
        sparse_initializers=tuple(s.SerializeToString() for s in g.sparse_initializer),
        defaulted=defaulted,
        dynamic_io=dynamic_io,
    )


def from_model(
    model: onnx.ModelProto,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    label: str = "<model>",
    plain: bool = False,
    refusal: Callable[[bytes], str | None] | None = None,
    base_dir: str = "",
) -> Graph:
    """Build a :class:`Graph` from an in-memory ``ModelProto`` (external data loaded, or read
    from ``base_dir`` when needed).

    Dynamic input dimensions that ``input_shapes`` does not pin get a default value
    (:func:`gspo.ir.pinning.default_pins`), recorded in ``graph.extras.defaulted``. With
    ``plain`` the model first goes through the front end (:func:`gspo.ir.frontend.plain`):
    folded constants and shape arithmetic, ``Constant`` weights as initializers.

    ``refusal`` (serialized model -> why the runtime refuses it, or ``None``) checks a model
    with control flow once its inputs are pinned: a runtime infers shapes in every branch of an
    ``If``, the branches the inputs never take included, and one of those may hold only at
    other sizes. When it refuses the pinned model, the model is kept with the inputs and
    outputs it declares (folded only where that holds at every size); the pins then hold only
    inside gspo (``graph.extras.static_refused`` says why).
    """
    model = topologically_sorted(model, label)
    opsets = check_model(model, label)
    model = negative_dims_unknown(model)
    pinned, defaulted, dynamic_io = frontend.pinned_model(model, input_shapes or {}, label, plain)
    graph = _graph(pinned, opsets, _extras(pinned, _weight_names(pinned), defaulted, dynamic_io), label,
                   base_dir=base_dir)
    if refusal is None or not (input_shapes or defaulted) or not _has_subgraphs(model):
        return graph
    why = refusal(serialize(graph))
    if why is None:
        return graph
    pins = {v.name: v.shape for v in graph.inputs if v.is_static}
    # folded where that holds at every size (unless the runtime refuses that too), else as given
    for given in ([frontend.fold(model, label)] if plain else []) + [model]:
        declared = _declared(given, pins, opsets, defaulted, why, label, base_dir)
        if refusal(serialize(declared)) is None:
            log.info("%s: onnxruntime refuses the model with its inputs pinned (%s); keeping them as declared",
                     label, why)
            return declared
    return graph  # refused as declared too: not a matter of the pins


def _declared(model: onnx.ModelProto, pins, opsets, defaulted, why: str, label: str, base_dir: str = "") -> Graph:
    """The graph of ``model`` written with the inputs and outputs it declares, its values
    shaped as with ``pins`` (``why``: the runtime's reason to refuse the pinned model)."""
    weights = _weight_names(model)
    declared = tuple(vi.SerializeToString() for vi in list(model.graph.input) + list(model.graph.output)
                     if vi.name not in weights)
    extras = dataclasses.replace(_extras(model, weights, defaulted, declared), static_refused=why)
    return _graph(model, opsets, extras, label, values_from=pin_inputs(model, pins), base_dir=base_dir)


def _weight_names(model: onnx.ModelProto) -> set[str]:
    return {t.name for t in model.graph.initializer}


def _real_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    weights = _weight_names(model)
    return [vi for vi in model.graph.input if vi.name not in weights]


def _has_subgraphs(model: onnx.ModelProto) -> bool:
    """Whether a node of the main graph holds a subgraph (If, Loop, Scan, ...)."""
    subgraph_types = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
    return any(a.type in subgraph_types for n in model.graph.node for a in n.attribute)


def _graph(model: onnx.ModelProto, opsets, extras: ModelExtras, label: str,
           values_from: onnx.ModelProto | None = None, base_dir: str = "") -> Graph:
    """The checked :class:`Graph` of ``model``, with the shapes inferred on ``values_from``
    (``model`` itself by default; the same graph with other input shapes); weights kept in
    external data are read from ``base_dir`` when needed."""
    g = model.graph
    weight_names = _weight_names(model)
    real_inputs = _real_inputs(model)
    values = infer_values(values_from if values_from is not None else model, label)
    check_sizes(values, label)
    weights = {}
    for t in g.initializer:
        payload = t.raw_data if t.HasField("raw_data") else t.SerializeToString()
        weights[t.name] = Init(t.name, t.data_type, tuple(int(d) for d in t.dims), digest(payload))

    outer = {vi.name for vi in real_inputs} | weight_names
    nodes = []
    for n in g.node:
        nodes.append(node_from_proto(n, values, outer))
        outer.update(o for o in n.output if o)

    graph = Graph(
        inputs=tuple(value_of(vi, values) for vi in real_inputs),
        outputs=tuple(value_of(vi, values) for vi in g.output),
        nodes=tuple(nodes),
        weights=weights,
        opsets=opsets,
        name=g.name,
        store=WeightStore({t.name: t for t in g.initializer}, base_dir),
        extras=extras,
    )
    try:
        return graph.check()
    except ValueError as e:
        raise ModelLoadError(f"{label}: {e}") from None


def check_graph(graph: Graph, nodes: Sequence[int] | None = None) -> str | None:
    """Why onnx's checker, with full (strict) shape inference, refuses ``graph``; ``None`` when
    it passes. Large weights are not computed (see ``to_model(..., light=True)``).

    With ``nodes`` (indices), only those nodes are checked, as a graph of their own whose inputs
    carry the shapes gspo's IR gives them: what a rewrite added, in time that does not grow
    with the rest of the graph.
    """
    if nodes is not None:
        from gspo.ir.subgraph import extract

        if not nodes:
            return None
        produced = [v.name for i in nodes for v in graph.nodes[i].outputs if v.name]
        graph, _ = extract(graph, nodes, also_export=produced)
    try:
        onnx.checker.check_model(to_model(graph, light=True), full_check=True)
    except Exception as e:
        return _first_line(e)
    return None


def _ir_version(graph: Graph, opsets) -> int:
    """The original IR version, clamped to what onnxruntime reads; new graphs get the minimum
    their opsets need. (Raising an old model's version would change its semantics: before IR 4
    an initializer listed as an input is a constant, from IR 4 on it is an overridable default.)
    """
    needed = helper.find_min_ir_version_for(list(opsets), ignore_unknown=True)
    ir = graph.extras.ir_version or needed
    if ir > MAX_IR_VERSION:
        ir = max(MAX_IR_VERSION, needed)
    if any(n.stream is not None for n in graph.nodes):
        ir = max(ir, 10)  # NodeProto.metadata_props appeared in IR v10
    return ir


def to_model(graph: Graph, schedule: Mapping | None = None, keep_dynamic: bool = False,
             light: bool = False, placement: Mapping | None = None, inline: bool = True,
             weights: bool = True) -> onnx.ModelProto:
    """The ``ModelProto`` of ``graph`` (weights materialized, streams and schedule recorded).

    With ``keep_dynamic``, graph inputs and outputs keep the dynamic dimensions they were loaded
    with (``graph.extras.dynamic_io``; the graph must compute its shapes from its inputs, which
    only running it at another size shows) and no intermediate shapes are written. With
    ``light``, large weights are not computed: they become graph inputs of their type and
    shape, which is all that checking and shape inference read; and every intermediate value
    gets the shape gspo's IR gives it, for strict shape inference to confirm. With ``inline``
    false, weights the model keeps in external data still refer to their files (in
    ``graph.store.base_dir``: see :func:`external_dir`) instead of being read into the model.
    Without ``weights``, the model has no initializers (:func:`serialize` appends them).
    """
    ex = graph.extras
    keep_dynamic = keep_dynamic or bool(ex.static_refused)
    dynamic = {vi.name: vi for vi in map(onnx.ValueInfoProto.FromString, ex.dynamic_io)} if keep_dynamic else {}
    labels: set[str] = set()
    nodes = [node_to_proto(n, labels) for n in graph.nodes]
    stubbed = {name for name, w in graph.weights.items() if light and w.size > STRIP_ELEMENTS}
    initializers = [materialize(name, w, graph.store, inline) for name, w in graph.weights.items()
                    if name not in stubbed and weights]
    live = set(graph.values)
    infos = [] if dynamic else [
        vi for vi in (onnx.ValueInfoProto.FromString(b) for b in ex.value_info) if vi.name in live]
    if light:  # every shape gspo believes, for strict shape inference to check
        io = {v.name for v in graph.inputs} | set(graph.output_names())
        infos = [value_info(v) for n in graph.nodes if not n.is_opaque for v in n.outputs
                 if v.name and v.name not in io and v.is_static]
    listed = {v.name: v for v in graph.inputs}
    listed.update((name, graph.value(name)) for name in ex.weight_inputs if name in graph.weights)
    order = [name for name in ex.input_order if name in listed]
    order += [name for name in listed if name not in ex.input_order]
    inputs = [dynamic.get(name) or value_info(listed[name]) for name in order]
    inputs += [helper.make_tensor_value_info(name, graph.weights[name].dtype, graph.weights[name].shape)
               for name in stubbed if name not in listed]
    g = helper.make_graph(
        nodes,
        graph.name or "graph",
        inputs,
        [dynamic.get(v.name) or value_info(v) for v in graph.outputs],
        initializer=initializers,
        value_info=infos,
        doc_string=ex.graph_doc_string or None,
        sparse_initializer=[onnx.SparseTensorProto.FromString(b) for b in ex.sparse_initializers],
    )
    return _wrap(graph, g, schedule, placement)


def _wrap(graph: Graph, g: onnx.GraphProto, schedule: Mapping | None, placement: Mapping | None) -> onnx.ModelProto:
    """The model around the graph ``g`` made of ``graph``: its opsets, functions and the model's
    own fields as loaded, its metadata, and the schedule and placement when given."""
    ex = graph.extras
    opsets = [helper.make_opsetid(d, v) for d, v in graph.opsets]
    model = helper.make_model(
        g,
        opset_imports=opsets,
        functions=[onnx.FunctionProto.FromString(b) for b in ex.functions],
        producer_name=ex.producer_name or "gspo",
    )
    model.ir_version = _ir_version(graph, opsets)
    if ex.producer_version:
        model.producer_version = ex.producer_version
    model.domain = ex.domain
    model.model_version = ex.model_version
    model.doc_string = ex.doc_string
    for k, v in ex.metadata:
        model.metadata_props.add(key=k, value=v)
    if schedule is not None:
        model.metadata_props.add(key=SCHEDULE_KEY, value=json.dumps(schedule, sort_keys=True))
    if placement is not None:
        model.metadata_props.add(key=PLACEMENT_KEY, value=json.dumps(placement, sort_keys=True))
    return model


def serialize(graph: Graph, schedule: Mapping | None = None, keep_dynamic: bool = False,
              placement: Mapping | None = None, inline: bool = True) -> bytes:
    """Serialized ONNX bytes of ``graph`` (for running it in memory); see :func:`to_model`.

    Raises:
        ModelLoadError: the model with its weights inline is past protobuf's 2 GB limit (run it
            with ``inline=False``, its external data read from :func:`external_dir`).
    """
    if (held := inline_bytes(graph, inline)) > _INLINE_LIMIT:  # said before any weight is read
        raise ModelLoadError(f"the model cannot be serialized in one piece: its weights held in memory "
                             f"({held / 1e9:.2f} GB) are past protobuf's 2 GB limit")
    try:  # the weights appended one at a time: no copy of them all in a model first
        head = to_model(graph, schedule, keep_dynamic, placement=placement, inline=inline, weights=False)
        return with_initializers(head.SerializeToString(), (materialized_bytes(name, w, graph.store, inline)
                                                             for name, w in graph.weights.items()))
    except (EncodeError, ValueError) as e:  # past protobuf's 2 GB: "Failed to serialize proto"
        raise ModelLoadError(f"the model cannot be serialized in one piece: {_first_line(e)}") from None


#: The most bytes of weights a serialized model may hold in itself (protobuf's limit: 2 GiB).
_INLINE_LIMIT = 2**31 - 1


def external_dir(graph: Graph) -> str:
    """The directory the external data of ``graph``'s original weights is read from ("" if
    they are all in memory): what ``serialize(graph, inline=False)`` refers to (set only for
    a model with external data, and kept by its pieces, which share its store)."""
    return graph.store.base_dir


_EXTERNAL_THRESHOLD = 1_800_000_000


def uses_external_data(graph: Graph) -> bool:
    """Whether the model ``graph`` was loaded from keeps weights in files beside it."""
    return graph.extras.external_data


def save_bytes(data: bytes, path: str | os.PathLike, overwrite: bool = False) -> Path:
    """Write serialized model bytes as they are (refusing to overwrite unless asked, also a
    file that appears at ``path`` while writing)."""
    p = Path(path)
    if p.is_dir():
        raise ModelLoadError(f"{p}: is a directory")
    atomic_write(p, data, overwrite=overwrite)
    return p


def save(
    graph: Graph,
    path: str | os.PathLike,
    schedule: Mapping | None = None,
    overwrite: bool = False,
    keep_dynamic: bool = False,
    placement: Mapping | None = None,
) -> Path:
    """Write ``graph`` as an ONNX file; weights over ~1.8 GB go to ``<file>.data`` beside it
    (written one tensor at a time; weights loaded from external data are copied from their
    files, never all in memory at once). Under that size the file holds its weights.

    ``keep_dynamic``: see :func:`to_model`.

    Raises:
        OutputError: ``path`` (or its ``.data`` file, when written) exists and ``overwrite`` is
            false, also when it appeared while writing; or it cannot be written.
    """
    p = Path(path)
    if p.is_dir():
        raise ModelLoadError(f"{p}: is a directory")
    model = to_model(graph, schedule, keep_dynamic, placement=placement, inline=False)
    base_dir = external_dir(graph)
    if sum(tensor_bytes(t, base_dir) for t in model.graph.initializer) > _EXTERNAL_THRESHOLD:
        save_external(model, p, base_dir, overwrite)
    else:
        for t in model.graph.initializer:
            inline_tensor(t, base_dir)
        atomic_write(p, model.SerializeToString(), overwrite=overwrite)
    return p


