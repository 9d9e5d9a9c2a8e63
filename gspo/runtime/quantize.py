"""int8 quantization with onnxruntime's quantizers: static QDQ from precomputed ranges, dynamic,
weight-only (``MatMulNBits``).

Callers speak in gspo node ids (:func:`gspo.streams.schedule.node_id`); onnxruntime's quantizers
speak in ``NodeProto`` names, so every node is given a unique name before they see the model.
Ranges are computed here, streamed (:func:`activation_ranges`): onnxruntime's own
``MinMaxCalibrater`` keeps every intermediate output of every sample in memory at once.

Static quantization is what ``onnxruntime.quantization.quantize_static`` does with its defaults
for x86 CPUs with VNNI: the QDQ format, activations QUInt8 asymmetric, weights QInt8 symmetric
(per channel by default here), the op types of its QLinear and QDQ registries, no pre-processing.
On a CPU without VNNI (:func:`gspo.runtime.cpu_features.int8_saturates`) the weights, static and
dynamic, are 7-bit (onnxruntime's ``reduce_range``): there its u8s8 kernels sum pairs of products
in saturating 16-bit integers, which full-range weights overflow (on an AVX2-only EPYC a small
MLP's nmse was 2.5e-2 with 8-bit weights, 5.6e-4 with 7-bit ones, as with VNNI);
:func:`int8_note` says so in one line. Activations keep their 8 bits (the S8S8 form would not
help: onnxruntime turns s8 activations into u8 on x86, for the same u8s8 kernels).
Everything happens in memory; onnxruntime itself writes (and removes) a temporary file only to
re-run shape inference: in the dynamic quantizer after it turns Gemm into MatMul, and after it
converts a model below opset 10 to opset 11.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
from collections.abc import Collection, Iterable, Mapping, Sequence

import numpy as np
from onnx import TensorProto

from gspo.errors import GspoError, first_line
from gspo.ir import Graph, Node
from gspo.ir.features import nbytes
from gspo.ir.graph import fresh_name
from gspo.ir.quantized import from_quantized, gemms_as_matmuls, named_model, rewire_excluded
from gspo.ir.weights import np_dtype
from gspo.runtime import cpu_features
from gspo.runtime.inputs import human_bytes, require_memory
from gspo.runtime.session import SessionConfig, make_session, run

# after gspo.runtime.session, which says in one line when onnxruntime is missing or installed twice
from onnxruntime.quantization.calibrate import CalibrationMethod, TensorData, TensorsData  # isort: skip
from onnxruntime.quantization.onnx_quantizer import ONNXQuantizer  # isort: skip
from onnxruntime.quantization.qdq_quantizer import QDQQuantizer  # isort: skip
from onnxruntime.quantization.quant_utils import (  # isort: skip
    QuantizationMode,
    QuantType,
    get_opset_version,
    update_opset_version,
)
from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry  # isort: skip

__all__ = ["STATIC_OP_TYPES", "WEIGHTED_OP_TYPES", "DYNAMIC_OP_TYPES", "PROTOBUF_LIMIT", "quantizable", "dynamic_quantizable", "calibrated_tensors",
           "activation_ranges", "int8_note", "reduced_range", "quantize_static", "quantize_dynamic"]

#: The op types ``quantize_static`` quantizes by default (its QLinear and QDQ registries), less
#: BatchNormalization: a standalone one (DenseNet's, before its Conv) quantized, or only reading a
#: dequantized value, made OpenVINO 2026.4's compile crash the process (SIGSEGV); it keeps fp32
#: inputs and outputs, and an elementwise op gains little from int8. Their float inputs and
#: outputs are the tensors calibrated.
STATIC_OP_TYPES = (frozenset(QLinearOpsRegistry) | frozenset(QDQRegistry)) - {"BatchNormalization"}
#: The op types with weights, alone: OpenVINO 2026.4's low-precision transformations refuse the QDQ
#: form of the default set on transformers (an Add of a dequantized bias after a MatMul or Gemm in
#: DistilBERT: "[AddTransformation] ... CALLBACK HAS"); these, with float biases, compile.
WEIGHTED_OP_TYPES = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm"})
#: The op types dynamic quantization is asked for (onnxruntime turns Gemm into MatMul first).
DYNAMIC_OP_TYPES = ("MatMul",)
#: A serialized ONNX model (protobuf) must stay under this many bytes.
PROTOBUF_LIMIT = 2**31

_FLOATS = (TensorProto.FLOAT, TensorProto.FLOAT16)
#: Ops that ``QDQQuantizer`` gives Q/DQ only when their data input already has them (its
#: ``QDQDirect8BitOp``, ``QDQRemovableActivation``, ``QDQGather``, ``QDQWhere``), with the
#: opset they need (MaxPool before 12 and Resize before 11 are left alone).
_FOLLOWERS = {"Relu": 0, "Clip": 0, "Reshape": 0, "Transpose": 0, "Squeeze": 0, "Unsqueeze": 0, "Flatten": 0,
              "AveragePool": 0, "Slice": 0, "TopK": 0, "MaxPool": 12, "Resize": 11, "Gather": 0,
              "GatherElements": 0, "Where": 0}
#: Activations ``QDQQuantizer`` removes, their output's Q/DQ clamping in their place.
_REMOVABLE = ("Relu", "Clip")


def reduced_range(reduce_range: bool | None = None) -> bool:
    """``reduce_range`` when given, else whether this CPU needs 7-bit weights (no VNNI:
    :func:`gspo.runtime.cpu_features.int8_saturates`)."""
    return cpu_features.int8_saturates() if reduce_range is None else bool(reduce_range)


def int8_note() -> str | None:
    """One line saying that this CPU lacks the instructions that make int8 fast, and what gspo's
    int8 models do about it (``None`` where it has them)."""
    if not cpu_features.int8_saturates():
        return None
    if not cpu_features.cpu_flags():
        return ("this CPU's instruction sets cannot be read (no /proc/cpuinfo): in case it has no VNNI, int8 "
                "weights are quantized to 7 bits (reduce_range)")
    return ("this CPU has no VNNI (avx512_vnni, avx_vnni or amx_int8): onnxruntime's int8 runs on slower "
            "kernels that would saturate 8-bit weights, so weights are quantized to 7 bits (reduce_range)")


def _node_id(node: Node) -> str | None:
    """The node's id as :func:`gspo.streams.schedule.node_id` gives it (its first named output),
    ``None`` when it has none."""
    return next((v.name for v in node.outputs if v.name), None)


def _is_float(graph: Graph, name: str) -> bool:
    v = graph.values.get(name) if name else None
    return v is not None and v.is_tensor and v.dtype in _FLOATS


def _follows(graph: Graph, node: Node, marked: set[str]) -> bool:
    """Whether ``QDQQuantizer`` quantizes a follower op, given the tensors marked before it."""
    ins = node.inputs
    if node.op_type == "Where":
        return len(ins) > 2 and ins[1] in marked and ins[2] in marked
    if node.op_type in ("Gather", "GatherElements") and ins and graph.is_weight(ins[0]):
        return _is_float(graph, ins[0])
    return bool(ins) and ins[0] in marked


def _quantized_types(op_types: Collection[str], outputs: bool) -> Collection[str]:
    """``op_types``, less the ops that only pass quantized values through when outputs get no
    Q/DQ of their own (``QDQQuantizer`` then gives them none)."""
    return op_types if outputs else frozenset(op_types) - frozenset(_FOLLOWERS)


def quantizable(graph: Graph, op_types: Collection[str] = STATIC_OP_TYPES, outputs: bool = True) -> dict[str, str]:
    """Node id -> op type of the nodes static QDQ quantization of ``op_types`` puts Q/DQ around
    (in graph order).

    This follows ``QDQQuantizer``: with ``quantize_static``'s default op types, Conv, MatMul,
    Gemm, Add, Mul, Concat, Softmax, the normalizations ... with a float input are quantized;
    Relu, Clip, Reshape, Transpose, MaxPool, Resize ... only when their data input was already
    (they pass quantized values through). Without ``outputs`` (:func:`quantize_static`'s
    ``quantize_outputs``), those pass-through ops are not quantized at all.
    """
    op_types = _quantized_types(op_types, outputs)
    marked: set[str] = set()
    out: dict[str, str] = {}
    for n in graph.nodes:
        nid = _node_id(n)
        if n.op_type not in op_types or nid is None:
            continue
        if n.op_type in _FOLLOWERS:
            if graph.opset < _FOLLOWERS[n.op_type] or not _follows(graph, n, marked):
                continue
        elif not any(_is_float(graph, i) for i in n.inputs):
            continue
        else:
            marked.update(i for i in n.inputs if _is_float(graph, i))
        marked.update(v.name for v in n.outputs if _is_float(graph, v.name))
        out[nid] = n.op_type
    return out


def calibrated_tensors(graph: Graph) -> list[str]:
    """The tensors ``quantize_static`` calibrates (in graph order): the float inputs and outputs,
    weights excepted, of every node of :data:`STATIC_OP_TYPES`."""
    out: dict[str, None] = {}
    for n in graph.nodes:
        if n.op_type in STATIC_OP_TYPES:
            for name in n.inputs + n.output_names:
                if _is_float(graph, name) and not graph.is_weight(name):
                    out.setdefault(name)
    return list(out)


#: How many tensors of unknown size a group holds where no tensor's size is known.
UNKNOWN_PER_GROUP = 16


def _groups(graph: Graph, names: Sequence[str], chunk_bytes: int) -> list[list[str]]:
    """``names`` cut into runs whose sizes add up to at most ``chunk_bytes`` (a tensor larger than
    that alone). A tensor of unknown size (a Reshape to a computed shape, as exporters write
    attention) counts as the largest known one among ``names``, or where none is known as
    ``chunk_bytes`` / :data:`UNKNOWN_PER_GROUP`: alone, each of them cost a session of the model
    up to it (BERT-base's 96 made 121 groups: 100 s of calibration on the 2-core EPYC with other
    work on it)."""
    sizes = {n: nbytes(graph.values[n]) if graph.values[n].is_static else None for n in names}
    known = [b for b in sizes.values() if b is not None]
    guess = max(known) if known else max(chunk_bytes // UNKNOWN_PER_GROUP, 1)
    groups: list[list[str]] = []
    size = 0
    for name in names:
        b = sizes[name] if sizes[name] is not None else guess
        if not groups or size + b > chunk_bytes:
            groups.append([name])
            size = b
        else:
            groups[-1].append(name)
            size += b
    return groups


def _upstream(graph: Graph, names: Sequence[str]) -> Graph:
    """``graph`` computing only ``names`` (its outputs): the nodes they depend on, the weights
    those read, every graph input kept (the same feeds run it)."""
    needed = set(names)
    kept: list[Node] = []
    for n in reversed(graph.nodes):
        if any(v.name in needed for v in n.outputs):
            kept.append(n)
            needed.update(n.reads())
    return dataclasses.replace(graph, nodes=tuple(reversed(kept)), outputs=tuple(graph.values[n] for n in names),
                               weights={w: graph.weights[w] for w in graph.weights if w in needed})


def _fold(ranges: dict[str, list], name: str, array: np.ndarray) -> None:
    if array.size:  # an empty tensor says nothing of the range
        lo, hi = np.min(array), np.max(array)
        old = ranges.get(name)
        ranges[name] = [lo, hi] if old is None else [np.minimum(old[0], lo), np.maximum(old[1], hi)]


def activation_ranges(graph: Graph, samples: Iterable[Mapping[str, np.ndarray]],
                      chunk_bytes: int = 256 << 20) -> dict[str, tuple[float, float]]:
    """Min and max, over ``samples``, of every tensor :func:`quantize_static` needs a range for
    (:func:`calibrated_tensors`), computed without holding all activations at once.

    The tensors are cut into groups of at most about ``chunk_bytes`` (sizes from the graph's
    shapes; a tensor of unknown size is a group of its own). Each group gets one onnxruntime
    session computing only that group, run on every sample before the next group's is built:
    memory stays about one inference of the model plus ``chunk_bytes``. Graph inputs are read
    from the samples. ``samples`` is iterated once per group (an iterator is kept in a list).

    Raises:
        GspoError: no samples, a sample without an input, a group larger than the memory
            available, or onnxruntime fails.
    """
    sets = samples if isinstance(samples, Sequence) else list(samples)
    if not sets:
        raise GspoError("no calibration samples to compute activation ranges on")
    inputs = {v.name for v in graph.inputs}
    names = calibrated_tensors(graph)
    ranges: dict[str, list] = {}
    for feeds in sets:
        for name in names:
            if name in inputs:
                if name not in feeds:
                    raise GspoError(f"a calibration sample has no value for input {name!r}")
                _fold(ranges, name, np.asarray(feeds[name]))
    for group in _groups(graph, [n for n in names if n not in inputs], max(int(chunk_bytes), 1)):
        size = sum(nbytes(graph.values[n]) for n in group)
        require_memory(size, f"the {len(group)} activation(s) computed at a time for calibration",
                       "lower the chunk size")
        session = make_session(_upstream(graph, group), SessionConfig())
        for feeds in sets:
            values = run(session, feeds)
            for name in group:
                _fold(ranges, name, values[name])
            del values  # large outputs are reused buffers: released before the next run
        del session
    return {n: (float(ranges[n][0]), float(ranges[n][1])) if n in ranges else (0.0, 0.0) for n in names}


def _weight_bytes(graph: Graph) -> int:
    return sum(w.size * np_dtype(w.dtype).itemsize for w in graph.weights.values())


def _check_size(graph: Graph) -> None:
    """Refuse, before any weight is computed, a model protobuf cannot hold in one piece."""
    size = _weight_bytes(graph)
    if size >= PROTOBUF_LIMIT:
        raise GspoError(f"cannot quantize a model of {human_bytes(size)} of weights: onnxruntime's quantizers "
                        f"take the model in one protobuf, at most {human_bytes(PROTOBUF_LIMIT)}")


def _check_ids(graph: Graph, exclude: Collection[str]) -> set[str]:
    ids = {_node_id(n) for n in graph.nodes}
    unknown = sorted(set(exclude) - ids)
    if unknown:
        raise GspoError(f"cannot exclude {unknown[:3]}{' ...' if len(unknown) > 3 else ''} from quantization: "
                        "not the id of a node of the model")
    return set(exclude)


def _static_exclusions(graph: Graph, exclude: set[str]) -> set[str]:
    """``exclude`` and the Relu/Clip nodes whose output an excluded node reads: those keep their
    node (``QDQQuantizer`` removes a quantized Relu, its producer then writing the Relu's output
    unclamped, which an fp32 consumer must not read)."""
    out = set(exclude)
    for n in graph.nodes:
        if _node_id(n) in exclude:
            for name in n.inputs:
                producer = graph.producers.get(name)
                if producer is not None and producer[0].op_type in _REMOVABLE:
                    out.add(_node_id(producer[0]))
    return out


def _unbounded(graph: Graph, ranges: Mapping[str, tuple[float, float]]) -> set[str]:
    """The float tensors whose calibrated range is not finite (an attention mask's -inf, an
    overflow): int8 cannot hold them, so the nodes that touch them stay fp32."""
    return {name for name, (lo, hi) in ranges.items()
            if _is_float(graph, name) and not (math.isfinite(lo) and math.isfinite(hi))}


def _tensors_data(graph: Graph, ranges: Mapping[str, tuple[float, float]]) -> TensorsData:
    """``ranges`` of the graph's float tensors as onnxruntime takes them (in the tensor's type)."""
    data = {}
    for name, (lo, hi) in ranges.items():
        if not _is_float(graph, name):
            continue
        if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
            raise GspoError(f"the range of tensor {name!r} is not a finite interval ({lo}, {hi})")
        dt = np_dtype(graph.values[name].dtype)
        data[name] = TensorData(lowest=np.array(lo, dt), highest=np.array(hi, dt))
    return TensorsData(CalibrationMethod.MinMax, data)


def quantize_static(graph: Graph, ranges: Mapping[str, tuple[float, float]], exclude: Collection[str] = (),
                    per_channel: bool = True, op_types: Collection[str] = STATIC_OP_TYPES,
                    quantize_bias: bool = True, quantize_outputs: bool = True, reduce_range: bool | None = None) -> Graph:
    """The graph quantized to int8 in the QDQ format, from precomputed activation ranges.

    What ``onnxruntime.quantization.quantize_static`` makes with its defaults and these
    ranges (:func:`activation_ranges`): ``QDQQuantizer``, activations QUInt8 asymmetric,
    weights QInt8 symmetric (per output channel unless ``per_channel`` is false; per tensor below
    opset 13, where DequantizeLinear has no axis), biases int32 (float unless ``quantize_bias``),
    the nodes of ``op_types`` only (default: onnxruntime's default op types). Without
    ``quantize_outputs`` a quantized node's output gets no Q/DQ of its own (onnxruntime's
    ``OpTypesToExcludeOutputQuantization``, every op type): it is quantized only where a quantized
    node reads it, and the ops that only pass quantized values through (Relu, Reshape, MaxPool
    ...) are left alone (:func:`quantizable`). A model below opset 10 is
    converted to opset 11 first, as onnxruntime does (through a temporary file of its own).
    Nodes of ``exclude`` (node ids) stay fp32 and read unquantized values; a Relu or Clip whose
    output they read is kept too, and so is every node that reads or writes a tensor whose range
    is not finite (int8 cannot hold it). Non-float tensors (ids, shapes) are left as they are.
    Weights are 7-bit with ``reduce_range`` (default: where this CPU has no VNNI, :func:`reduced_range`).

    Raises:
        GspoError: weights over protobuf's 2 GB, nothing quantizable (or all of it excluded),
            an id of ``exclude`` not in the graph, a tensor to quantize without a range.
    """
    _check_size(graph)
    excluded = _check_ids(graph, exclude)
    op_types = _quantized_types(op_types, quantize_outputs)
    candidates = quantizable(graph, op_types)
    if not candidates:
        raise GspoError("nothing to quantize: the model has no Conv, MatMul, Gemm or other op onnxruntime "
                        "quantizes with a float input")
    if not set(candidates) - excluded:
        raise GspoError(f"nothing to quantize: all {len(candidates)} quantizable node(s) are excluded")
    model, names = named_model(graph)
    unbounded = _unbounded(graph, ranges)
    fp32 = excluded | {_node_id(n) for n in graph.nodes_by_op.get("BatchNormalization", ())}  # read floats too
    fp32 |= {_node_id(n) for n in graph.nodes if unbounded.intersection(n.reads()) or
             unbounded.intersection(v.name for v in n.outputs)}
    if not set(candidates) - fp32:
        raise GspoError(f"nothing to quantize: all {len(candidates)} quantizable node(s) are excluded or read "
                        "values without a finite range")
    ranges = {k: v for k, v in ranges.items() if k not in unbounded}
    kept = sorted(names[i] for i in _static_exclusions(graph, fp32) if i in names)
    try:
        model = update_opset_version(model, QuantType.QInt8, QuantType.QUInt8)
        per_channel = per_channel and get_opset_version(model) >= 13
        quantizer = QDQQuantizer(model, per_channel, reduced_range(reduce_range), QuantType.QInt8, QuantType.QUInt8,
                                 _tensors_data(graph, ranges), [], kept, sorted(op_types),
                                 {"ActivationSymmetric": False, "WeightSymmetric": True,
                                  "QuantizeBias": quantize_bias,
                                  "OpTypesToExcludeOutputQuantization": [] if quantize_outputs else sorted(op_types)})
        with _quiet():
            quantizer.quantize_model()
    except GspoError:
        raise
    except Exception as e:
        raise GspoError(f"onnxruntime cannot quantize the model: {first_line(e)}") from None
    out = quantizer.model.model
    rewire_excluded(out, set(kept))
    return from_quantized(out, graph)


@contextlib.contextmanager
def _quiet():
    """onnxruntime's quantizer logs to the root logger what is only its own housekeeping (e.g. a
    per-channel axis it skips for a rank-1 weight): kept from the user's screen while it runs."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


