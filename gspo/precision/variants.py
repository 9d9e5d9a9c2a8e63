"""The reduced-precision kinds a model can be built in, piece by piece.

A *kind* turns the fp32 graph and a set of its pieces (the ones run at reduced precision; the
others stay fp32) into a graph with, where needed, a placement:

* ``bf16`` on ``openvino:bf16``: the graph as it is, its reduced pieces' ops placed on OpenVINO at
  bf16 inference precision and the others on OpenVINO at f32;
* ``int8`` (static QDQ, ranges from the calibration data): a standard ONNX file, run on
  onnxruntime or, placed whole, on OpenVINO in two forms (:data:`OPENVINO_FORMS`) and as NNCF
  quantizes it (:mod:`gspo.precision.nncf_int8`); the fastest kind that holds the budget is found
  by timing. Each is quantized once, at its first build, and each build puts the pieces left at
  fp32 back in float (:func:`~gspo.precision.qdq.keep_float`), instead of quantizing again;
* ``int8-dynamic`` (onnxruntime's dynamic quantization of MatMul/Gemm weights) on onnxruntime;
* when both are asked, static int8 on OpenVINO with *the rest at bf16*: the QDQ model placed whole
  on OpenVINO at bf16 inference precision, so the pieces left unquantized run at bf16, not fp32
  (:attr:`Kind.rest`). Its fit starts only where bf16 of the whole model holds the budget.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence

from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.precision import PRECISIONS
from gspo.precision.kind import Kind
from gspo.runtime.backends import backend_status
from gspo.runtime.openvino import openvino_probe
from gspo.streams import Placement, node_id

__all__ = ["OPENVINO_FORMS", "PRECISIONS", "TORCH", "Kind", "cpu_kinds", "keeping_f32", "kinds", "openvino_quantized",
           "openvino_static", "plain", "with_placement"]

#: The backend name the kinds of the torch runtime run on (``--device cuda --cuda-runtime torch``).
TORCH = "torch"


def plain(graph: Graph) -> Graph:
    """``graph`` with no schedule or placement of its own (one stream, onnxruntime)."""
    return dataclasses.replace(graph, extras=dataclasses.replace(graph.extras, schedule="", placement=""))


def with_placement(graph: Graph, placement: Placement | None) -> Graph:
    """``graph`` carrying ``placement`` as a saved one (what the executors follow)."""
    text = "" if placement is None or placement.is_default else _json(placement)
    return dataclasses.replace(graph, extras=dataclasses.replace(graph.extras, placement=text))


def _json(placement: Placement) -> str:
    import json

    return json.dumps(placement.to_json(), sort_keys=True)


def _bf16(graph: Graph) -> Kind:
    ids = [node_id(n) for n in graph.nodes]

    def build(reduced: frozenset[str]) -> Graph:
        where = {op: ("openvino:bf16" if op in reduced else "openvino") for op in ids}
        return with_placement(graph, Placement.of(where))

    return Kind("bf16 on openvino", "bf16", "openvino:bf16", lambda ops: bool(ops), build)


def _static(graph: Graph, ranges: Mapping[str, tuple[float, float]], quantizable: Collection[str]) -> Kind:
    """Static int8 on onnxruntime: the QDQ form of onnxruntime's default op types, the model
    quantized once (at the first build) and the pieces left fp32 put back in float by
    :func:`~gspo.precision.qdq.keep_float` at each build."""
    from gspo.precision.qdq import keep_float, quantized_once
    from gspo.runtime.quantize import quantize_static

    ids = [node_id(n) for n in graph.nodes]
    full = quantized_once(lambda: quantize_static(graph, ranges))

    def build(reduced: frozenset[str]) -> Graph:
        return with_placement(keep_float(full(), graph, [op for op in ids if op not in reduced]), None)

    return Kind("int8 on onnxruntime", "int8", "ort", lambda ops: any(op in quantizable for op in ops), build,
                first="quantize")


#: The QDQ forms static int8 on OpenVINO is built in: (kind name, op types, whether biases are
#: quantized). The default one quantizes onnxruntime's default op types (fastest on CNNs); the
#: other only the ops with weights, biases left float, which OpenVINO 2026.4 compiles on
#: transformers where the default form is refused (ViT-Tiny) and is faster where it is not
#: (DistilBERT with the rest at bf16: 1.83 ms against 2.30 ms, nmse 8.6e-4 against 1.4e-3).
#: In both, a quantized node's output is quantized only where a quantized node reads it
#: (``quantize_outputs=False``): onnxruntime's Q/DQ after every MatMul, read by a float bias Add
#: or Softmax, cost OpenVINO a requantization and added error (ViT-Tiny with the rest at bf16:
#: 6.68 ms and nmse 2.0e-3 with them, 4.50 ms and 1.3e-3 without; DistilBERT 2.19 against
#: 1.83 ms; ResNet-50 unchanged).
OPENVINO_FORMS = (("int8 on openvino", "default", True), ("int8 on openvino, Conv/MatMul/Gemm only", "weighted", False))


def openvino_static(graph: Graph, ranges: Mapping[str, tuple[float, float]], form: str = "default",
                    probe: Callable[[bytes], str | None] = openvino_probe, rest: str = "fp32",
                    quantized: Callable[[], Graph] | None = None) -> Kind:
    """Static int8 on OpenVINO in one of :data:`OPENVINO_FORMS`, the unquantized pieces at ``rest``
    (fp32, or bf16: the model placed on OpenVINO at bf16 inference precision). The model is
    quantized once, at the first build (``quantized``: that quantization, shared by the kinds of
    one form; default: the kind's own), and each build puts the pieces left unquantized back in
    float (:func:`~gspo.precision.qdq.keep_float`). Before the first build, the model with every
    candidate quantized is compiled in a process of its own (``probe``): a compile that crashes or
    refuses means the kind cannot be built, with OpenVINO's reason."""
    from gspo.precision.qdq import probed_build
    from gspo.runtime.quantize import STATIC_OP_TYPES, WEIGHTED_OP_TYPES, quantizable

    name, _, _ = next(f for f in OPENVINO_FORMS if f[1] == form)
    nodes = set(quantizable(graph, STATIC_OP_TYPES if form == "default" else WEIGHTED_OP_TYPES, outputs=False))
    backend = "openvino:bf16" if rest == "bf16" else "openvino"
    name += ", the rest at bf16" if rest == "bf16" else ""
    build = probed_build(graph, quantized or openvino_quantized(graph, ranges, form), probe, backend)
    return Kind(name, "int8", backend, lambda ops: any(op in nodes for op in ops), build, rest, first="quantize")


def openvino_quantized(graph: Graph, ranges: Mapping[str, tuple[float, float]], form: str) -> Callable[[], Graph]:
    """The model quantized once in the QDQ form ``form`` of :data:`OPENVINO_FORMS` (at the first
    call: :func:`~gspo.precision.qdq.quantized_once`)."""
    from gspo.precision.qdq import quantized_once
    from gspo.runtime.quantize import STATIC_OP_TYPES, WEIGHTED_OP_TYPES, quantize_static

    _, _, bias = next(f for f in OPENVINO_FORMS if f[1] == form)
    op_types = STATIC_OP_TYPES if form == "default" else WEIGHTED_OP_TYPES
    return quantized_once(lambda: quantize_static(graph, ranges, op_types=op_types, quantize_bias=bias,
                                                  quantize_outputs=False))


def keeping_f32(kind: Kind, ops: frozenset[str]) -> Kind:
    """``kind`` (placed on OpenVINO, its rest at bf16) with the ops of ``ops`` at f32 in the same
    compiled model: the pieces the bf16 kind's fit sent back to fp32 (not reduced by ``kind``)."""
    def build(reduced: frozenset[str]) -> Graph:
        graph = kind.build(reduced - ops)
        where = Placement.from_json(graph.extras.placement).backend_of()
        where.update({op: "openvino" for op in ops if op in where})
        return with_placement(graph, Placement.of(where))

    return dataclasses.replace(kind, build=build)


def _nncf(graph: Graph, calibration: Sequence[Mapping], probe: Callable[[bytes], str | None],
          notes: list[str]) -> list[Kind]:
    """The NNCF kind where nncf is installed and there are calibration samples (else a note)."""
    from gspo.precision import nncf_int8

    if not calibration:
        return []
    if not nncf_int8.nncf_available():
        notes.append(nncf_int8.MISSING)
        return []
    return [nncf_int8.nncf_kind(graph, calibration, probe)]


def _probed_once(probe: Callable[[bytes], str | None]) -> Callable[[bytes], str | None]:
    """``probe`` that compiles each distinct model once (the kinds of one form share it)."""
    import hashlib

    seen: dict[bytes, str | None] = {}

    def once(data: bytes) -> str | None:
        key = hashlib.sha256(data).digest()
        if key not in seen:
            seen[key] = probe(data)
        return seen[key]

    return once


def _dynamic(graph: Graph, matmuls: Collection[str]) -> Kind:
    from gspo.runtime.quantize import quantize_dynamic

    ids = [node_id(n) for n in graph.nodes]

    def build(reduced: frozenset[str]) -> Graph:
        return quantize_dynamic(graph, exclude=[op for op in ids if op not in reduced])

    return Kind("int8-dynamic on onnxruntime", "int8", "ort", lambda ops: any(op in matmuls for op in ops), build)


def kinds(graph: Graph, precisions: Sequence[str], backends: Sequence[str],
          ranges: Callable[[], Mapping[str, tuple[float, float]]],
          probe: Callable[[bytes], str | None] = openvino_probe,
          calibration: Sequence[Mapping] = ()) -> tuple[list[Kind], list[str]]:
    """The kinds ``precisions`` ask for that can run here with ``backends``, and a line for each
    that cannot (why). With :data:`TORCH` among ``backends`` (``--device cuda --cuda-runtime
    torch``: the whole model runs there) the kinds are the torch runtime's fp16, bf16 and tf32
    (:func:`~gspo.precision.floats.torch_kinds`) and int8 is noted; on the CPU, fp16 and tf32 are
    noted (GPU kinds) and the CPU's kinds made (:func:`cpu_kinds`)."""
    if TORCH in backends:
        from gspo.precision.floats import torch_kinds

        found, notes = torch_kinds(graph, precisions)
        int8 = ["int8: static and dynamic QDQ run on the cpu device (onnxruntime, OpenVINO), not on the torch "
                "runtime"] if "int8" in precisions else []
        int8 += ["int4: weight-only MatMuls run on the cpu device (onnxruntime, OpenVINO), not on the torch runtime"
                 ] if "int4" in precisions else []
        return found, int8 + notes
    from gspo.precision import GPU_PRECISIONS

    gpu = [f"{p}: a GPU kind (--device cuda --cuda-runtime torch); not on the cpu device"
           for p in dict.fromkeys(precisions) if p in GPU_PRECISIONS]
    found, notes = cpu_kinds(graph, precisions, backends, ranges, probe, calibration)
    return found, gpu + notes


def cpu_kinds(graph: Graph, precisions: Sequence[str], backends: Sequence[str],
              ranges: Callable[[], Mapping[str, tuple[float, float]]],
              probe: Callable[[bytes], str | None] = openvino_probe,
              calibration: Sequence[Mapping] = ()) -> tuple[list[Kind], list[str]]:
    """The CPU's kinds ``precisions`` ask for that can run here with ``backends``, and a line for
    each that cannot (why). ``ranges()`` computes the activation ranges (only when int8 is asked;
    ``None``: the time budget cannot hold it, and no static int8 kind is made);
    ``probe`` compiles a model on OpenVINO in a process of its own; ``calibration``: the
    calibration samples NNCF quantizes with (:mod:`gspo.precision.nncf_int8`; none: no NNCF kind).
    With OpenVINO, the NNCF kind comes first among the int8 kinds placed on it."""
    from gspo.runtime.quantize import dynamic_quantizable, int8_note, quantizable

    out: list[Kind] = []
    notes: list[str] = []
    if "bf16" in precisions:
        ok, why = backend_status("openvino:bf16")
        if ok and "openvino" in backends:
            out.append(_bf16(graph))
        else:
            notes.append("bf16: " + (why if not ok else "OpenVINO is not among --backends"))
    if "int8" in precisions:
        slow = int8_note()
        notes += [f"int8: {slow}"] if slow else []
        try:
            q = quantizable(graph)
        except GspoError as e:
            q = {}
            notes.append(f"int8: {e}")
        matmuls = dynamic_quantizable(graph)
        found = ranges() if q else None
        if q and found is None:
            notes.append("int8 (static): not fitted: the time budget cannot hold computing the activation ranges")
        if found is not None:
            out += [_static(graph, found, q)] if "ort" in backends else []
            rests = ("fp32", "bf16") if any(k.precision == "bf16" for k in out) else ("fp32",)
            probe = _probed_once(probe)
            if "openvino" in backends:
                out += _nncf(graph, calibration, probe, notes)
                once = {form: openvino_quantized(graph, found, form) for _, form, _ in OPENVINO_FORMS}
                out += [openvino_static(graph, found, form, probe, rest, once[form]) for rest in rests
                        for _, form, _ in OPENVINO_FORMS]
        if matmuls:
            out.append(_dynamic(graph, matmuls))
        elif q:
            notes.append("int8-dynamic: no MatMul or Gemm with constant weights")
    from gspo.precision.weights import weight_kinds

    weighted, why = weight_kinds(graph, precisions, backends, probe)
    return out + weighted, notes + why + _no_bf16_rest(precisions, backends, out)


def _no_bf16_rest(precisions: Sequence[str], backends: Sequence[str], made: Sequence[Kind]) -> list[str]:
    """The line for the static int8 kinds with the rest at bf16 where bf16 and int8 are asked but
    this CPU (or ``backends``) runs no bf16 kind: they are not made (one line, why)."""
    if "bf16" not in precisions or "int8" not in precisions or "openvino" not in backends:
        return []
    if any(k.precision == "bf16" for k in made) or not any(k.backend == "openvino" for k in made):
        return []
    ok, why = backend_status("openvino:bf16")
    return [f"int8 on openvino, the rest at bf16: not made: {why if not ok else 'no bf16 kind'}"]
