"""What every rewrite rule is made of.

A rule states its source pattern (a :class:`~gspo.rules.pattern.Pattern`: the named nodes it
binds, its root first), finds *sites* in a graph, binds the pattern's nodes at each one
(:meth:`Rule.match`, shared by every rule), checks the conditions on the bound nodes (returning
a :class:`Match` that carries everything the rewrite needs, or raising a :class:`Mismatch` that
says why not) and applies a match purely: ``apply(graph, match) -> graph`` (built with
:class:`~gspo.rules.edit.Edit`) only builds the rewrite from the match: it neither looks at the
graph again nor decides anything (``tests/rules/test_rule_shape.py`` holds every rule to it).
The preconditions several rules share are the named functions here (:func:`plain_conv`,
:func:`conv_mismatch`, :func:`single_consumer`, :func:`constant`, ...).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

import numpy as np

from gspo.ir import Attr, Graph, Node, Value, Weight, broadcast_shapes
from gspo.ir.builder import make_attr
from gspo.ir.shapes import resolve_pads

__all__ = [
    "Fail",
    "Mismatch",
    "OpSet",
    "position_ops",
    "need",
    "require",
    "fail_if",
    "Match",
    "Rule",
    "ConvParams",
    "conv_params",
    "conv_mismatch",
    "plain_conv",
    "constant_params",
    "attrs_with",
    "axis_of",
    "broadcasts_within",
    "is_static",
    "static_values",
    "constant",
    "single_consumer",
    "can_rewire",
    "is_output",
    "site_guard",
    "qdq_guard",
    "QDQ_OPS",
]

T = TypeVar("T")


@dataclass(frozen=True)
class Fail:
    """Why a site does not match: a reason for people (``"strides differ"``)."""

    reason: str
    nodes: tuple[str, ...] = ()

    def mismatch(self) -> Mismatch:
        """This failure as the :class:`Mismatch` a check raises."""
        return Mismatch(self.reason, self.nodes)


class Mismatch(Exception):
    """Raised inside :meth:`Rule.check` (through :func:`need` and :func:`require`): the site does
    not match, and why. :meth:`Rule.match` turns it into a :class:`Fail`."""

    def __init__(self, reason: str, nodes: tuple[str, ...] = ()):
        super().__init__(reason)
        self.fail = Fail(reason, nodes)


def need(value: T | Fail, reason: str | None = None) -> T:
    """``value``, or a :class:`Mismatch` when it is a :class:`Fail` (with ``reason`` when
    given, else the Fail's own)."""
    if isinstance(value, Fail):
        raise Mismatch(reason) if reason else value.mismatch()
    return value


def require(condition: bool, reason: str) -> None:
    """A :class:`Mismatch` with ``reason`` unless ``condition`` holds."""
    if not condition:
        raise Mismatch(reason)


def fail_if(reason: str | None) -> None:
    """A :class:`Mismatch` with ``reason`` when there is one (what :func:`conv_mismatch` says)."""
    if reason is not None:
        raise Mismatch(reason)


@dataclass(frozen=True)
class Match:
    """A site where a rule applies, carrying everything its rewrite is built from: the nodes the
    rewrite replaces (the anchor first; what the QDQ guard examines) and, by name, the other
    bound nodes and the values the check derived (weights, axes, sizes, ...)."""

    rule: str
    nodes: tuple[Node, ...]
    #: (name, value) pairs, sorted by name; not compared (they may hold arrays).
    params: tuple[tuple[str, Any], ...] = field(default=(), compare=False)
    #: The site the match was found at (what :meth:`Rule.check` re-examines).
    site: tuple[Node, ...] = field(default=(), compare=False, repr=False)

    def __getitem__(self, key: str) -> Any:
        for k, v in self.params:
            if k == key:
                return v
        raise KeyError(key)

    @property
    def node_names(self) -> tuple[str, ...]:
        """The names of the match's nodes (their op type where unnamed)."""
        return tuple(n.name or n.op_type for n in self.nodes)


class OpSet(str):
    """A pattern position that any of several op types can fill; it reads as its example op.

    ``OpSet("Relu", ELEMENTWISE)`` stands for every elementwise op and prints as ``Relu``.
    """

    ops: frozenset[str]

    def __new__(cls, example: str, ops: Iterable[str]) -> OpSet:
        """Make the position ``example`` that any op type in ``ops`` can fill."""
        self = super().__new__(cls, example)
        self.ops = frozenset(ops)
        return self

    def __reduce__(self):
        return (OpSet, (str(self), tuple(sorted(self.ops))))


def position_ops(position: str) -> frozenset[str]:
    """The op types that can fill a pattern position (one op type, or an :class:`OpSet`)."""
    return position.ops if isinstance(position, OpSet) else frozenset([position])


class Rule:
    """Base class: a rule states its ``pattern`` and implements ``check`` and ``apply``.

    ``pattern`` lists the op types of the source pattern, its root (the op every site is
    anchored on) first; a position that several op types can fill is an :class:`OpSet`. An
    empty pattern roots the rule on every op. A :class:`~gspo.rules.pattern.Pattern` also names
    the nodes :meth:`match` binds at each site before ``check`` sees them (as a
    :class:`~gspo.rules.pattern.Bound`: ``site["lin"]``); a plain tuple of op types binds
    nothing (``check`` gets the site). ``check`` holds the conditions on the bound nodes and
    returns a :class:`Match` carrying everything ``apply`` needs, or raises a :class:`Mismatch`
    (through :func:`need` and :func:`require`); ``apply`` builds the rewrite of a match from the
    match alone. A rule whose sites are more than one root node overrides ``sites``.
    """

    pattern: tuple[str, ...] = ()
    #: True for rules that merge operators (counted as merge sites by ``gspo rules``).
    merges: bool = False
    #: True for rules the greedy variants apply wherever they match (they never undo each
    #: other); False for the ones only the search explores (splits and moves).
    greedy: bool = True

    @property
    def name(self) -> str:
        """The rule's name: its class name."""
        return type(self).__name__

    def positions(self) -> tuple[frozenset[str], ...]:
        """For each position of the source pattern, the op types that can stand there."""
        return tuple(position_ops(p) for p in self.pattern)

    @cached_property
    def root_ops(self) -> frozenset[str] | None:
        """The op types a site is anchored on (``None``: any op)."""
        return position_ops(self.pattern[0]) if self.pattern else None

    def may_match(self, graph: Graph) -> bool:
        """Whether ``graph`` has a node of the rule's root op (through the graph's index by op)."""
        roots = self.root_ops
        return roots is None or any(op in graph.nodes_by_op for op in roots)

    @property
    def description(self) -> str:
        """The first line of the rule's docstring: the rewrite it makes."""
        doc = (type(self).__doc__ or "").strip().splitlines()
        return doc[0].replace("``", "") if doc else ""

    def sites(self, graph: Graph) -> Iterable[tuple[Node, ...]]:
        """Candidate sites, anchors first, in graph order (deterministic): each root-op node."""
        return ((n,) for n in nodes_of(graph, *sorted(self.root_ops or ())))

    def bind(self, graph: Graph, site: Sequence[Node]) -> Sequence[Node] | Fail:
        """``site`` with the pattern's named nodes bound, or why they cannot be (a pattern that
        is a plain tuple of op types binds nothing: the site as it is)."""
        binder = getattr(self.pattern, "bind", None)
        return tuple(site) if binder is None else binder(graph, site)

    def check(self, graph: Graph, site: Sequence[Node]) -> Match:
        """The match at the bound ``site``, or a :class:`Mismatch` saying why it does not apply."""
        raise NotImplementedError

    def apply(self, graph: Graph, match: Match) -> Graph:
        """The graph with ``match`` rewritten."""
        raise NotImplementedError

    def match(self, graph: Graph, explain: bool = False) -> Iterator[Match | Fail]:
        """Matches in graph order; with ``explain`` also the failures, with their reasons."""
        for site in self.sites(graph):
            untouchable = site_guard(graph, site)
            if untouchable is not None:
                if explain:
                    yield untouchable
                continue
            result = self.match_site(graph, site)
            if isinstance(result, Match):
                result = qdq_guard(graph, result.nodes) or result
            if isinstance(result, Match):
                yield dataclasses.replace(result, site=tuple(site))
            elif explain:
                yield result

    def match_site(self, graph: Graph, site: Sequence[Node]) -> Match | Fail:
        """The match at ``site`` (its pattern bound, then checked), or why there is none; without
        the guards :meth:`match` puts first (what a greedy pass re-examines a site with)."""
        bound = self.bind(graph, site)
        if isinstance(bound, Fail):
            return bound
        try:
            return self.check(graph, bound)
        except Mismatch as e:
            return e.fail

    def _match(self, nodes: Sequence[Node], **params: Any) -> Match:
        return Match(self.name, tuple(nodes), tuple(sorted(params.items())))

    def __repr__(self) -> str:
        return self.name


# --------------------------------------------------------------------- helpers
#: The ops that mark a quantized (QDQ) group: ``DQ -> op -> Q`` is what onnxruntime and
#: OpenVINO fuse into one integer kernel.
QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"})


def qdq_guard(graph: Graph, nodes: Sequence[Node]) -> Fail | None:
    """Why rewriting ``nodes`` could break a QDQ group, or ``None``: a rule may not rewrite a
    QuantizeLinear or DequantizeLinear, an op that reads a DequantizeLinear's output or an op
    whose output a QuantizeLinear reads (no rule rewrites a whole group exactly yet)."""
    names = tuple(n.name or n.op_type for n in nodes)
    for n in nodes:
        if n.op_type in QDQ_OPS:
            return Fail(f"{n.op_type} belongs to a QDQ group", names)
        for name in n.inputs:
            made = graph.producers.get(name) if name else None
            if made is not None and made[0].op_type == "DequantizeLinear":
                return Fail(f"{n.op_type} reads a DequantizeLinear (a QDQ group)", names)
        for v in n.outputs:
            if any(c.op_type == "QuantizeLinear" for c in graph.consumers.get(v.name, ())):
                return Fail(f"{n.op_type} feeds a QuantizeLinear (a QDQ group)", names)
    return None


def site_guard(graph: Graph, site: Sequence[Node]) -> Fail | None:
    """Why no rule may rewrite ``site``, or ``None``: a node gspo keeps opaque (a custom-domain
    op, a subgraph), or a value the site reads or writes that is not a tensor of known element
    type and static shape (a sequence or map, or the output of an op whose shapes neither onnx
    nor onnxruntime could infer): a rewrite must know what it computes."""
    names = tuple(n.name or n.op_type for n in site)
    if any(n.is_opaque for n in site):
        return Fail("opaque node", names)
    for n in site:
        for name in (*n.inputs, *n.output_names):
            v = graph.values.get(name) if name else None
            if name and (v is None or not v.is_tensor or not v.is_static):
                return Fail(f"{name!r} is not a tensor of known type and shape", names)
    return None


def nodes_of(graph: Graph, *op_types: str) -> Iterator[Node]:
    """The interpreted standard-domain nodes of the given op types, in graph order (through the
    graph's index by op type: a rule anchored on Conv looks at Convs only)."""
    index = graph.nodes_by_op
    if len(op_types) == 1:
        picked = index.get(op_types[0], ())
    else:
        picked = sorted((n for op in dict.fromkeys(op_types) for n in index.get(op, ())), key=graph.position.__getitem__)
    return (n for n in picked if not n.is_opaque and n.domain in ("", "ai.onnx"))


def producer(graph: Graph, value: str, ops: tuple[str, ...] | None = None) -> Node | Fail:
    """The interpreted node that produces ``value`` (of one of ``ops``, when given)."""
    prod = graph.producers.get(value)
    if prod is None or prod[0].is_opaque or (ops is not None and prod[0].op_type not in ops):
        return Fail(f"not fed by {'/'.join(ops)}" if ops else "not produced by an interpreted node")
    return prod[0]


def is_output(graph: Graph, value: str) -> bool:
    """Whether ``value`` is one of the graph's outputs."""
    return value in graph.output_names()


def single_consumer(graph: Graph, value: str) -> Node | Fail:
    """The only node reading ``value``, which must not be a graph output."""
    users = graph.consumers.get(value, ())
    if is_output(graph, value):
        return Fail(f"{value!r} is a graph output")
    if len(users) != 1:
        return Fail(f"{value!r} has {len(users)} consumers")
    return users[0]


def can_rewire(graph: Graph, value: str, ignore: Iterable[Node] = ()) -> Fail | None:
    """Why the readers of ``value`` cannot be pointed at another value, or ``None``."""
    if is_output(graph, value):
        return Fail(f"{value!r} is a graph output")
    skip = {n.key for n in ignore}
    for n in graph.consumers.get(value, ()):
        if n.key not in skip and (n.is_opaque or value in n.implicit_inputs):
            return Fail(f"{value!r} is read by an opaque node")
    return None


def constant(graph: Graph, name: str) -> Weight | Fail:
    """The weight behind input ``name``, or why it is not a constant initializer."""
    if not name:
        return Fail("input missing")
    w = graph.weights.get(name)
    if w is None:
        return Fail(f"{name!r} is not a constant initializer")
    return w


def array(graph: Graph, w: Weight) -> np.ndarray:
    """The values of weight ``w`` (materialized from the graph's store)."""
    return w.evaluate(graph.store)


def is_static(graph: Graph, *names: str) -> bool:
    """Whether every value in ``names`` exists with a known shape."""
    return all((v := graph.values.get(n)) is not None and v.is_static for n in names)


def static_values(graph: Graph, *names: str) -> tuple[Value, ...]:
    """The values ``names``, or a Mismatch ("unknown shapes") unless each has a known shape."""
    require(is_static(graph, *names), "unknown shapes")
    return tuple(graph.values[n] for n in names)


def broadcasts_within(out_shape, shape, what: str = "the constant") -> None:
    """A Mismatch unless a tensor of ``shape`` broadcasts into ``out_shape`` without growing it."""
    try:
        grows = broadcast_shapes(out_shape, shape) != tuple(out_shape)
    except ValueError:
        raise Mismatch("shapes do not broadcast") from None
    require(not grows, f"{what} broadcasts the output to a larger shape")


def axis_of(graph: Graph, node: Node, value: str) -> int:
    """``node``'s ``axis`` attribute made non-negative for the rank of ``value``."""
    rank = len(graph.values[value].shape)
    ax = node.attr("axis", 0)
    return ax + rank if ax < 0 else ax


def attrs_with(node: Node, **changes: Any) -> tuple[Attr, ...]:
    """``node``'s attributes with ``changes`` (``None`` deletes), keeping their order."""
    out = []
    seen = set()
    for a in node.attrs:
        if a.name in changes:
            seen.add(a.name)
            if changes[a.name] is not None:
                out.append(make_attr(a.name, changes[a.name]))
        else:
            out.append(a)
    out += [make_attr(k, v) for k, v in changes.items() if k not in seen and v is not None]
    return tuple(out)


@dataclass(frozen=True)
class ConvParams:
    """A Conv's attributes made explicit: kernel, strides, dilations, pads, group and channels."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]
    group: int
    cout: int
    cin: int


def conv_params(graph: Graph, node: Node) -> ConvParams | Fail:
    """Normalized Conv attributes (explicit pads); the weight must be a constant of known shape."""
    x = graph.values.get(node.inputs[0])
    w = graph.values.get(node.inputs[1])
    if x is None or w is None or not x.is_static or not w.is_static:
        return Fail("unknown shapes")
    n = len(w.shape) - 2
    attrs = {a.name: a.value for a in node.attrs}
    kernel = tuple(attrs.get("kernel_shape", w.shape[2:]))
    strides = tuple(attrs.get("strides", (1,) * n))
    dil = tuple(attrs.get("dilations", (1,) * n))
    pads = tuple(resolve_pads(attrs, x.shape[2:], kernel, strides, dil))
    return ConvParams(kernel, strides, dil, pads, attrs.get("group", 1), w.shape[0], w.shape[1])


#: What two Convs' parameters must share to merge, and the reason when they differ.
CONV_FIELDS = {"kernel": "kernel sizes differ", "strides": "strides differ", "dilations": "dilations differ",
               "pads": "pads differ"}


def conv_mismatch(p: ConvParams, q: ConvParams, same: Sequence[str] = tuple(CONV_FIELDS)) -> str | None:
    """Why two Convs cannot be combined into one (merged side by side, summed, or one enlarged to
    the other's kernel), or ``None``: either is grouped, or they differ in one of the ``same``
    parameters (kernel, strides, dilations, pads: the first that differs names the reason)."""
    if p.group != 1 or q.group != 1:
        return "group is not 1"
    return next((CONV_FIELDS[f] for f in same if getattr(p, f) != getattr(q, f)), None)


def constant_params(graph: Graph, node: Node, first: int = 1, last: int | None = None) -> None:
    """A Mismatch unless every input of ``node`` from position ``first`` (up to, not including,
    ``last``) is a constant initializer (skipped optional inputs aside): its weights and bias."""
    for name in node.inputs[first:last]:
        if name:
            need(constant(graph, name))


def plain_conv(graph: Graph, node: Node) -> ConvParams:
    """The parameters of an ungrouped Conv with constant weights (and bias), or a Mismatch."""
    p = need(conv_params(graph, node))
    require(p.group == 1, "group is not 1")
    constant_params(graph, node)
    return p


def split_sizes(graph: Graph, node: Node) -> list[int]:
    """The piece sizes of a Split node, or a Mismatch when its outputs' shapes are unknown."""
    outs = [graph.values.get(v.name) for v in node.outputs]
    require(all(v is not None and v.is_static for v in outs), "unknown shapes")
    ax = node.attr("axis", 0)
    return [v.shape[ax] for v in outs]
