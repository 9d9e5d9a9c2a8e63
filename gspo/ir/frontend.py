"""The front end: exported graphs made plain before partition and search.

Exporters write shape arithmetic into the graph (``Shape -> Gather -> Concat -> Reshape``,
``ConstantOfShape``, ``Range``), hold weights in ``Constant`` nodes, and wrap ops in local
functions. :func:`fold` runs onnxscript's constant folding and onnx-ir's clean-up passes:
functions are inlined, constants folded, ``Constant`` nodes lifted to initializers and unused
nodes removed, so that shape arithmetic becomes constants and rewrite rules see weights.
Operators it does not know (custom domains) pass through untouched.

:func:`plain` folds the model with its dynamic dimensions left symbolic where that is enough for
static shapes once pinned (the result then still runs at other sizes), else with them pinned.
:func:`pinned_model` is what loading a model does first: its inputs pinned, dynamic dimensions
given their defaults (:mod:`gspo.ir.pinning`), and, when asked, the model made plain.

Notes:
    onnxscript keeps ``ConstantOfShape`` and ops on large constants unfolded to keep models
    small; here a small ``ConstantOfShape`` is folded (exporters build pads and shapes with it),
    and so is a layout op (Cast, Transpose, Reshape, ...) on a weight that nothing else reads,
    which does not grow the model.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from gspo.errors import first_line
from gspo.ir.onnx_shapes import infer_values
from gspo.ir.pinning import check_pins, default_pins, pin_inputs, pinned_value_info
from gspo.ir.protos import is_understood, subgraph_reads

__all__ = ["fold", "pinned_model", "plain"]

log = logging.getLogger(__name__)

#: Largest ConstantOfShape folded into a constant (elements).
_FOLD_FILL_LIMIT = 1 << 16
#: Folding passes at most (a fold can expose another).
_FOLD_ROUNDS = 3
#: Layout ops folded on a constant however large, when nothing else reads that constant.
_WEIGHT_LAYOUT_OPS = frozenset({"Cast", "Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity"})


def _should_fold(node) -> bool | None:
    """onnxscript's folding policy, widened for small fills and weight layout ops."""
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "ConstantOfShape":
        shape = node.inputs[0].const_value if node.inputs and node.inputs[0] is not None else None
        if shape is not None and int(np.prod(shape.numpy(), dtype=np.int64)) <= _FOLD_FILL_LIMIT:
            return True
        return None
    if node.op_type in _WEIGHT_LAYOUT_OPS:
        ins = [v for v in node.inputs if v is not None]
        if ins and all(v.const_value is not None for v in ins) and len(ins[0].uses()) == 1 \
                and not ins[0].is_graph_input():
            return True
    return None


def _fold_passes(m, label: str) -> None:
    """onnxscript's constant folding and onnx-ir's clean-up passes, in place on ``m``."""
    import onnx_ir.passes.common as passes
    from onnxscript.optimizer import fold_constants_ir, inline

    inline(m)
    for _ in range(_FOLD_ROUNDS):
        folded = fold_constants_ir(m, onnx_shape_inference=True, should_fold=_should_fold)
        passes.RemoveUnusedNodesPass()(m)
        if not folded.modified:
            break
    passes.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0)(m)
    passes.RemoveUnusedNodesPass()(m)
    passes.OutputFixPass()(m)
    passes.NameFixPass()(m)


def fold(model: onnx.ModelProto, label: str = "<model>") -> onnx.ModelProto:
    """``model`` made plain (see the module docstring): functions inlined, constants and shape
    arithmetic folded, ``Constant`` nodes lifted to initializers, unused nodes removed. No other
    rewrite: operators are optimized by gspo's own rules, which the search weighs.

    On a failure inside the folding the model is returned as it was, with a warning: folding
    is a convenience, never a reason to refuse a model that onnxruntime runs.
    """
    import onnx_ir as oir

    if not model.graph.node:
        return model
    try:
        m = oir.from_proto(model)
        _fold_passes(m, label)
        out = oir.to_proto(m)
    except Exception as e:  # the library's own bug or limit: go on with the model as given
        while e.__cause__ is not None:  # the library's own reason, not its wrapper's
            e = e.__cause__
        log.warning("%s: constant folding failed (%s); using the graph as exported", label, first_line(e))
        return model
    if _io_names(out) != _io_names(model):  # the clean-up renamed an input wired to an output
        log.warning("%s: constant folding renamed the graph's inputs or outputs; using the graph as exported", label)
        return model
    out.ir_version = model.ir_version
    _keep_opaque(model.graph, out.graph)
    return out