def dynamic_quantizable(graph: Graph) -> set[str]:
    """The node ids of the MatMul and Gemm nodes :func:`quantize_dynamic` quantizes."""
    return {_node_id(n) for n in _dynamic_nodes(graph)}


def _dynamic_nodes(graph: Graph) -> list[Node]:
    """The MatMul and Gemm nodes dynamic quantization turns into MatMulInteger: a float32 first
    input and a float32 weight second (onnxruntime turns Gemm into MatMul only with alpha and
    beta 1 and no transA)."""
    out = []
    for n in graph.nodes:
        if n.op_type not in ("MatMul", "Gemm") or len(n.inputs) < 2 or n.is_opaque:
            continue
        a, b = n.inputs[0], n.inputs[1]
        if n.op_type == "Gemm" and (n.attr("alpha", 1.0) != 1.0 or n.attr("beta", 1.0) != 1.0 or n.attr("transA", 0)):
            continue
        if graph.is_weight(b) and all(graph.values[x].dtype == TensorProto.FLOAT for x in (a, b)):
            out.append(n)
    return out


def _own_transposed_weights(graph: Graph, gemms: Iterable[Node]) -> Graph:
    """``graph`` with each Gemm of ``gemms`` that reads a shared weight transposed (transB)
    reading a copy of its own: onnxruntime transposes that weight in place for every reader."""
    nodes = list(graph.nodes)
    weights = dict(graph.weights)
    for n in gemms:
        b = n.inputs[1]
        if n.op_type == "Gemm" and n.attr("transB", 0) and len(graph.consumers.get(b, ())) > 1:
            copy = fresh_name(b, b, _node_id(n))
            weights[copy] = graph.weights[b]
            nodes[graph.position[n]] = n.replace(inputs=(n.inputs[0], copy) + n.inputs[2:])
    return dataclasses.replace(graph, nodes=tuple(nodes), weights=weights)


