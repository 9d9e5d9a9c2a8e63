"""Types and shapes from onnxruntime where onnx's shape inference has none.

onnx infers nothing for operators outside its own domains: the outputs of com.microsoft
``Gelu``, ``SkipLayerNormalization`` or ``Attention`` (what onnxruntime's transformer optimizer
writes), and everything computed from them, are left without a type or shape. onnxruntime
registers the schemas of its contrib ops: a session built over the graph with those values
listed as extra outputs (by name alone) reports the type and shape it inferred for each. Where
its inference stops too (a Reshape whose shape is computed from a contrib op's output), the
graph is run once on valid random inputs and the values' arrays tell. :func:`complete_types`
gives them to the graph, so that the rules can work on the standard ops around the contrib
ones and the graph can be cut anywhere.
"""

from __future__ import annotations

import dataclasses
import logging
import re

import numpy as np

from gspo.errors import GspoError
from gspo.ir import Graph, Value, to_model
from gspo.ir.weights import dtype_named
from gspo.runtime.session import SessionConfig, make_session

__all__ = ["complete_types", "unknown_values"]

log = logging.getLogger(__name__)
_TENSOR = re.compile(r"tensor\((\w+)\)")
#: numpy's names of the element types whose ONNX names differ.
_NUMPY_NAMES = {"float32": "float", "float64": "double", "object": "string"}


def unknown_values(graph: Graph) -> list[str]:
    """The node outputs (in graph order) that are not known tensors of a static shape and not
    declared as another type (a sequence or map keeps the type it was declared with)."""
    return [v.name for n in graph.nodes for v in n.outputs
            if v.name and not v.type_proto and (v.dtype == 0 or not v.is_static)]


def _value(name: str, type_name: str, shape) -> Value | None:
    """The IR value of what onnxruntime reports, when it is a tensor of static shape. Its ``[]``
    is not taken: onnxruntime reports it for a scalar and for a value whose shape it does not
    know alike (the output of ``ai.onnx.ml``'s Scaler), which :func:`_run_for_types` settles."""
    m = _TENSOR.fullmatch(type_name or "")
    dtype = dtype_named(m.group(1)) if m else 0
    if not dtype or not shape or not all(isinstance(d, int) and d >= 0 for d in shape):
        return None
    return Value(name, dtype, tuple(shape))


def complete_types(graph: Graph, config: SessionConfig = SessionConfig(optimization="disable")) -> Graph:
    """``graph`` with the types and static shapes onnxruntime infers for the values onnx left
    unknown (see the module docstring); values onnxruntime cannot settle stay unknown. The
    graph inputs must have static shapes for the shapes to come out static. A graph that
    onnxruntime cannot load is returned as it is (running it will say why)."""
    names = unknown_values(graph)
    if not names:
        return graph
    listed = set(graph.output_names())
    extra = tuple(Value(n, 0, None) for n in names if n not in listed)
    wide = dataclasses.replace(graph, outputs=graph.outputs + extra)
    session = None
    # Large weights as typed inputs first (no copy of them); the model as it is if an op
    # insists on a constant there.
    for model in (lambda: to_model(wide, light=True).SerializeToString(), lambda: wide):
        try:
            session = make_session(model(), config)
            break
        except GspoError as e:
            log.info("onnxruntime could not infer the unknown shapes: %s", e)
    if session is None:
        return graph
    found = {}
    for o in session.get_outputs():
        v = _value(o.name, o.type, o.shape) if o.name in names else None
        if v is not None:
            found[o.name] = v
    log.info("onnxruntime inferred %d of %d values onnx left unknown", len(found), len(names))
    left = [n for n in names if n not in found and n not in _value_dependent(graph)]
    if left and all(v.is_static for v in graph.inputs):
        found.update(_run_for_types(graph, left, config))
    return graph.with_values(found) if found else graph


#: Ops whose output shape depends on their input values (or on a body that may): a shape seen in
#: one run says nothing of the next.
_DATA_DEPENDENT = frozenset({"NonZero", "Unique", "Compress", "NonMaxSuppression", "If", "Loop", "Scan",
                             "StringSplit", "RegexFullMatch"})


def _value_dependent(graph: Graph) -> set[str]:
    """The values computed from the output of an op in :data:`_DATA_DEPENDENT`."""
    tainted: set[str] = set()
    for n in graph.nodes:
        if n.op_type in _DATA_DEPENDENT or any(r in tainted for r in n.reads()):
            tainted.update(v.name for v in n.outputs if v.name)
    return tainted


def _run_for_types(graph: Graph, names: list[str], config: SessionConfig) -> dict[str, Value]:
    """The type and shape of each value in ``names`` that is a tensor when ``graph`` runs once
    on valid random inputs (nothing when it does not run)."""
    from gspo.runtime.inputs import capture_values, random_inputs

    try:
        arrays = capture_values(graph, random_inputs(graph, seed=0), names, config)
    except GspoError as e:
        log.info("running the model for the shapes onnx could not infer failed: %s", e)
        return {}
    out = {}
    for name, a in arrays.items():
        if isinstance(a, np.ndarray) and dtype_named(_NUMPY_NAMES.get(a.dtype.name, a.dtype.name)):
            out[name] = Value(name, dtype_named(_NUMPY_NAMES.get(a.dtype.name, a.dtype.name)), tuple(a.shape))
    log.info("running the model gave the types of %d more values", len(out))
    return out
