"""Weight-only int8 and int4: the kinds for weight-bound models (an LLM's decoding step with a KV
cache, large MatMuls read a few rows at a time), where reading the weights, not computing with
them, is what takes the time.

The constant weight of each reduced MatMul (and of each Gemm that is a plain product plus its
bias, made a MatMul and an Add first: GPT-2's projections export so) is stored in 8 or 4 bits (symmetric, one scale per
:data:`BLOCK_SIZE` rows along the reduction axis); the activations stay float, so there is
nothing to calibrate. The model is built with onnxruntime's weight-only quantizer
(``onnxruntime.quantization.matmul_nbits_quantizer``: com.microsoft ``MatMulNBits``, 4 or 8 bits
in onnxruntime 1.31) at accuracy level :data:`ACCURACY_LEVEL` (int8 products, each activation
block quantized as it runs; with float products its 8-bit kernel is slower than fp32). OpenVINO
2026.4 reads the same op and keeps the weights compressed, so one build serves both backends:
on onnxruntime, and placed whole on OpenVINO (where the probe compiles it apart first).

Measured once on the shared 2-core EPYC (AVX512-VNNI), a rough interleaved check, not a benchmark:
four 768x3072 and 3072x768 MatMul pairs at one row, opset 21: onnxruntime fp32 12.0 ms, 8 bits
1.4 ms, 4 bits 6.5 ms (8 bits with float products: 173 ms); OpenVINO f32 22-31 ms, 8 bits
14.8 ms, 4 bits 9.4 ms. The standard form (an int8 or INT4 constant, DequantizeLinear, MatMul)
ran 12 ms (8 bits) and 8 ms (4 bits, blocks of 32) on OpenVINO but 84-100 ms on onnxruntime,
which does not fuse it: ``MatMulNBits`` is the one form both run fast.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Collection, Sequence

from onnx import TensorProto

from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.ir.graph import fresh_name
from gspo.precision.kind import Kind
from gspo.runtime.openvino import openvino_probe
from gspo.streams import node_id

__all__ = ["ACCURACY_LEVEL", "BITS", "BLOCK_SIZE", "WEIGHT_BOUND_ROWS", "compress_weights", "weight_bound",
           "weight_kind", "weight_kinds", "weight_matmuls"]

#: Rows of a weight (along the reduction axis) that share one scale.
BLOCK_SIZE = 32
#: onnxruntime's ``MatMulNBits`` accuracy level: 4, int8 products (the activations quantized per
#: block as it runs; OpenVINO ignores it).
ACCURACY_LEVEL = 4
#: The bits of each weight-only precision.
BITS = {"int8": 8, "int4": 4}
#: A MatMul is weight-bound when it reads at most this many rows of activations at a time: then
#: its weight is read for few products, and smaller weights are what makes it faster.
WEIGHT_BOUND_ROWS = 16
#: The backends of the weight-only kinds: (``--backends`` name, the kinds' backend, its name).
_BACKENDS = (("ort", "ort", "onnxruntime"), ("openvino", "openvino", "openvino"))


def _leading_unit(shape: tuple[int, ...]) -> bool:
    return len(shape) >= 2 and all(d == 1 for d in shape[:-2])


def _plain_gemm(n) -> bool:
    """Whether the Gemm ``n`` is a MatMul of its inputs plus its bias (alpha 1, transA 0, beta 1
    or no bias; transB as it may be): a product a weight-only kind compresses as a MatMul
    (GPT-2's projections export as such Gemms)."""
    bias = len(n.inputs) > 2 and n.inputs[2]
    return (n.attr("alpha", 1.0) == 1.0 and not n.attr("transA", 0)
            and (not bias or n.attr("beta", 1.0) == 1.0) and len(n.inputs) >= 2)


def _products(graph: Graph):
    """The MatMuls of ``graph`` and its Gemms that are plain products (:func:`_plain_gemm`)."""
    yield from graph.nodes_by_op.get("MatMul", ())
    yield from (n for n in graph.nodes_by_op.get("Gemm", ()) if _plain_gemm(n))


def weight_matmuls(graph: Graph) -> set[str]:
    """The node ids of the MatMuls (and plain Gemms, :func:`_plain_gemm`) whose weights a
    weight-only kind compresses: a float32 first input and a constant float32 second one of two
    dimensions (or more, the leading ones 1; a Gemm's of two)."""
    out = set()
    for n in _products(graph):
        if n.is_opaque or not graph.is_weight(n.inputs[1]) or graph.is_weight(n.inputs[0]):
            continue
        if n.op_type == "MatMul" and len(n.inputs) != 2:
            continue
        w = graph.weights[n.inputs[1]]
        shape = tuple(w.shape)
        if w.dtype == TensorProto.FLOAT and graph.values[n.inputs[0]].dtype == TensorProto.FLOAT and (
                _leading_unit(shape) if n.op_type == "MatMul" else len(shape) == 2):
            out.add(node_id(n))
    return out


def _rows(graph: Graph, name: str) -> int | None:
    """The rows a MatMul reading ``name`` computes at a time (``None``: its shape is not known)."""
    shape = graph.values[name].shape
    if shape is None or any(not isinstance(d, int) for d in shape):
        return None
    return math.prod(shape[:-1])


def weight_bound(graph: Graph, matmuls: Collection[str]) -> bool:
    """Whether a MatMul of ``matmuls`` (node ids) is weight-bound (:data:`WEIGHT_BOUND_ROWS`;
    one whose rows are not known counts as weight-bound)."""
    for n in _products(graph):
        if node_id(n) in matmuls and ((rows := _rows(graph, n.inputs[0])) is None or rows <= WEIGHT_BOUND_ROWS):
            return True
    return False


def _own_weights(graph: Graph, ids: Collection[str]) -> Graph:
    """``graph`` with each MatMul of ``ids`` reading a weight another node reads too reading a
    copy of its own (the quantizer names what it makes after the weight)."""
    nodes = list(graph.nodes)
    weights = dict(graph.weights)
    for n in _products(graph):
        b = n.inputs[1]
        if node_id(n) in ids and len(graph.consumers.get(b, ())) > 1:
            copy = fresh_name(b, b, node_id(n))
            weights[copy] = graph.weights[b]
            nodes[graph.position[n]] = n.replace(inputs=(n.inputs[0], copy, *n.inputs[2:]))
    return dataclasses.replace(graph, nodes=tuple(nodes), weights=weights)


def compress_weights(graph: Graph, bits: int, reduced: Collection[str]) -> Graph:
    """``graph`` with the weights of its MatMuls of ``reduced`` (node ids, those of
    :func:`weight_matmuls`) in ``bits`` bits (``MatMulNBits``, see the module docstring:
    :func:`~gspo.runtime.quantize.quantize_weights`); every other node as it was.

    Raises:
        GspoError: no MatMul of ``reduced`` to compress, or onnxruntime's quantizer fails.
    """
    from gspo.runtime.quantize import quantize_weights

    ids = weight_matmuls(graph) & set(reduced)
    if not ids:
        raise GspoError("nothing to compress: no MatMul or plain Gemm with a constant float weight among the reduced nodes")
    graph = _own_weights(graph, ids)
    gemms = [node_id(n) for n in graph.nodes_by_op.get("Gemm", ()) if node_id(n) in ids]
    return quantize_weights(graph, bits, BLOCK_SIZE, ACCURACY_LEVEL, [node_id(n) for n in graph.nodes
                                                                      if node_id(n) not in ids], gemms)


def weight_kind(graph: Graph, precision: str, backend: str, matmuls: Collection[str] | None = None,
                probe: Callable[[bytes], str | None] = openvino_probe) -> Kind:
    """The weight-only kind of ``precision`` (``"int8"``, ``"int4"``: :data:`BITS`) on ``backend``
    (``"ort"``, or ``"openvino"``: placed whole there, the model with every weight compressed
    compiled apart by ``probe`` before the first build: a compile OpenVINO refuses or that crashes
    means the kind cannot be built, with OpenVINO's reason); it touches ``matmuls`` (default:
    :func:`weight_matmuls`)."""
    from gspo.precision.qdq import probed

    bits = BITS[precision]
    nodes = frozenset(weight_matmuls(graph) if matmuls is None else matmuls)

    def build(reduced: frozenset[str]) -> Graph:
        return compress_weights(graph, bits, reduced)

    if backend != "ort":
        build = probed(lambda: compress_weights(graph, bits, nodes), probe, build, backend)
    shown = next(name for _, b, name in _BACKENDS if b == backend)
    return Kind(f"{precision} weights on {shown}", precision, backend, lambda ops: any(op in nodes for op in ops), build)


def weight_kinds(graph: Graph, precisions: Sequence[str], backends: Sequence[str],
                 probe: Callable[[bytes], str | None] = openvino_probe) -> tuple[list[Kind], list[str]]:
    """The weight-only kinds ``precisions`` ask for (int8 and int4: ``int8`` brings its
    weight-only kinds besides the static and dynamic ones; ``int4`` is weight-only alone), on
    each of ``backends`` that runs them (onnxruntime, OpenVINO), and a line for each that cannot
    be made (why). An int4 kind is made only where a MatMul is weight-bound
    (:func:`weight_bound`): elsewhere its error buys no speed."""
    asked = [p for p in BITS if p in precisions]
    if not asked:
        return [], []
    matmuls = weight_matmuls(graph)
    if not matmuls:
        return [], [f"{p} weights: no MatMul or plain Gemm with a constant float weight (weight-only {p} compresses only those)"
                    for p in asked]
    bound = weight_bound(graph, matmuls)
    out: list[Kind] = []
    notes: list[str] = []
    for p in asked:
        if p == "int4" and not bound:
            notes.append(f"int4: weight-only; no MatMul of the model is weight-bound (each reads more than "
                         f"{WEIGHT_BOUND_ROWS} rows at a time), where 4-bit weights would pay: not fitted")
            continue
        runs = [b for given, b, _ in _BACKENDS if given in backends]
        out += [weight_kind(graph, p, b, matmuls, probe) for b in runs]
        notes += [] if runs else [f"{p} weights: neither onnxruntime nor OpenVINO is among --backends"]
    return out, notes
