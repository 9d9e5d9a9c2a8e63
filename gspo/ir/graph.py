"""The immutable, hash-consed graph that every gspo module works on.

A :class:`Graph` holds its nodes in topological order. Nodes name the values they read and
write (ONNX style), so a rewrite that keeps the names of the values it leaves observable
replaces only the nodes it changes: every other :class:`Node` object is shared between the old
and the new graph. Keys are digests of structure; a graph's key combines its nodes' keys without
regard to their order, so two graphs that are built differently but wire the same nodes the same
way are equal, and "already seen" is a set lookup.

Node and graph *names* (``Node.name``, ``Graph.name``) are labels kept for a faithful round
trip; they are not structure and do not enter keys. Value names are the wiring and do.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from types import MappingProxyType
from typing import Any

from gspo.ir.digests import combine, digest
from gspo.ir.weights import Weight, WeightStore

__all__ = ["Value", "Attr", "Node", "Graph", "ModelExtras", "GraphError", "fresh_name"]


class GraphError(ValueError):
    """A graph that breaks an invariant (not topologically sorted, a value produced twice, ...)."""


@dataclass(frozen=True)
class Value:
    """A tensor: its name, ONNX element type and static shape (``None`` when unknown).

    Dimensions are ints; a dimension that shape inference could not resolve is a string
    (its symbolic name or ``"?"``). A value that is not a tensor (a sequence, map or optional)
    has ``dtype`` 0, no shape, and its serialized ``TypeProto`` in ``type_proto``; a tensor
    whose element type is not known has ``dtype`` 0 and no ``type_proto``.
    """

    name: str
    dtype: int
    shape: tuple[int | str, ...] | None
    type_proto: bytes = b""

    @property
    def is_tensor(self) -> bool:
        """Whether the value is a tensor of a known element type."""
        return self.dtype != 0 and not self.type_proto

    @property
    def is_static(self) -> bool:
        """Whether every dimension is a known integer."""
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)


@dataclass(frozen=True)
class Attr:
    """An ONNX attribute: ``type`` is ``onnx.AttributeProto.AttributeType``.

    ``value`` is an int, float, bytes, or a tuple of those; TENSOR, SPARSE_TENSOR and
    TYPE_PROTO values are the serialized protobuf bytes.
    """

    name: str
    type: int
    value: Any


@dataclass(frozen=True, eq=False)
class Node:
    """One operator. ``inputs`` are value names ('' for a skipped optional input).

    ``opaque`` holds the serialized ``NodeProto`` of an operator gspo does not interpret (a
    custom domain, a subgraph attribute such as If/Loop, an op without a schema): it is saved
    back unchanged and never rewritten. ``implicit_inputs`` are the outer-scope values that its
    subgraphs read, so that dependencies stay visible.
    """

    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[Value, ...]
    attrs: tuple[Attr, ...] = ()
    domain: str = ""
    name: str = ""
    stream: int | None = None
    opaque: bytes | None = None
    implicit_inputs: tuple[str, ...] = ()
    key: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_reads", tuple(i for i in self.inputs if i) + self.implicit_inputs)
        attrs = tuple((a.name, a.type, a.value) for a in self.attrs)
        outs = tuple((v.name, v.dtype, v.shape, v.type_proto) for v in self.outputs)
        object.__setattr__(
            self,
            "key",
            digest(
                self.domain,
                self.op_type,
                self.inputs,
                outs,
                attrs,
                self.stream,
                self.opaque,
                self.implicit_inputs,
            ),
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Node) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    @property
    def is_opaque(self) -> bool:
        """Whether gspo keeps this node as serialized bytes, never rewritten."""
        return self.opaque is not None

    def attr(self, name: str, default: Any = None) -> Any:
        """The value of attribute ``name``, or ``default``."""
        for a in self.attrs:
            if a.name == name:
                return a.value
        return default

    @property
    def output_names(self) -> tuple[str, ...]:
        """The names of the node's outputs, in order."""
        return tuple(v.name for v in self.outputs)

    def reads(self) -> tuple[str, ...]:
        """Every value the node depends on (explicit inputs and subgraph captures)."""
        return self._reads  # type: ignore[attr-defined]

    def replace(self, **changes: Any) -> Node:
        """A copy of the node with ``changes`` applied (dataclass fields)."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class ModelExtras:
    """Model-level fields kept only for a faithful round trip (they are not structure)."""

    ir_version: int = 0
    producer_name: str = ""
    producer_version: str = ""
    domain: str = ""
    model_version: int = 0
    doc_string: str = ""
    graph_doc_string: str = ""
    metadata: tuple[tuple[str, str], ...] = ()
    functions: tuple[bytes, ...] = ()
    value_info: tuple[bytes, ...] = ()
    weight_inputs: tuple[str, ...] = ()
    input_order: tuple[str, ...] = ()
    #: The ``gspo.schedule`` JSON the model was saved with ("" if none).
    schedule: str = ""
    #: The ``gspo.placement`` JSON (backend per op) the model was saved with ("" if none).
    placement: str = ""
    sparse_initializers: tuple[bytes, ...] = ()
    #: Dynamic input dimensions given default values at load (``pinning.DefaultedDim``).
    defaulted: tuple = ()
    #: The graph inputs' and outputs' ``ValueInfoProto`` with their dynamic dimensions, when the
    #: graph still computes at other sizes (see ``to_model(..., keep_dynamic=True)``).
    dynamic_io: tuple[bytes, ...] = ()
    #: Why onnxruntime refuses the model with its inputs pinned ("" when it does not): the
    #: model is then always written with the inputs and outputs it declares (``dynamic_io``);
    #: the pinned shapes hold only inside gspo.
    static_refused: str = ""
    #: The model's weights were read from files beside it (external data).
    external_data: bool = False


@dataclass(frozen=True, eq=False)
class Graph:
    """A computation graph: inputs, outputs, topologically sorted nodes, lazy weights.

    Args:
        inputs: graph inputs (weights excluded).
        outputs: graph outputs, by value.
        nodes: operators in a topological order.
        weights: constant initializers by name.
        opsets: ``(domain, version)`` pairs.
    """

    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    nodes: tuple[Node, ...]
    weights: Mapping[str, Weight]
    opsets: tuple[tuple[str, int], ...] = (("", 17),)
    name: str = "graph"
    store: WeightStore = field(default_factory=WeightStore, repr=False)
    extras: ModelExtras = field(default_factory=ModelExtras, repr=False)
    #: Names of weights that rewrites removed, by weight key: a later rewrite that rebuilds the
    #: same expression (a split then merged back) gets the old name back. Not structure.
    retired_weights: Mapping[bytes, str] = field(default_factory=dict, repr=False)
    key: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "weights", MappingProxyType(dict(self.weights)))
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "nodes", tuple(self.nodes))
        node_sum = combine(n.key for n in self.nodes)
        weight_sum = combine(_named_key(name, w.key) for name, w in self.weights.items())
        object.__setattr__(
            self,
            "key",
            digest(
                tuple((v.name, v.dtype, v.shape) for v in self.inputs),
                tuple((v.name, v.dtype, v.shape) for v in self.outputs),
                tuple(sorted(self.opsets)),
                node_sum,
                weight_sum,
            ),
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Graph) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    # ----------------------------------------------------------------- lookups
    @cached_property
    def producers(self) -> Mapping[str, tuple[Node, int]]:
        """Value name -> (producing node, output index)."""
        out: dict[str, tuple[Node, int]] = {}
        for n in self.nodes:
            for i, v in enumerate(n.outputs):
                if v.name:
                    out[v.name] = (n, i)
        return MappingProxyType(out)

    @cached_property
    def consumers(self) -> Mapping[str, tuple[Node, ...]]:
        """Value name -> nodes that read it, in graph order."""
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            for name in dict.fromkeys(n.reads()):
                out.setdefault(name, []).append(n)
        return MappingProxyType({k: tuple(v) for k, v in out.items()})

    @cached_property
    def nodes_by_op(self) -> Mapping[str, tuple[Node, ...]]:
        """Op type -> its nodes, in graph order (what rules anchored on an op type scan)."""
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            out.setdefault(n.op_type, []).append(n)
        return MappingProxyType({k: tuple(v) for k, v in out.items()})

    @cached_property
    def position(self) -> Mapping[Node, int]:
        """Node -> its index in graph order."""
        return MappingProxyType({n: i for i, n in enumerate(self.nodes)})

    @cached_property
    def values(self) -> Mapping[str, Value]:
        """Every named value: graph inputs, weights and node outputs."""
        out: dict[str, Value] = {v.name: v for v in self.inputs}
        for name, w in self.weights.items():
            out[name] = Value(name, w.dtype, w.shape)
        for n in self.nodes:
            for v in n.outputs:
                if v.name:
                    out[v.name] = v
        return MappingProxyType(out)

    @cached_property
    def opset(self) -> int:
        """Version of the default (``ai.onnx``) operator set."""
        for dom, ver in self.opsets:
            if dom in ("", "ai.onnx"):
                return ver
        return 0

    def value(self, name: str) -> Value:
        """The value called ``name`` (input, weight or node output)."""
        return self.values[name]

    def is_weight(self, name: str) -> bool:
        """Whether ``name`` is an initializer."""
        return name in self.weights

    def output_names(self) -> tuple[str, ...]:
        """The names of the graph outputs, in order."""
        return tuple(v.name for v in self.outputs)

    # ---------------------------------------------------------------- checks
    def check(self) -> Graph:
        """Raise :class:`GraphError` unless the graph is well formed; return it otherwise.

        Well formed: every value produced once, every read value defined earlier (a graph
        input, a weight, or an output of an earlier node), every graph output defined.
        """
        defined = {v.name for v in self.inputs} | set(self.weights)
        if len(defined) != len(self.inputs) + len(self.weights):
            raise GraphError("a graph input has the name of a weight, or two inputs share a name")
        for n in self.nodes:
            for name in n.reads():
                if name not in defined:
                    raise GraphError(f"node {n.name or n.op_type!r} reads {name!r} before it is defined")
            for v in n.outputs:
                if v.name and v.name in defined:
                    raise GraphError(f"value {v.name!r} is produced twice")
                if v.name:
                    defined.add(v.name)
        for v in self.outputs:
            if v.name not in defined:
                raise GraphError(f"graph output {v.name!r} is never produced")
        return self

    # -------------------------------------------------------------- rewrites
    def replace_nodes(
        self,
        remove: Iterable[Node] = (),
        add: Sequence[Node] = (),
        weights: Mapping[str, Weight] | None = None,
    ) -> Graph:
        """A new graph with ``remove`` taken out and ``add`` put in (pure; shares the rest).

        New weights are added; weights that only removed nodes read are dropped. Nodes are
        re-sorted topologically, keeping the old relative order where the data allows.
        """
        gone = {n.key for n in remove}
        kept = [n for n in self.nodes if n.key not in gone]
        at = next((i for i, n in enumerate(self.nodes) if n.key in gone), len(self.nodes))
        at -= sum(1 for n in self.nodes[:at] if n.key in gone)
        new_weights = dict(self.weights)
        new_weights.update(weights or {})
        nodes = _sorted(kept[:at] + list(add) + kept[at:])
        read = {name for n in nodes for name in n.reads()} | set(self.output_names())
        retired = dict(self.retired_weights)
        for n in self.nodes:
            if n.key in gone:
                for name in n.reads():
                    if name in new_weights and name not in read:
                        retired.setdefault(new_weights[name].key, name)
                        del new_weights[name]
        return dataclasses.replace(self, nodes=tuple(nodes), weights=new_weights, retired_weights=retired)

    def with_values(self, values: Mapping[str, Value]) -> Graph:
        """A copy of the graph whose node outputs and graph outputs named in ``values`` have
        those types and shapes instead (what onnxruntime inferred where onnx could not)."""
        def swap(vs: tuple[Value, ...]) -> tuple[Value, ...]:
            return tuple(values.get(v.name, v) if v.name else v for v in vs)

        nodes = [n if not any(v.name in values for v in n.outputs) else n.replace(outputs=swap(n.outputs))
                 for n in self.nodes]
        return dataclasses.replace(self, nodes=tuple(nodes), outputs=swap(self.outputs))

    def with_nodes(self, nodes: Sequence[Node]) -> Graph:
        """A copy of the graph with ``nodes`` instead of its own."""
        return dataclasses.replace(self, nodes=tuple(nodes))


@lru_cache(maxsize=1 << 16)
def _named_key(name: str, key: bytes) -> bytes:
    return digest(name, key)


def _sorted(nodes: list[Node]) -> list[Node]:
    """``nodes`` if already in a topological order (a common case for rewrites), else sorted."""
    defined: set[str] = set()
    produced = {v.name for n in nodes for v in n.outputs if v.name}
    for n in nodes:
        for name in n._reads:  # type: ignore[attr-defined]
            if name in produced and name not in defined:
                return toposort(nodes)
        defined.update(v.name for v in n.outputs if v.name)
    return nodes


def toposort(nodes: Sequence[Node]) -> list[Node]:
    """Stable topological sort: among ready nodes, the one listed first goes first.

    Raises:
        GraphError: on a cycle.
    """
    producer: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for v in n.outputs:
            if v.name:
                producer[v.name] = i
    deps: list[set[int]] = []
    users: list[list[int]] = [[] for _ in nodes]
    for i, n in enumerate(nodes):
        d = {producer[x] for x in n.reads() if x in producer and producer[x] != i}
        deps.append(d)
        for j in d:
            users[j].append(i)
    missing = [len(d) for d in deps]
    ready = [i for i, m in enumerate(missing) if m == 0]
    heapq.heapify(ready)
    order: list[Node] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(nodes[i])
        for u in users[i]:
            missing[u] -= 1
            if missing[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(nodes):
        raise GraphError("the graph has a cycle")
    return order


def fresh_name(prefix: str, *parts: object) -> str:
    """A deterministic value name derived from content (the same rewrite gives the same name)."""
    return f"{prefix}_{digest(*parts).hex()[:12]}"