def _keep_opaque(source: onnx.GraphProto, out: onnx.GraphProto) -> None:
    """Put back, in place in ``out``, the source's own NodeProto of each node gspo does not
    interpret (custom domains, control flow) that the folding left in the graph: onnx-ir's
    NameFixPass names the nodes (and subgraph nodes) that had no name (``node_1``) and the
    optional outputs left out (``""`` becomes ``v``, which makes onnxruntime compute them), and
    writing the model back sorts a node's attributes; an opaque node is saved as it was loaded.

    A node is the source's when it has the source's op, inputs and outputs (an output the source
    left out, named by the pass, read by nothing); the source's bytes go back only if every
    value its subgraphs read is still defined before it (folding may have emptied a subgraph's
    read of a constant that it then removed). Otherwise the node stays as folded.
    """
    mine = {o: n for n in source.node if not is_understood(n) for o in n.output if o}
    read = {i for n in out.node for i in n.input} | {o.name for o in out.output}
    defined = {vi.name for vi in out.input} | {t.name for t in out.initializer}
    defined |= {t.values.name for t in out.sparse_initializer}
    for k, n in enumerate(out.node):
        was = next((mine[o] for o in n.output if o in mine), None)
        if was is not None and _same_node(was, n, read) and _reads(was) <= defined:
            out.node[k].CopyFrom(was)
        defined.update(out.node[k].output)


def _same_node(was: onnx.NodeProto, n: onnx.NodeProto, read: set[str]) -> bool:
    """Whether ``n`` is the source node ``was`` renamed by the clean-up (see :func:`_keep_opaque`)."""
    if (was.op_type, was.domain, list(was.input)) != (n.op_type, n.domain, list(n.input)):
        return False
    if len(was.output) != len(n.output):
        return False
    return all(a == b or (not a and b not in read) for a, b in zip(was.output, n.output))


def _reads(n: onnx.NodeProto) -> set[str]:
    """The names the subgraphs of ``n`` read from enclosing scopes."""
    return {r for a in n.attribute for g in ([a.g] if a.HasField("g") else list(a.graphs))
            for r in subgraph_reads(g)}


def _io_names(model: onnx.ModelProto) -> tuple[list[str], list[str]]:
    weights = {t.name for t in model.graph.initializer}
    return [vi.name for vi in model.graph.input if vi.name not in weights], [vi.name for vi in model.graph.output]


def _unknown_outputs(model: onnx.ModelProto) -> int:
    """How many outputs of standard-domain nodes have no static shape after shape inference."""
    values = infer_values(model, "<front end>")
    count = 0
    for n in model.graph.node:
        if n.domain not in ("", "ai.onnx"):
            continue
        for o in n.output:
            shape = values.get(o, (0, None))[1] if o else ()
            if shape is None or any(not isinstance(d, int) for d in shape):
                count += 1
    return count


def plain(
    model: onnx.ModelProto, pins: Mapping[str, Sequence[int]], dynamic: bool, label: str = "<model>"
) -> tuple[onnx.ModelProto, bool]:
    """The folded model with ``pins`` applied, and whether it still runs at other input sizes.

    With ``dynamic`` (some input dimensions were defaulted, not pinned by the user) the model is
    first folded with those dimensions symbolic: if every value then gets a static shape once
    pinned, that version is kept (its graph computes shapes from the inputs, so the dimensions
    can be left dynamic when it is saved). Otherwise it is folded with the dimensions pinned,
    which turns shape arithmetic on them into constants.
    """
    if dynamic:
        generic = pin_inputs(fold(model, label), pins)
        if _unknown_outputs(generic) == 0:
            return generic, True
        static = fold(pin_inputs(model, pins), label)
        return static, False
    return fold(pin_inputs(model, pins), label), False


def pinned_model(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]], label: str, front_end: bool):
    """The model with its inputs pinned (dynamic dimensions given a default when not pinned)
    and, with ``front_end``, made :func:`plain`; also the defaulted dimensions and the dynamic
    graph inputs and outputs to write back (empty when the result cannot keep them)."""
    weight_names = {t.name for t in model.graph.initializer}
    real_inputs = [vi for vi in model.graph.input if vi.name not in weight_names]
    pins = check_pins(real_inputs, input_shapes, label)
    defaults, defaulted = default_pins(real_inputs, pins)
    dynamic_io: tuple[bytes, ...] = ()
    if defaulted:
        dynamic_io = tuple(pinned_value_info(vi, pins.get(vi.name)).SerializeToString()
                           for vi in list(model.graph.input) + list(model.graph.output) if vi.name not in weight_names)
    pins = {**defaults, **pins}
    if front_end:
        model, generic = plain(model, pins, dynamic=bool(defaulted), label=label)
        dynamic_io = dynamic_io if generic else ()
    elif pins:
        model = pin_inputs(model, pins)
    return model, defaulted, dynamic_io