def quantize_dynamic(graph: Graph, exclude: Collection[str] = (), reduce_range: bool | None = None) -> Graph:
    """The graph with its MatMul and Gemm nodes of constant weights quantized dynamically.

    What ``onnxruntime.quantization.quantize_dynamic`` makes for op types MatMul (and Gemm,
    which it turns into MatMul + Add): weights QInt8 per tensor, activations quantized to uint8
    at run time (DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul). Nodes of ``exclude``
    (node ids) stay fp32 (an excluded Gemm still becomes MatMul + Add). A model below opset 10
    is converted to opset 11 first, as onnxruntime does. Weights are 7-bit with ``reduce_range``
    (default: where this CPU has no VNNI, :func:`reduced_range`).

    Raises:
        GspoError: weights over protobuf's 2 GB, no MatMul or Gemm with a constant weight (or all
            of them excluded), an id of ``exclude`` not in the graph.
    """
    _check_size(graph)
    excluded = _check_ids(graph, exclude)
    candidates = _dynamic_nodes(graph)
    if not candidates:
        raise GspoError("nothing to quantize dynamically: the model has no MatMul or Gemm with a constant float weight")
    if all(_node_id(n) in excluded for n in candidates):
        raise GspoError(f"nothing to quantize dynamically: all {len(candidates)} MatMul/Gemm node(s) are excluded")
    graph = _own_transposed_weights(graph, graph.nodes_by_op.get("Gemm", ()))
    model, names = named_model(graph)
    kept = sorted(names[i] for i in excluded if i in names)
    kept += [f"{names[_node_id(n)]}_MatMul" for n in graph.nodes_by_op.get("Gemm", ()) if _node_id(n) in excluded]
    try:
        model = update_opset_version(model, QuantType.QInt8)
        quantizer = ONNXQuantizer(model, False, reduced_range(reduce_range), QuantizationMode.IntegerOps, False,
                                  QuantType.QInt8, QuantType.QUInt8, None, [], sorted(kept), list(DYNAMIC_OP_TYPES),
                                  {"MatMulConstBOnly": True})
        with _quiet():
            quantizer.quantize_model()
    except Exception as e:
        raise GspoError(f"onnxruntime cannot quantize the model: {first_line(e)}") from None
    return from_quantized(quantizer.model.model, graph)


