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
import stat
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import onnx
from google.protobuf.message import EncodeError
from onnx import TensorProto, helper

from gspo.errors import InputShapeError, ModelLoadError, UnsupportedModelError
from gspo.errors import first_line as _first_line
from gspo.ir import frontend
from gspo.ir.digests import digest
from gspo.ir.graph import Graph, ModelExtras
from gspo.ir.order import topologically_sorted
from gspo.ir.protos import STREAM_KEY, node_from_proto, node_to_proto, type_of, value_info, value_of
from gspo.ir.weights import Init, WeightStore, materialize
from gspo.outputs import atomic_write, replacing_together

__all__ = [
    "load",
    "load_bytes",
    "from_model",
    "to_model",
    "save",
    "serialize",
    "parse_input_shapes",
    "node_op_types",
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
#: Oldest default-domain opset gspo accepts.
MIN_OPSET = 7
SCHEDULE_KEY = "gspo.schedule"
PLACEMENT_KEY = "gspo.placement"
_STRIP_ELEMENTS = 4096
#: Elements a tensor may hold at most (4 TiB of float32: more than any machine gspo runs on).
MAX_ELEMENTS = 2**40


# ---------------------------------------------------------------------- loading
def node_op_types(path: str | os.PathLike) -> list[str]:
    """The op type of every top-level node of the model at ``path``, in order, whatever its
    domain (e.g. the optimized model onnxruntime writes, with its own fused and layout ops)."""
    return [n.op_type for n in onnx.load(os.fspath(path), load_external_data=False).graph.node]


def saved_plan(path: str | os.PathLike) -> tuple[str, str]:
    """The schedule and placement JSON ``gspo optimize`` saved in the model at ``path`` (""
    for each it did not save), read without its weights.

    Raises:
        ModelLoadError: the file cannot be read as an ONNX model.
    """
    try:
        model = onnx.load(os.fspath(path), load_external_data=False)
    except Exception as e:
        raise ModelLoadError(f"{path}: not an ONNX model ({_first_line(e)})") from None
    props = {p.key: p.value for p in model.metadata_props}
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


#: The largest ONNX file: protobuf parses no message over 2 GiB (larger models keep their
#: weights in external data files).
MAX_MODEL_BYTES = 2**31 - 1


def read_model_file(path: str | os.PathLike) -> bytes:
    """The bytes of a model file, checked before they are read: a regular file (a FIFO or a
    device is refused without waiting on it) of at most :data:`MAX_MODEL_BYTES`.

    Raises:
        ModelLoadError: one line saying what the path is instead.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise ModelLoadError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ModelLoadError(f"{path}: is a directory, not an ONNX file") from None
    except OSError as e:
        raise ModelLoadError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        why = _not_a_model_file(st)
        if why:
            raise ModelLoadError(f"{path}: {why}")
        with os.fdopen(os.dup(fd), "rb") as f:
            return _read_at_most(f, st.st_size, path)
    except OSError as e:
        raise ModelLoadError(f"{path}: cannot read: {e.strerror or e}") from None
    finally:
        os.close(fd)


def _not_a_model_file(st: os.stat_result) -> str:
    """Why a file of this status cannot be an ONNX model ('' when it can)."""
    if stat.S_ISDIR(st.st_mode):
        return "is a directory, not an ONNX file"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file (a device, FIFO or socket), not an ONNX file"
    if st.st_size > MAX_MODEL_BYTES:
        return (f"{st.st_size / 1e9:.1f} GB, larger than an ONNX file can be (2 GiB; larger models keep "
                "their weights in external data files)")
    return ""


def _read_at_most(f, size: int, path) -> bytes:
    """The file's ``size`` bytes, and more if it has more (it grew, or its size is not known),
    up to :data:`MAX_MODEL_BYTES`."""
    chunks = [f.read(size + 1)]
    total = len(chunks[0])
    while total > size and chunks[-1]:
        if total > MAX_MODEL_BYTES:
            raise ModelLoadError(f"{path}: larger than an ONNX file can be (2 GiB)")
        chunks.append(f.read(1 << 24))
        total += len(chunks[-1])
    return b"".join(chunks) if len(chunks) > 1 else chunks[0]


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
    _check_text(model, label)
    external = _check_external_data(model, base_dir, label)
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


def _check_text(model: onnx.ModelProto, label: str) -> None:
    """Refuse names that are not valid UTF-8 (protobuf hands them over as ``bytes``)."""
    g = model.graph
    texts = [model.producer_name, model.producer_version, model.domain, model.doc_string]
    texts += [g.name, g.doc_string]
    texts += [x for p in model.metadata_props for x in (p.key, p.value)]
    texts += [o.domain for o in model.opset_import]
    texts += [vi.name for vi in list(g.input) + list(g.output) + list(g.value_info)]
    texts += [t.name for t in g.initializer]
    for n in g.node:
        texts += [n.name, n.op_type, n.domain, n.doc_string, *n.input, *n.output]
        texts += [a.name for a in n.attribute]
        texts += [x for p in n.metadata_props for x in (p.key, p.value)]
    if any(isinstance(t, bytes) for t in texts):
        raise ModelLoadError(f"{label}: not an ONNX model (a name or text field is not valid UTF-8)")


def _check_external_data(model: onnx.ModelProto, base_dir: str | None, label: str) -> bool:
    """Whether the model keeps weights in files beside it, after checking that each lies in
    the model's directory and holds the bytes its tensor claims (the files are not read)."""
    from onnx import external_data_helper as edh

    tensors = [t for t in edh._get_all_tensors(model) if edh.uses_external_data(t)]
    if not tensors:
        return False
    if base_dir is None:
        raise ModelLoadError(f"{label}: the model has external data but no directory to read it from")
    root = os.path.realpath(base_dir)
    for t in tensors:
        info = {e.key: e.value for e in t.external_data}
        loc = info.get("location", "")
        target = os.path.realpath(os.path.join(root, loc))
        if not loc or os.path.isabs(loc) or os.path.commonpath([root, target]) != root:
            raise ModelLoadError(
                f"{label}: external data location {loc!r} of {t.name!r} points outside the "
                "model's directory; refused"
            )
        if not os.path.isfile(target):
            raise ModelLoadError(f"{label}: external data file {loc!r} of {t.name!r} is missing")
        end = int(info.get("offset", 0) or 0) + int(info.get("length", 0) or 0)
        if end > os.path.getsize(target):
            raise ModelLoadError(f"{label}: cannot read external data: {loc!r} is shorter than {t.name!r} needs")
    return True


def _check_model(model: onnx.ModelProto, label: str) -> tuple[tuple[str, int], ...]:
    """The model's opsets, after checking that gspo supports them and that onnx's checker passes."""
    opsets = tuple((o.domain, int(o.version)) for o in model.opset_import)
    default = [v for d, v in opsets if d in ("", "ai.onnx")]
    if default and default[0] < MIN_OPSET:
        raise UnsupportedModelError(
            f"{label}: opset {default[0]} is not supported (gspo needs opset {MIN_OPSET} or newer)"
        )
    if default and default[0] > onnx.defs.onnx_opset_version():
        raise UnsupportedModelError(
            f"{label}: opset {default[0]} is newer than this onnx knows "
            f"({onnx.defs.onnx_opset_version()})"
        )
    try:
        onnx.checker.check_model(_shapes_declared(_without_external_data(model)))
    except Exception as e:
        raise ModelLoadError(f"{label}: fails the ONNX checker: {_first_line(e)}") from None
    return opsets


def _shapes_declared(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` as onnx's checker wants it: a graph input or output without a shape (which
    onnxruntime runs) gets an empty one in a copy, only to be checked (an input must still be
    given a shape with --input-shape; an output gets the inferred one)."""
    def shapeless(m):
        return [vi.type.tensor_type for vi in list(m.graph.input) + list(m.graph.output)
                if vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape")]

    if not shapeless(model):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for tt in shapeless(out):
        tt.shape.SetInParent()
    return out


def _without_external_data(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model``, or a copy whose weights kept in external data are graph inputs of their type
    and shape: onnx's checker reads an in-memory model's external files relative to the working
    directory (the files themselves are checked through the path API, see :func:`load_bytes`)."""
    from onnx import external_data_helper as edh

    external = [t for t in model.graph.initializer if edh.uses_external_data(t)]
    if not external:
        return model
    light = onnx.ModelProto()
    light.CopyFrom(model)
    names = {t.name for t in external}
    kept = [t for t in light.graph.initializer if t.name not in names]
    del light.graph.initializer[:]
    light.graph.initializer.extend(kept)
    listed = {vi.name for vi in light.graph.input}
    light.graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                             for t in external if t.name not in listed)
    return light


def _pinned(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]], label: str, plain: bool):
    """The model with its inputs pinned (dynamic dimensions given a default when not pinned)
    and, with ``plain``, through the front end; also the defaulted dimensions and the dynamic
    graph inputs and outputs to write back (empty when the result cannot keep them)."""
    weight_names = {t.name for t in model.graph.initializer}
    real_inputs = [vi for vi in model.graph.input if vi.name not in weight_names]
    pins = _check_pins(real_inputs, input_shapes, label)
    defaults, defaulted = frontend.default_pins(real_inputs, pins)
    dynamic_io: tuple[bytes, ...] = ()
    if defaulted:
        dynamic_io = tuple(frontend.pinned_value_info(vi, pins.get(vi.name)).SerializeToString()
                           for vi in list(model.graph.input) + list(model.graph.output) if vi.name not in weight_names)
    pins = {**defaults, **pins}
    if plain:
        model, generic = frontend.plain(model, pins, dynamic=bool(defaulted), label=label)
        dynamic_io = dynamic_io if generic else ()
    elif pins:
        model = frontend.pin_inputs(model, pins)
    return model, defaulted, dynamic_io


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
    (:func:`gspo.ir.frontend.default_pins`), recorded in ``graph.extras.defaulted``. With
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
    opsets = _check_model(model, label)
    model = _negative_dims_unknown(model)
    pinned, defaulted, dynamic_io = _pinned(model, input_shapes or {}, label, plain)
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
    return _graph(model, opsets, extras, label, values_from=frontend.pin_inputs(model, pins), base_dir=base_dir)


def _negative_dims_unknown(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every negative dimension the main graph declares made unknown, as
    onnxruntime reads it (a copy when there is one; ONNX dimensions are never negative)."""
    def negative(m):
        return [d for vi in list(m.graph.input) + list(m.graph.output) + list(m.graph.value_info)
                if vi.type.HasField("tensor_type") for d in vi.type.tensor_type.shape.dim
                if d.HasField("dim_value") and d.dim_value < 0]

    if not negative(model):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for d in negative(out):
        d.Clear()
    return out


def _check_sizes(values: Mapping[str, tuple], label: str) -> None:
    """Refuse a value whose static shape holds more than :data:`MAX_ELEMENTS` elements
    (``values``: name -> :func:`~gspo.ir.protos.type_of`'s element type, shape, ...)."""
    for name, (_, shape, *_) in values.items():
        dims = [d for d in shape or () if isinstance(d, int)]
        if _numel(dims) > MAX_ELEMENTS:
            axis, d = max(enumerate(dims), key=lambda x: x[1])
            raise UnsupportedModelError(
                f"{label}: value {name!r} of shape {list(shape)} would hold {_numel(dims):.3g} elements "
                f"(dimension {axis} is {d}); gspo handles at most 2**{MAX_ELEMENTS.bit_length() - 1} per tensor"
            )


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
    _check_sizes(values, label)
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


def _check_pins(inputs, pins: Mapping[str, Sequence[int]], label: str) -> dict[str, tuple[int, ...]]:
    """The ``--input-shape`` pins, checked against the graph inputs (names, ranks, fixed dims)."""
    names = [vi.name for vi in inputs]
    for name in pins:
        if name not in names:
            raise InputShapeError(
                f"{label}: --input-shape names {name!r}, which is not a graph input "
                f"(inputs: {', '.join(names) or 'none'})"
            )
    for vi in inputs:
        if not vi.type.HasField("tensor_type"):
            raise UnsupportedModelError(f"{label}: input {vi.name!r} is not a tensor")
        tt = vi.type.tensor_type
        if vi.name not in pins:
            if not tt.HasField("shape"):
                raise InputShapeError(
                    f"{label}: input {vi.name!r} has no shape; give one with --input-shape {vi.name}=D1,D2,..."
                )
            continue
        dims = tuple(pins[vi.name])
        if tt.HasField("shape") and len(tt.shape.dim) != len(dims):
            raise InputShapeError(
                f"{label}: --input-shape gives {vi.name!r} rank {len(dims)}, "
                f"the model says rank {len(tt.shape.dim)}"
            )
        for i, d in enumerate(dims):
            if tt.HasField("shape"):
                old = tt.shape.dim[i]
                if old.HasField("dim_value") and old.dim_value != d:
                    raise InputShapeError(
                        f"{label}: --input-shape sets dim {i} of {vi.name!r} to {d}, "
                        f"but the model fixes it at {old.dim_value}"
                    )
    return {name: tuple(int(d) for d in dims) for name, dims in pins.items()}


def _numel(dims) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


def infer_values(model: onnx.ModelProto, label: str) -> dict[str, tuple[int, tuple | None]]:
    """Shape inference on a copy whose large initializers carry dims but no data."""
    light = onnx.ModelProto()
    light.CopyFrom(model)
    for t in light.graph.initializer:
        if len(t.dims) and _numel(t.dims) > _STRIP_ELEMENTS:
            stub = TensorProto(name=t.name, data_type=t.data_type, dims=t.dims)
            stub.data_location = TensorProto.EXTERNAL
            stub.external_data.add(key="location", value="__gspo_stripped__")
            t.CopyFrom(stub)
    try:
        inferred = onnx.shape_inference.infer_shapes(light, check_type=False, data_prop=True)
    except Exception as e:
        log.warning("%s: shape inference failed (%s); shapes left unknown", label, _first_line(e))
        inferred = light
    g = inferred.graph
    values: dict[str, tuple[int, tuple | None]] = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        values[vi.name] = type_of(vi)
    for t in model.graph.initializer:
        values[t.name] = (t.data_type, tuple(int(d) for d in t.dims))
    return values


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
             light: bool = False, placement: Mapping | None = None, inline: bool = True) -> onnx.ModelProto:
    """The ``ModelProto`` of ``graph`` (weights materialized, streams and schedule recorded).

    With ``keep_dynamic``, graph inputs and outputs keep the dynamic dimensions they were loaded
    with (``graph.extras.dynamic_io``; the graph must compute its shapes from its inputs, which
    only running it at another size shows) and no intermediate shapes are written. With
    ``light``, large weights are not computed: they become graph inputs of their type and
    shape, which is all that checking and shape inference read; and every intermediate value
    gets the shape gspo's IR gives it, for strict shape inference to confirm. With ``inline``
    false, weights the model keeps in external data still refer to their files (in
    ``graph.store.base_dir``: see :func:`external_dir`) instead of being read into the model.
    """
    ex = graph.extras
    keep_dynamic = keep_dynamic or bool(ex.static_refused)
    dynamic = {vi.name: vi for vi in map(onnx.ValueInfoProto.FromString, ex.dynamic_io)} if keep_dynamic else {}
    labels: set[str] = set()
    nodes = [node_to_proto(n, labels) for n in graph.nodes]
    stubbed = {name for name, w in graph.weights.items() if light and w.size > _STRIP_ELEMENTS}
    initializers = [materialize(name, w, graph.store, inline) for name, w in graph.weights.items() if name not in stubbed]
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
    model = to_model(graph, schedule, keep_dynamic, placement=placement, inline=inline)
    try:
        return model.SerializeToString()
    except (EncodeError, ValueError) as e:  # past protobuf's 2 GB: "Failed to serialize proto"
        raise ModelLoadError(f"the model cannot be serialized in one piece: {_first_line(e)}") from None


def external_dir(graph: Graph) -> str:
    """The directory the external data of ``graph``'s original weights is read from ("" if
    they are all in memory): what ``serialize(graph, inline=False)`` refers to."""
    return graph.store.base_dir if graph.extras.external_data else ""


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
    if sum(_tensor_bytes(t, base_dir) for t in model.graph.initializer) > _EXTERNAL_THRESHOLD:
        _save_external(model, p, base_dir, overwrite)
    else:
        for t in model.graph.initializer:
            _inline(t, base_dir)
        atomic_write(p, model.SerializeToString(), overwrite=overwrite)
    return p


def _tensor_bytes(t: TensorProto, base_dir: str) -> int:
    """The bytes of a tensor's data, in the model or in its external file."""
    from onnx import external_data_helper as edh

    if not edh.uses_external_data(t):
        return len(t.raw_data) if t.HasField("raw_data") else t.ByteSize()
    info = {e.key: e.value for e in t.external_data}
    if "length" in info:
        return int(info["length"])
    return os.path.getsize(os.path.join(base_dir, info["location"])) - int(info.get("offset", 0) or 0)


def _inline(t: TensorProto, base_dir: str) -> None:
    """Read a tensor kept in external data into it."""
    from onnx import external_data_helper as edh

    if edh.uses_external_data(t):
        edh.load_external_data_for_tensor(t, base_dir)
        t.data_location = TensorProto.DEFAULT
        del t.external_data[:]


_COPY_CHUNK = 1 << 26
#: Tensors smaller than this stay in the model file when the weights go to external data.
_EXTERNAL_MIN_BYTES = 1024


def _write_data(model: onnx.ModelProto, data_path: Path, location: str, base_dir: str) -> None:
    """Move the weights of ``model`` into ``data_path`` one tensor at a time (those already in
    external data copied from their file in chunks): never more than one tensor in memory."""
    from onnx import external_data_helper as edh

    offset = 0
    with open(data_path, "wb") as out:
        for t in model.graph.initializer:
            if edh.uses_external_data(t):
                info = {e.key: e.value for e in t.external_data}
                length = _tensor_bytes(t, base_dir)
                with open(os.path.join(base_dir, info["location"]), "rb") as src:
                    src.seek(int(info.get("offset", 0) or 0))
                    left = length
                    while left:
                        chunk = src.read(min(left, _COPY_CHUNK))
                        if not chunk:
                            raise OSError(f"external data of {t.name!r} ends early")
                        out.write(chunk)
                        left -= len(chunk)
            elif t.HasField("raw_data") and len(t.raw_data) >= _EXTERNAL_MIN_BYTES:
                length = len(t.raw_data)
                out.write(t.raw_data)
                t.ClearField("raw_data")
            else:
                continue
            del t.external_data[:]
            t.data_location = TensorProto.EXTERNAL
            for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
                t.external_data.add(key=k, value=v)
            offset += length


def _save_external(model, p: Path, base_dir: str = "", overwrite: bool = False) -> None:
    """Save with weights in ``<file>.data``: both written complete in a temporary folder beside
    ``p`` (the weights one tensor at a time, :func:`_write_data`), then moved into place under
    :func:`~gspo.outputs.replacing_together`'s rules (the weights first, so a model never names
    missing data)."""
    data = p.with_name(p.name + ".data")
    with replacing_together([data, p], overwrite) as folder:
        _write_data(model, folder / data.name, data.name, base_dir)
        (folder / p.name).write_bytes(model.SerializeToString())
