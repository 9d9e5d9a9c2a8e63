"""The filled op table of the PyTorch runtime: importing this module imports every op module
(``ops_*``), each registering its ops in :data:`~gspo.runtime.torchrt.registry.OPS`, and
:func:`lookup` finds a node's function there (see :mod:`gspo.runtime.torchrt.registry` for what
an op function is, and :class:`Unsupported` for what the table cannot run).
"""

from __future__ import annotations

from onnx import AttributeProto, TensorProto

from gspo.ir.protos import node_attrs

# the table lives in these modules; importing them registers their ops
from gspo.runtime.torchrt import (  # noqa: F401
    ops_attention,
    ops_index,
    ops_math,
    ops_nn,
    ops_norm,
    ops_ort,
    ops_quant,
    ops_reduce,
    ops_resize,
    ops_rnn,
    ops_tensor,
)
from gspo.runtime.torchrt.registry import OPS, Call, OpFn, Unsupported, torch_dtype

__all__ = ["OPS", "lookup"]

_SUBGRAPHS = (AttributeProto.GRAPH, AttributeProto.GRAPHS)
#: Unsigned integers wider than 8 bits: torch holds them, but its CPU has no arithmetic,
#: comparison or reduction kernels for them (``"gt_cpu" not implemented for 'UInt16'``).
_WIDE_UNSIGNED = frozenset({TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64})
#: Ops that only move, select or convert values, which torch does for every dtype.
_ANY_TYPE = frozenset({"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split",
                       "Slice", "Shape", "Size", "Constant", "Cast", "CastLike", "Expand", "Tile", "Gather"})


def _type_refusal(call: Call) -> str | None:
    """Why the node's element types keep it off torch: a type torch has no dtype for (strings,
    8- and 4-bit floats, 4- and 2-bit integers), or unsigned arithmetic torch has no kernel for."""
    node = call.node
    types = [t for t in call.in_types if t] + [v.dtype for v in node.outputs if v.name and v.dtype]
    for t in types:
        try:
            torch_dtype(t)
        except Unsupported:
            return f"{TensorProto.DataType.Name(t)} tensors have no torch dtype here"
    wide = sorted({TensorProto.DataType.Name(t) for t in types if t in _WIDE_UNSIGNED})
    if wide and node.op_type not in _ANY_TYPE:
        return f"torch has no CPU kernels for {node.op_type} on {wide[0]}"
    return None


def lookup(call: Call) -> OpFn:
    """The function of ``call``'s node.

    Raises:
        Unsupported: no function for the op, or its check refuses this case.
    """
    node = call.node
    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    entry = OPS.get((domain, node.op_type))
    # gspo keeps a node it does not interpret as bytes (opaque): one the table has an entry for
    # (onnxruntime's fused ops) runs, with its attributes read from the bytes; not a subgraph
    if node.is_opaque and (entry is None or node.implicit_inputs or any(a.type in _SUBGRAPHS for a in node_attrs(node))):
        raise Unsupported(f"{node.op_type} holds a subgraph or is outside gspo's op set (run by onnxruntime)")
    if entry is None:
        where = f"{domain}." if domain else ""
        raise Unsupported(f"{where}{node.op_type} is not in the torch runtime's op table")
    fn, check = entry
    why = _type_refusal(call)
    if why:
        raise Unsupported(f"{node.op_type}: {why}")
    if check is not None:
        reason = check(call)
        if reason:
            raise Unsupported(f"{node.op_type}: {reason}")
    return fn