def quantize_weights(graph: Graph, bits: int, block_size: int, accuracy_level: int,
                     exclude: Collection[str] = (), gemms: Collection[str] = ()) -> Graph:
    """``graph`` with the constant weights of its MatMuls in ``bits`` bits (onnxruntime's weight-only
    quantizer: com.microsoft ``MatMulNBits``, symmetric, one scale per ``block_size`` rows, products
    at ``accuracy_level``), the nodes of ``exclude`` (node ids) left as they are; the Gemms of
    ``gemms`` (node ids) made MatMuls first (:func:`~gspo.ir.quantized.gemms_as_matmuls`), as the quantizer reads
    MatMuls only.

    Raises:
        GspoError: onnxruntime's quantizer fails.
    """
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    model, names = named_model(graph)
    gemms_as_matmuls(model, {names[i] for i in gemms if i in names})
    kept = sorted(names[i] for i in exclude if i in names)
    try:
        quantizer = MatMulNBitsQuantizer(model, bits=bits, block_size=block_size, is_symmetric=True,
                                         accuracy_level=accuracy_level, nodes_to_exclude=kept)
        with _quiet(), _quiet_logger("onnxruntime.quantization.matmul_nbits_quantizer"):
            quantizer.process()
    except Exception as e:  # onnxruntime's quantizer raises what it meets (AssertionError, ValueError ...)
        raise GspoError(f"onnxruntime cannot compress the weights: {first_line(e)}") from None
    return from_quantized(quantizer.model.model, graph)


@contextlib.contextmanager
def _quiet_logger(name: str):
    """The logger ``name`` (one that logs a line per node at INFO) kept to warnings while it runs."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)

