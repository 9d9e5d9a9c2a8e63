"""The reduced-precision kinds a model can be built in, piece by piece.

A *kind* turns the fp32 graph and a set of its pieces (the ones run at reduced precision; the
others stay fp32) into a graph with, where needed, a placement:

* ``bf16`` on ``openvino:bf16``: the graph as it is, its reduced pieces' ops placed on OpenVINO at
  bf16 inference precision and the others on OpenVINO at f32;
* ``int8`` (static QDQ, ranges from the calibration data): a standard ONNX file, run on
  onnxruntime or, placed whole, on OpenVINO (two kinds: the faster is found by timing);
* ``int8-dynamic`` (onnxruntime's dynamic quantization of MatMul/Gemm weights) on onnxruntime.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from gspo.errors import GspoError
from gspo.ir import Graph, serialize
from gspo.precision import PRECISIONS
from gspo.runtime.backends import backend_status
from gspo.runtime.openvino import openvino_probe
from gspo.streams import Placement, node_id

__all__ = ["PRECISIONS", "Kind", "kinds", "plain", "with_placement"]



@dataclass(frozen=True)
class Kind:
    """One way to reduce precision: its name, the precision, the backend it runs on, which pieces
    it can touch (``touches(ops)``) and how it builds a graph from the set of reduced pieces'
    node ids (``build(reduced_node_ids)``)."""

    name: str
    precision: str
    backend: str
    touches: Callable[[Collection[str]], bool]
    build: Callable[[frozenset[str]], Graph]


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
    """Static int8 on onnxruntime: the QDQ form of onnxruntime's default op types."""
    from gspo.runtime.quantize import quantize_static

    ids = [node_id(n) for n in graph.nodes]

    def build(reduced: frozenset[str]) -> Graph:
        q = quantize_static(graph, ranges, exclude=[op for op in ids if op not in reduced])
        return with_placement(q, None)

    return Kind("int8 on onnxruntime", "int8", "ort", lambda ops: any(op in quantizable for op in ops), build)


def openvino_static(graph: Graph, ranges: Mapping[str, tuple[float, float]],
                    probe: Callable[[bytes], str | None] = openvino_probe) -> Kind:
    """Static int8 on OpenVINO: the QDQ form of onnxruntime's default op types where OpenVINO
    compiles it, else of the op types with weights alone (:data:`WEIGHTED_OP_TYPES`). Which one is
    decided once, when the search first asks which pieces the kind touches, by compiling the
    model with every candidate quantized in a process of its own (``probe``: a compile that
    crashes or refuses drops that form; both refused, the kind cannot be built, with OpenVINO's
    reason)."""
    from gspo.runtime.quantize import (
        STATIC_OP_TYPES,
        WEIGHTED_OP_TYPES,
        quantizable,
        quantize_static,
    )

    ids = [node_id(n) for n in graph.nodes]
    chosen: list = []  # [(op types, their quantizable node ids)] once decided, or [(None, reason)]

    def decide() -> tuple:
        if not chosen:
            why = "nothing to quantize"
            for op_types in (STATIC_OP_TYPES, WEIGHTED_OP_TYPES):
                nodes = quantizable(graph, op_types)
                if not nodes:
                    continue
                try:
                    why = probe(serialize(quantize_static(graph, ranges, op_types=op_types)))
                except GspoError as e:
                    why = str(e)
                if not why:
                    chosen.append((op_types, set(nodes)))
                    break
            else:
                chosen.append((None, why))
        return chosen[0]

    def touches(ops: Collection[str]) -> bool:
        op_types, nodes = decide()
        return op_types is None or any(op in nodes for op in ops)  # None: build says why

    def build(reduced: frozenset[str]) -> Graph:
        op_types, nodes = decide()
        if op_types is None:
            raise GspoError(nodes)
        q = quantize_static(graph, ranges, exclude=[op for op in ids if op not in reduced], op_types=op_types)
        return with_placement(q, Placement.whole(q, "openvino"))

    return Kind("int8 on openvino", "int8", "openvino", touches, build)


def _dynamic(graph: Graph, matmuls: Collection[str]) -> Kind:
    from gspo.runtime.quantize import quantize_dynamic

    ids = [node_id(n) for n in graph.nodes]

    def build(reduced: frozenset[str]) -> Graph:
        return quantize_dynamic(graph, exclude=[op for op in ids if op not in reduced])

    return Kind("int8-dynamic on onnxruntime", "int8", "ort", lambda ops: any(op in matmuls for op in ops), build)


def kinds(graph: Graph, precisions: Sequence[str], backends: Sequence[str],
          ranges: Callable[[], Mapping[str, tuple[float, float]]]) -> tuple[list[Kind], list[str]]:
    """The kinds ``precisions`` ask for that can run here with ``backends``, and a line for each
    that cannot (why). ``ranges()`` computes the activation ranges (only when int8 is asked)."""
    from gspo.runtime.quantize import dynamic_quantizable, quantizable

    out: list[Kind] = []
    notes: list[str] = []
    if "bf16" in precisions:
        ok, why = backend_status("openvino:bf16")
        if ok and "openvino" in backends:
            out.append(_bf16(graph))
        else:
            notes.append("bf16: " + (why if not ok else "OpenVINO is not among --backends"))
    if "int8" in precisions:
        try:
            q = quantizable(graph)
        except GspoError as e:
            q = {}
            notes.append(f"int8: {e}")
        matmuls = dynamic_quantizable(graph)
        if q:
            found = ranges()
            out += [_static(graph, found, q)] if "ort" in backends else []
            out += [openvino_static(graph, found)] if "openvino" in backends else []
        if matmuls:
            out.append(_dynamic(graph, matmuls))
        elif q:
            notes.append("int8-dynamic: no MatMul or Gemm with constant weights")
    return out, notes
