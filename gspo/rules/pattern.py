"""Rule patterns: the named nodes of a rule's source pattern, and how :meth:`Rule.match` binds them.

A :class:`Pattern` lists *steps*, each binding one name at a site (in the spirit of a term
rewriter's pattern with named sub-patterns, e.g. onnxscript's or tinygrad's):

- :class:`Root` binds the site's anchor, :class:`SiteNode` another node of a site that a rule's
  ``sites`` yields (a sibling), :class:`Group` the whole site (the readers of one tensor);
- :class:`Input` binds the producer of one input of a bound node, by input position (or the
  first of several positions where one binds), :class:`Inputs` the producers of every input;
- :class:`Reader` binds the only reader of one output of a bound node, :class:`Readers` the only
  reader of each output.

Binding runs the steps in order; the first one that cannot bind ends it with a :class:`Fail`
saying why. The rule's ``check`` then holds the conditions on the bound nodes (a :class:`Bound`)
and returns the match its ``apply`` builds the rewrite from.

A pattern is also the tuple of its positions' op types, the root first: what ``gspo rules
--list`` prints and what the partition weighs (``Rule.positions``). A step stands for ``weight``
positions: a :class:`Group` of mergeable siblings for two, a node the published pattern leaves
out for none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gspo.ir import Graph, Node
from gspo.rules.base import Fail, position_ops, producer, single_consumer

__all__ = ["Pattern", "Bound", "Root", "SiteNode", "Group", "Input", "Inputs", "Reader", "Readers", "EITHER"]

#: The input positions of a binary op's two operands, the first tried first.
EITHER = (0, 1)

#: Where an :class:`Input` is: one position, several tried in order, or a function of the graph and
#: the reading node giving the position (or a Fail saying why there is none).
At = int | tuple[int, ...] | Callable[[Graph, Node], int | Fail]


class Bound(tuple):
    """A site with the pattern's names bound: ``bound[0]`` is the site's anchor (a bound site is
    still its site), ``bound["lin"]`` a named node (or tuple of nodes), ``bound.at("lin")`` the
    input position an :class:`Input` was bound at."""

    def __new__(cls, site: Sequence[Node]) -> Bound:
        """``site``, with nothing bound yet."""
        self = super().__new__(cls, tuple(site))
        self._names: dict[str, Any] = {}
        self._at: dict[str, int] = {}
        return self

    def __getitem__(self, key):
        if isinstance(key, str):
            return self._names[key]
        return super().__getitem__(key)

    def at(self, name: str) -> int:
        """The input position of its reader the producer ``name`` was bound at."""
        return self._at[name]

    def one(self, name: str) -> Node:
        """The node bound to ``name`` (of a tuple of nodes, the first)."""
        got = self._names[name]
        return got[0] if isinstance(got, tuple) else got

    def _bind(self, name: str, value: Any, at: int | None) -> None:
        self._names[name] = value
        if at is not None:
            self._at[name] = at


class _Step:
    """What every step has: the ``name`` it binds, the op types ``op`` that can stand there (an op
    type or an OpSet; ``None``: any op) and how many positions of the pattern it stands for."""

    name: str
    op: str | None
    weight: int

    def fits(self, node: Node) -> bool:
        """Whether ``node`` can stand at this step: interpreted, and of one of its op types."""
        return not node.is_opaque and (self.op is None or node.op_type in position_ops(self.op))

    def _ops(self) -> tuple[str, ...] | None:
        return None if self.op is None else tuple(sorted(position_ops(self.op)))

    def bind(self, graph: Graph, site: Sequence[Node], bound: Bound) -> tuple[Any, int | None] | Fail:
        """What this step binds at ``site`` (and the input position, for an :class:`Input`)."""
        raise NotImplementedError


@dataclass(frozen=True)
class Root(_Step):
    """The site's anchor (the node of the rule's root op that ``Rule.sites`` yields)."""

    name: str
    op: str | None
    weight: int = 1

    def bind(self, graph, site, bound):
        return site[0], None


@dataclass(frozen=True)
class SiteNode(_Step):
    """Node ``index`` of a site of several nodes (as the rule's ``sites`` yields them)."""

    name: str
    op: str | None
    index: int
    weight: int = 1

    def bind(self, graph, site, bound):
        return site[self.index], None


@dataclass(frozen=True)
class Group(_Step):
    """The whole site, a tuple of nodes (e.g. the Convs reading one tensor)."""

    name: str
    op: str | None
    weight: int = 2

    def bind(self, graph, site, bound):
        return tuple(site), None


@dataclass(frozen=True)
class Input(_Step):
    """The node producing input ``at`` of the node bound to ``of``.

    ``at`` is a position, several tried in order (the first whose producer fits binds), or a
    function of the graph and the reading node. ``where`` is a further condition on a candidate
    producer (one that fails it does not bind). ``sole``: the value must be read by that reader
    only (and not be a graph output). ``reason`` replaces the reason a producer does not bind.
    """

    name: str
    op: str | None
    of: str
    at: At = 0
    sole: bool = False
    where: Callable[[Graph, Node], bool] | None = None
    reason: str | None = None
    weight: int = 1

    def _positions(self, graph: Graph, reader: Node) -> tuple[int, ...] | Fail:
        at = self.at(graph, reader) if callable(self.at) else self.at
        return (at,) if isinstance(at, int) else at

    def bind(self, graph, site, bound):
        reader = bound.one(self.of)
        positions = self._positions(graph, reader)
        if isinstance(positions, Fail):
            return positions
        fails = []
        for i in positions:
            value = reader.inputs[i] if i < len(reader.inputs) else ""
            found = producer(graph, value, self._ops()) if value else Fail("input missing")
            if isinstance(found, Node) and self.where is not None and not self.where(graph, found):
                found = Fail(f"not fed by the {self.op} of the pattern")
            if isinstance(found, Node):
                break
            fails.append(found)
        else:  # the first position's reason
            return Fail(self.reason) if self.reason else (fails[0] if fails else Fail("input missing"))
        if self.sole:
            only = single_consumer(graph, value)
            if isinstance(only, Fail):
                return only
        return found, i


@dataclass(frozen=True)
class Inputs(_Step):
    """The nodes producing each input of the node bound to ``of``, a tuple (``sole`` and
    ``reason`` as for :class:`Input`, checked input by input)."""

    name: str
    op: str | None
    of: str
    sole: bool = False
    reason: str | None = None
    weight: int = 1

    def bind(self, graph, site, bound):
        nodes = []
        for value in bound.one(self.of).inputs:
            found = producer(graph, value, self._ops())
            if isinstance(found, Fail):
                return Fail(self.reason) if self.reason else found
            if self.sole:
                only = single_consumer(graph, value)
                if isinstance(only, Fail):
                    return only
            nodes.append(found)
        return tuple(nodes), None


def _reader(step: Reader | Readers, graph: Graph, value: str) -> Node | Fail:
    """The only reader of ``value`` (not a graph output), which must fit ``step``."""
    only = single_consumer(graph, value)
    if isinstance(only, Node) and not step.fits(only):
        return Fail(step.reason or f"{value!r} is not read by {step.op}")
    return only


@dataclass(frozen=True)
class Reader(_Step):
    """The only reader of output ``output`` of the node bound to ``of`` (which must not be a
    graph output); ``reason`` says why when that reader does not fit."""

    name: str
    op: str | None
    of: str
    output: int = 0
    reason: str | None = None
    weight: int = 1

    def bind(self, graph, site, bound):
        found = _reader(self, graph, bound.one(self.of).outputs[self.output].name)
        return found if isinstance(found, Fail) else (found, None)


@dataclass(frozen=True)
class Readers(_Step):
    """The only reader of each output of the node bound to ``of``, a tuple (as :class:`Reader`)."""

    name: str
    op: str | None
    of: str
    reason: str | None = None
    weight: int = 1

    def bind(self, graph, site, bound):
        nodes = []
        for v in bound.one(self.of).outputs:
            found = _reader(self, graph, v.name)
            if isinstance(found, Fail):
                return found
            nodes.append(found)
        return tuple(nodes), None


class Pattern(tuple):
    """A rule's source pattern: the tuple of its positions' op types (the root first), made of
    the steps that bind its named nodes at a site (see the module's docstring)."""

    steps: tuple[_Step, ...]

    def __new__(cls, *steps: _Step) -> Pattern:
        """The pattern of ``steps``, in binding order (the root first)."""
        names = [s.name for s in steps]
        if len(set(names)) != len(names):
            raise ValueError(f"a pattern binds each name once: {names}")
        self = super().__new__(cls, tuple(s.op for s in steps if s.op is not None for _ in range(s.weight)))
        self.steps = steps
        return self

    def __reduce__(self):
        return (Pattern, self.steps)

    def bind(self, graph: Graph, site: Sequence[Node]) -> Bound | Fail:
        """``site`` with every step's name bound, or the Fail of the first step that cannot bind."""
        bound = Bound(site)
        for step in self.steps:
            got = step.bind(graph, site, bound)
            if isinstance(got, Fail):
                return got
            bound._bind(step.name, *got)
        return bound
