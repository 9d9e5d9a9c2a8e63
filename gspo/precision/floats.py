"""Reduced float precision on the torch runtime: fp16 and bf16 per piece, and TF32.

:func:`reduced_floats` turns the float32 computation of chosen nodes into float16 or bfloat16:

* a reduced node's float32 inputs and outputs take the reduced type; its float32 weights are
  stored in it (:class:`~gspo.ir.weights.CastW`, computed only when the model is saved); a weight
  that fp32 nodes read too is kept, and a reduced copy added beside it;
* a ``Cast`` sits wherever a value crosses between the reduced part and the fp32 part, once per
  value and direction; the model's inputs and outputs keep their types (a reduced graph output is
  cast back to its name, the reduced value renamed ``<name>.bf16``), and so do the values an
  opaque node reads (its bytes name them, its subgraphs read them as declared); integer and
  boolean values are untouched;
* some ops stay fp32 even when asked (:data:`KEPT_FP32`): those that sum or normalize over a
  whole axis (softmax, layer and group norms, sum-like reductions, cumulative sums), as torch's
  autocast keeps them (``softmax``, ``layer_norm``, ``group_norm``, ``sum``, ``prod``,
  ``cumsum``): an error in the row's sum reaches every output of the row, and these ops are
  cheap beside the matrix products around them. In fp16 also those whose result leaves fp16's
  range for ordinary inputs (:data:`KEPT_FP32_FOR_FP16`: ``exp(11.1)`` is past 65504; bf16 has
  fp32's range). So do the quantization ops, opaque nodes and other domains, and the nodes with
  no float32 output (a comparison, an ``ArgMax``: they read a reduced value cast back, exactly);
  ``Shape`` and ``Size`` read a value in whatever type it is held;
* each position follows the op's ONNX type constraints: a float input the schema keeps float32
  (``Resize``'s scales) stays fp32; an op whose float output cannot take the type, or takes its
  type from an attribute rather than its inputs (``Cast``, ``ConstantOfShape``, the random and
  window ops), stays fp32. Before opset 22, ``Conv``, the pools and a few more take no bfloat16:
  a graph asked for bf16 of such an op has its default opset raised to the first that takes it,
  where every op of the graph reads its nodes the same (:func:`raised_opset`), else those ops
  stay fp32.

The schedule and placement the graph carried are dropped (new nodes, renamed values): the
reduced graph is scheduled anew.

TF32 changes no node: :func:`with_tf32` marks the graph (:data:`TF32_KEY` in its metadata) and
:func:`wants_tf32` reads the mark, for the executor to let matrix products round to TF32.
:func:`torch_kinds` makes the three as kinds of the precision fit
(:class:`~gspo.precision.kind.Kind`); the nodes the torch runtime leaves to onnxruntime stay
fp32 there (onnxruntime's Python API takes no bfloat16, and its CPU has few float16 kernels).

Example:
    >>> from gspo.ir.builder import GraphBuilder
    >>> b = GraphBuilder("mlp")
    >>> x = b.input("x", (1, 8))
    >>> m = b.op("MatMul", [x, b.weight("w", (8, 4))])
    >>> h = b.op("Relu", [m])
    >>> g = reduced_floats(b.output(b.op("Softmax", [h])).build(), {m, h}, "bf16")
    >>> [n.op_type for n in g.nodes], g.weights["w"].dtype == TensorProto.BFLOAT16
    (['Cast', 'MatMul', 'Relu', 'Cast', 'Softmax'], True)
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Collection, Mapping, Sequence

import onnx
from onnx import AttributeProto, TensorProto

from gspo.errors import GspoError
from gspo.ir import Graph, Node, Value
from gspo.ir.graph import Attr
from gspo.ir.metadata import metadata_value, with_metadata
from gspo.ir.weights import CastW, Weight
from gspo.precision.kind import Kind

__all__ = ["FLOAT_PRECISIONS", "KEPT_FP32", "KEPT_FP32_FOR_FP16", "TF32_KEY", "float_kernels", "raised_opset",
           "reduced_floats", "reducible", "torch_kinds", "torch_refused", "wants_tf32", "with_tf32"]

#: The precisions :func:`torch_kinds` makes kinds of, and the element type of the reduced ones.
FLOAT_PRECISIONS = {"fp16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16, "tf32": TensorProto.FLOAT}
_TAGS = {TensorProto.FLOAT: "fp32", TensorProto.FLOAT16: "fp16", TensorProto.BFLOAT16: "bf16"}
#: Ops left fp32 when asked to reduce: each sums or normalizes over a whole axis (see the module
#: docstring).
KEPT_FP32 = frozenset({
    "Softmax", "LogSoftmax", "LayerNormalization", "GroupNormalization", "InstanceNormalization",
    "LpNormalization", "MeanVarianceNormalization", "RMSNormalization", "ReduceSum", "ReduceMean",
    "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceProd", "CumSum",
})
#: Ops also left fp32 in fp16, whose results leave fp16's range (65504) for ordinary inputs.
KEPT_FP32_FOR_FP16 = frozenset({"Exp", "Pow", "Log", "Reciprocal", "Softplus"})
#: Ops never reduced besides those whose output type is not their inputs' (:func:`_positions`):
#: a CastLike converts to what its second input says, and the quantization ops are int8's.
_NEVER = frozenset({"CastLike", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"})
#: Ops that read a value of any type alike (its shape): they read it in the type it is held in.
_ANY_TYPE = frozenset({"Shape", "Size"})
#: Ops of matrix products and convolutions: what a reduced or TF32 kind speeds up.
_PRODUCTS = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum"})
#: The metadata entry that marks a graph to run with TF32 matrix products, and its value.
TF32_KEY = "gspo.precision"
_TF32 = "tf32"


def _elem(dtype: str | int) -> int:
    """The ONNX element type of ``dtype`` (``"fp16"``, ``"bf16"``, or the element type itself)."""
    elem = FLOAT_PRECISIONS.get(dtype, dtype) if isinstance(dtype, str) else int(dtype)
    if elem not in (TensorProto.FLOAT16, TensorProto.BFLOAT16):
        raise GspoError(f"reduced floats are fp16 or bf16, not {dtype!r}")
    return elem


# ---------------------------------------------------------------------- what a schema takes
@functools.lru_cache(maxsize=4096)
def _params(op_type: str, opset: int, elem: int):
    """Op ``op_type``'s formal inputs and outputs at ``opset``, each ``(type parameter, whether
    it takes elem, variadic)``; ``None`` without a schema."""
    try:
        schema = onnx.defs.get_schema(op_type, opset, "")
    except onnx.defs.SchemaError:
        return None
    want = f"tensor({onnx.helper.tensor_dtype_to_string(elem).split('.')[-1].lower()})"
    allowed = {c.type_param_str: frozenset(c.allowed_type_strs) for c in schema.type_constraints}
    variadic = onnx.defs.OpSchema.FormalParameterOption.Variadic

    def table(params) -> tuple:
        return tuple((p.type_str, want in allowed.get(p.type_str, {p.type_str}), p.option == variadic)
                     for p in params)

    return table(schema.inputs), table(schema.outputs)


def _param(params: tuple, i: int) -> str:
    """The type parameter of position ``i`` when it takes the reduced type, else ``""`` (a
    variadic last formal covers the positions past it)."""
    p = params[i] if i < len(params) else (params[-1] if params and params[-1][2] else None)
    return p[0] if p is not None and p[1] else ""


def _positions(node: Node, types: Mapping[str, int], elem: int, opset: int):
    """Which inputs and outputs of ``node`` take ``elem`` instead of float32 (``None``: the node
    cannot be reduced: it has no float32 output, or one the schema keeps float32, or one whose
    type is not its inputs' (an attribute fixes it: ``Cast``, ``ConstantOfShape``, the random
    and window ops))."""
    params = _params(node.op_type, opset, elem)
    if params is None:
        return None
    ins = tuple(bool(n) and types.get(n) == TensorProto.FLOAT and bool(_param(params[0], i))
                for i, n in enumerate(node.inputs))
    shared = {_param(params[0], i) for i, converted in enumerate(ins) if converted}
    floats = [k for k, v in enumerate(node.outputs) if v.name and v.dtype == TensorProto.FLOAT]
    if not floats or not all(_param(params[1], k) in shared for k in floats):
        return None
    return ins, tuple(k in floats for k in range(len(node.outputs)))


def reducible(node: Node, elem: int, opset: int, types: Mapping[str, int]) -> bool:
    """Whether ``node`` computes float32 that can be done in ``elem`` at ``opset`` (``types``:
    the element type of each value by name; see the module docstring)."""
    if node.is_opaque or node.domain not in ("", "ai.onnx") or node.op_type in _NEVER:
        return False
    if node.op_type in KEPT_FP32 or (elem == TensorProto.FLOAT16 and node.op_type in KEPT_FP32_FOR_FP16):
        return False
    return _positions(node, types, elem, opset) is not None


# ---------------------------------------------------------------------- raising the opset
def _signature(schema) -> tuple:
    attrs = {a: schema.attributes[a].default_value.SerializeToString() for a in schema.attributes}
    return attrs, [(p.name, p.option) for p in schema.inputs], [(p.name, p.option) for p in schema.outputs]


def _reads_the_same(op_type: str, old: int, new: int) -> bool:
    """Whether op ``op_type``'s schema at ``new`` reads a node of ``old`` the same: every old
    attribute kept with its default, the old inputs and outputs in place (new inputs optional,
    after them), what ONNX's versioning guarantees keeps an old node's meaning. (Reduce ops at 18
    move ``axes`` from an attribute to an input: not the same.)"""
    try:
        a, b = onnx.defs.get_schema(op_type, old, ""), onnx.defs.get_schema(op_type, new, "")
    except onnx.defs.SchemaError:
        return False
    if a.since_version == b.since_version:
        return True
    (attrs_a, ins_a, outs_a), (attrs_b, ins_b, outs_b) = _signature(a), _signature(b)
    optional = onnx.defs.OpSchema.FormalParameterOption.Optional
    return (all(attrs_b.get(k) == v for k, v in attrs_a.items()) and ins_b[:len(ins_a)] == ins_a
            and all(opt == optional for _, opt in ins_b[len(ins_a):]) and outs_b == outs_a)


#: The opsets a graph's default opset may be raised to for bf16 (onnxruntime 1.20 reads 22).
_RAISE_TO = (22,)


def raised_opset(graph: Graph, nodes: Collection[Node], elem: int) -> int:
    """The default opset ``graph`` is reduced at: its own, or the first of :data:`_RAISE_TO` where
    more of ``nodes`` take ``elem`` and every op of the graph reads its nodes the same."""
    opset = graph.opset
    if 0 < graph.extras.ir_version < 4:  # before IR 4 initializers listed as inputs are constants
        return opset
    types = {name: v.dtype for name, v in graph.values.items()}
    here = sum(reducible(n, elem, opset, types) for n in nodes)
    default_ops = {n.op_type for n in graph.nodes if not n.is_opaque and n.domain in ("", "ai.onnx")}
    for new in (v for v in _RAISE_TO if v > opset):
        if sum(reducible(n, elem, new, types) for n in nodes) > here and all(
                _reads_the_same(op, opset, new) for op in default_ops):
            return new
    return opset


def _with_opset(graph: Graph, opset: int) -> Graph:
    """``graph`` at default opset ``opset``, its IR version raised to the least that opset needs
    (from IR 4 on a higher version reads a model the same)."""
    if opset == graph.opset:
        return graph
    opsets = tuple((d, opset if d in ("", "ai.onnx") else v) for d, v in graph.opsets)
    needed = onnx.helper.find_min_ir_version_for([onnx.helper.make_opsetid(d, v) for d, v in opsets], True)
    ir_version = graph.extras.ir_version and max(graph.extras.ir_version, needed)
    return dataclasses.replace(graph, opsets=opsets, extras=dataclasses.replace(graph.extras, ir_version=ir_version))


# ---------------------------------------------------------------------- the rewrite
def _id(node: Node) -> str:
    return next((v.name for v in node.outputs if v.name), "")


def reduced_floats(graph: Graph, node_ids: Collection[str], dtype: str | int) -> Graph:
    """``graph`` with the float32 computation of the nodes ``node_ids`` (their first named
    outputs, as :func:`~gspo.streams.node_id` gives them) done in ``dtype`` (``"fp16"`` or
    ``"bf16"``, or the ONNX element type), Casts at the boundaries (see the module docstring).
    With no node to reduce, ``graph`` itself.

    Raises:
        GspoError: ``dtype`` is no reduced float type.
    """
    elem = _elem(dtype)
    asked = [n for n in graph.nodes if _id(n) in node_ids]
    opset = raised_opset(graph, asked, elem)
    types = {name: v.dtype for name, v in graph.values.items()}
    plan = {n: _positions(n, types, elem, opset) for n in asked if reducible(n, elem, opset, types)}
    if not plan:
        return graph
    reduced = _with_opset(_Rewrite(graph, elem, plan).graph(), opset)
    extras = dataclasses.replace(reduced.extras, schedule="", placement="")
    return dataclasses.replace(reduced, extras=extras).check()


class _Rewrite:
    """One pass over the nodes in order: each reduced node rewritten, a Cast made the first time
    a value is read in a type it is not held in (:meth:`held`)."""

    def __init__(self, graph: Graph, elem: int, plan: Mapping[Node, tuple]):
        self.g, self.elem, self.plan = graph, elem, plan
        self.taken = set(graph.values)
        self.nodes: list[Node] = []
        self.weights: dict[str, Weight] = dict(graph.weights)
        #: the values that keep their type under their name: the graph's outputs, and what an
        #: opaque node reads (its bytes name them, its subgraphs read them in their declared type)
        self.pinned = set(graph.output_names()) | {i for n in graph.nodes if n.is_opaque for i in n.reads() if i}
        #: value name -> {element type: the name of the value holding it in that type}
        self.have: dict[str, dict[int, str]] = {v.name: {v.dtype: v.name} for v in graph.inputs}
        wanted = self._wanted()
        for name, w in graph.weights.items():
            if wanted.get(name) == {elem} and name not in self.pinned:
                self.weights[name] = CastW(w, elem)  # only reduced nodes read it: stored reduced
                self.have[name] = {elem: name}
            else:
                self.have[name] = {w.dtype: name}

    def _wanted(self) -> dict[str, set[int]]:
        """The element types each value is read in."""
        wanted: dict[str, set[int]] = {}
        for node in self.g.nodes:
            for name, want in zip(node.inputs, self._wants(node)):
                if name and want:
                    wanted.setdefault(name, set()).add(want)
        for name in self.pinned:
            wanted.setdefault(name, set()).add(self.g.values[name].dtype)
        return wanted

    def _wants(self, node: Node) -> list[int]:
        """The element type ``node`` reads each input in (0: any, :data:`_ANY_TYPE`)."""
        if node.op_type in _ANY_TYPE and node.domain in ("", "ai.onnx"):
            return [0] * len(node.inputs)
        converted = self.plan[node][0] if node in self.plan else ()
        return [self.elem if i < len(converted) and converted[i] else (self.g.values[n].dtype if n else 0)
                for i, n in enumerate(node.inputs)]

    def _fresh(self, base: str, elem: int) -> str:
        name, k = f"{base}.{_TAGS.get(elem, elem)}", 1
        while name in self.taken:
            name, k = f"{base}.{_TAGS.get(elem, elem)}.{k}", k + 1
        self.taken.add(name)
        return name

    def _cast(self, src: str, to: int, dst: str, shape) -> None:
        self.nodes.append(Node("Cast", (src,), (Value(dst, to, shape),), (Attr("to", AttributeProto.INT, to),),
                               name=dst))

    def held(self, name: str, want: int) -> str:
        """The name of value ``name`` held as ``want``, cast (or a weight converted) when first asked."""
        have = self.have[name]
        if want in have or not want:
            return have.get(want, next(iter(have.values())))
        dst = self._fresh(name, want)
        if name in self.g.weights and name in have.values():
            self.weights[dst] = CastW(self.g.weights[name], want)
        else:
            src = have.get(TensorProto.FLOAT, next(iter(have.values())))
            self._cast(src, want, dst, self.g.values[name].shape)
        have[want] = dst
        return dst

    def graph(self) -> Graph:
        """The rewritten graph (opset, schedule and placement as ``self.g``'s)."""
        for node in self.g.nodes:
            inputs = tuple(self.held(n, want) if n else n for n, want in zip(node.inputs, self._wants(node)))
            if node not in self.plan:
                self.nodes.append(node if inputs == node.inputs else node.replace(inputs=inputs))
                for v in node.outputs:
                    self.have[v.name] = {v.dtype: v.name}
                continue
            converted = self.plan[node][1]
            outs = tuple(self._output(v) if converted[k] else v for k, v in enumerate(node.outputs))
            self.nodes.append(node.replace(inputs=inputs, outputs=outs))
            for v, new in zip(node.outputs, outs):
                if new is not v and v.name in self.pinned:  # the interface keeps its type: cast back
                    self._cast(new.name, v.dtype, v.name, v.shape)
                    self.have[v.name][v.dtype] = v.name
        return dataclasses.replace(self.g, nodes=tuple(self.nodes), weights=self.weights)

    def _output(self, v: Value) -> Value:
        name = self._fresh(v.name, self.elem) if v.name in self.pinned else v.name
        self.have[v.name] = {self.elem: name}
        return Value(name, self.elem, v.shape)


# ---------------------------------------------------------------------- TF32 and the kinds
def with_tf32(graph: Graph, on: bool = True) -> Graph:
    """``graph`` marked to run with TF32 matrix products and convolutions (``on``), or unmarked."""
    return with_metadata(graph, TF32_KEY, _TF32 if on else None)


def wants_tf32(graph: Graph) -> bool:
    """Whether ``graph`` is marked to run with TF32 (:func:`with_tf32`): what the torch
    executor reads to allow TF32 around a run."""
    return metadata_value(graph, TF32_KEY) == _TF32


def float_kernels(graph: Graph, precision: str, refused: Collection[str] = ()) -> frozenset[str]:
    """The node ids of the float32 matrix products and convolutions (:data:`_PRODUCTS`) that
    ``precision`` computes faster: every one for ``"tf32"``, those it can reduce for fp16 and
    bf16; none of ``refused`` (the nodes the runtime leaves to onnxruntime)."""
    products = [n for n in graph.nodes if n.op_type in _PRODUCTS and n.domain in ("", "ai.onnx")
                and not n.is_opaque and _id(n) not in refused
                and any(v.dtype == TensorProto.FLOAT for v in n.outputs if v.name)]
    if precision == "tf32":
        return frozenset(_id(n) for n in products)
    elem = _elem(precision)
    opset = raised_opset(graph, products, elem)
    types = {name: v.dtype for name, v in graph.values.items()}
    return frozenset(_id(n) for n in products if reducible(n, elem, opset, types))


def torch_refused(graph: Graph) -> frozenset[str]:
    """The ids of the nodes the torch runtime's op table cannot run (onnxruntime's CPU provider
    runs them, and takes no bfloat16 and few float16 kernels: they stay fp32)."""
    from gspo.runtime.torchrt.convert import unsupported_nodes

    return frozenset(_id(graph.nodes[i]) for i in unsupported_nodes(graph))


def _reduced_kind(graph: Graph, precision: str, kernels: frozenset[str], refused: frozenset[str]) -> Kind:
    return Kind(f"{precision} on torch", precision, "torch", lambda ops: any(op in kernels for op in ops),
                lambda reduced: reduced_floats(graph, frozenset(reduced) - refused, precision))


def _tf32_kind(graph: Graph, kernels: frozenset[str]) -> Kind:
    """TF32 is one switch for the whole run: the kind touches one piece, the one holding the
    first product (its anchor); built with it reduced, the graph is marked; sent back, it is fp32."""
    anchor = next(_id(n) for n in graph.nodes if _id(n) in kernels)
    return Kind("tf32 on torch", "tf32", "torch", lambda ops: anchor in ops,
                lambda reduced: with_tf32(graph, anchor in reduced))


def torch_kinds(graph: Graph, precisions: Sequence[str],
                refused: Collection[str] | None = None) -> tuple[list[Kind], list[str]]:
    """The kinds of :data:`FLOAT_PRECISIONS` that ``precisions`` asks for, on the torch runtime,
    and a line for each that has nothing to speed up here (why). ``fp16`` and ``bf16`` touch a
    piece with a float32 matrix product or convolution they can reduce and build
    :func:`reduced_floats` of the reduced pieces, the nodes ``refused`` left fp32 (default:
    :func:`torch_refused`); ``tf32`` marks the whole graph (:func:`with_tf32`). Other precisions
    (int8) are left to other kinds."""
    asked = list(dict.fromkeys(p for p in precisions if p in FLOAT_PRECISIONS))
    refused = frozenset(torch_refused(graph) if refused is None and asked else refused or ())
    kinds: list[Kind] = []
    notes: list[str] = []
    for precision in asked:
        kernels = float_kernels(graph, precision, refused)
        if not kernels:
            notes.append(f"{precision}: no float32 MatMul, Gemm or Conv the torch runtime could run at {precision}")
        elif precision == "tf32":
            kinds.append(_tf32_kind(graph, kernels))
        else:
            kinds.append(_reduced_kind(graph, precision, kernels, refused))
    return kinds, notes
