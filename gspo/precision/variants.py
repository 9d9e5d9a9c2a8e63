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
from gspo.runtime.backends import backend_status, openvino_probe
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


def _static(graph: Graph, ranges: Mapping[str, tuple[float, float]], quantizable: Collection[str],
            backend: str) -> Kind:
    from gspo.runtime.quantize import quantize_static

    ids = [node_id(n) for n in graph.nodes]

    probed: list[bool] = []

    def build(reduced: frozenset[str]) -> Graph:
        q = quantize_static(graph, ranges, exclude=[op for op in ids if op not in reduced])
        if backend == "openvino" and not probed:  # the first QDQ form OpenVINO gets: in a process of its own
            probed.append(True)
            why = openvino_probe(serialize(q))
            if why:
                raise GspoError(why)
        return with_placement(q, Placement.whole(q, backend) if backend != "ort" else None)

    name = "int8 on " + ("onnxruntime" if backend == "ort" else backend)
    return Kind(name, "int8", backend, lambda ops: any(op in quantizable for op in ops), build)


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
            out += [_static(graph, found, q, b) for b in ("ort", "openvino") if b in backends]
        if matmuls:
            out.append(_dynamic(graph, matmuls))
        elif q:
            notes.append("int8-dynamic: no MatMul or Gemm with constant weights")
    return out, notes
