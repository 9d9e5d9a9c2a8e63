"""Building a rewrite: the :class:`Edit` that accumulates it, and the edits several rules make.

New values get names derived from their content (:func:`~gspo.ir.graph.fresh_name`), and a node
identical to one already in the graph is not added twice, so two rewrite paths that reach the
same graph reach the same key.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from gspo.ir import Attr, Graph, Literal, Node, Value, Weight, fresh_name, infer_shapes
from gspo.ir.builder import make_attr
from gspo.rules.base import Fail, can_rewire, is_output

__all__ = ["Edit", "int64s", "split_node", "Bypass", "bypass", "bypass_check"]

#: Constants up to this many elements are read during shape inference of added nodes.
_CONST_LIMIT = 1 << 16


class Edit:
    """Accumulates a rewrite of ``graph``: nodes to drop, nodes and weights to add."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self._remove: dict[bytes, Node] = {}
        self._add: list[Node] = []
        self._weights: dict[str, Weight] = {}
        self._values: dict[str, Value] = {}

    @cached_property
    def _signatures(self) -> dict[tuple, Node]:
        return {(n.op_type, n.domain, n.inputs, n.attrs): n for n in self.graph.nodes if not n.is_opaque}

    def _names_taken(self) -> set[str]:
        kept = {v.name for n in self.graph.nodes if n.key not in self._remove for v in n.outputs}
        return kept | {v.name for n in self._add for v in n.outputs} | {v.name for v in self.graph.inputs}

    def _labels_taken(self) -> set[str]:
        kept = {n.name for n in self.graph.nodes if n.key not in self._remove}
        return kept | {n.name for n in self._add}

    def drop(self, *nodes: Node) -> Edit:
        """Mark ``nodes`` for removal; returns the edit."""
        for n in nodes:
            self._remove[n.key] = n
        return self

    def value(self, name: str) -> Value:
        """The value called ``name``: one this edit added, or the graph's."""
        return self._values.get(name) or self.graph.values[name]

    @cached_property
    def _weight_names(self) -> dict[bytes, str]:
        names = dict(self.graph.retired_weights)
        names.update((w.key, name) for name, w in reversed(list(self.graph.weights.items())))
        return names

    def weight(self, hint: str, w: Weight) -> str:
        """A name for weight ``w``: an existing (or retired) weight's if it is the same expression."""
        if w.key in self._weight_names:
            name = self._weight_names[w.key]
            self._weights[name] = w
            self._values[name] = Value(name, w.dtype, w.shape)
            return name
        name = fresh_name(hint, w.key)
        self._weights[name] = w
        self._values[name] = Value(name, w.dtype, w.shape)
        return name

    def _const(self, name: str) -> np.ndarray | None:
        w = self._weights.get(name) or self.graph.weights.get(name)
        if w is None or w.size > _CONST_LIMIT:
            return None
        return w.evaluate(self.graph.store)

    def node(
        self,
        op_type: str,
        inputs: Sequence[str],
        attrs: Sequence[Attr] = (),
        outputs: Sequence[str] | None = None,
        n_outputs: int = 1,
        like: Node | None = None,
    ) -> list[str]:
        """Add ``op_type(inputs)``; returns its output names.

        ``outputs`` gives names to reuse (e.g. the names the replaced nodes produced, so that
        their readers stay untouched); otherwise names derive from the node's content. A node
        identical to one in the graph (same op, inputs and attributes) is reused, not added.
        ``like`` lends its node name and stream.
        """
        inputs, attrs = tuple(inputs), tuple(attrs)
        if outputs is None:
            existing = self._signatures.get((op_type, "", inputs, attrs))
            if existing is not None and existing.key not in self._remove:
                return list(existing.output_names)
            for n in self._add:
                if (n.op_type, n.inputs, n.attrs) == (op_type, inputs, attrs):
                    return list(n.output_names)
        n_out = len(outputs) if outputs is not None else n_outputs
        plain = {a.name: a.value for a in attrs}
        ins = [self.value(i) if i else None for i in inputs]
        types = infer_shapes(op_type, plain, ins, n_out, self._const)
        if outputs is not None:
            names = list(outputs)
        else:
            names = []
            for i in range(n_out):
                name = fresh_name(op_type.lower(), op_type, inputs, tuple((a.name, a.value) for a in attrs), i)
                while name in self._names_taken():  # a different node already makes this value
                    name = fresh_name(op_type.lower(), name)
                names.append(name)
        values = tuple(Value(nm, dt, tuple(sh)) for nm, (dt, sh) in zip(names, types))
        for v in values:
            self._values[v.name] = v
        label = like.name if like is not None and like.name else names[0]
        if label in self._labels_taken():
            label = names[0]
        stream = like.stream if like is not None else None
        self._add.append(Node(op_type, inputs, values, attrs, name=label, stream=stream))
        return names

    def rewire(self, old: str, new: str) -> Edit:
        """Point every reader of ``old`` (except dropped nodes) at ``new``."""
        return self.rewire_all({old: new})

    def rewire_all(self, mapping: dict[str, str]) -> Edit:
        """Point every reader of each ``old`` value at ``mapping[old]``, all at once (a node that
        reads several of them is replaced once, with every input renamed)."""
        readers: dict[bytes, Node] = {}
        for old in mapping:
            for n in self.graph.consumers.get(old, ()):
                if n.key not in self._remove:
                    readers.setdefault(n.key, n)
        for n in readers.values():
            self.drop(n)
            self._add.append(n.replace(inputs=tuple(mapping.get(i, i) for i in n.inputs)))
        return self

    def commit(self) -> Graph:
        """The graph with the edit's nodes removed and added, and its new weights."""
        return self.graph.replace_nodes(self._remove.values(), self._add, self._weights)


def int64s(values: Iterable[int]) -> np.ndarray:
    """``values`` as a 1-D int64 array (shape, pads and axes constants)."""
    return np.asarray(list(values), dtype=np.int64)


def split_node(edit: Edit, x: str, axis: int, sizes: Sequence[int], outputs: Sequence[str], like: Node | None) -> None:
    """``Split(x)`` into ``outputs`` of ``sizes`` along ``axis`` (attribute or input by opset)."""
    if edit.graph.opset >= 13:
        sizes_name = edit.weight("split", Literal.from_array(int64s(sizes)))
        edit.node("Split", [x, sizes_name], [make_attr("axis", axis)], outputs=outputs, like=like)
    else:
        edit.node("Split", [x], [make_attr("axis", axis), make_attr("split", list(sizes))], outputs=outputs, like=like)


@dataclass(frozen=True)
class Bypass:
    """How the readers of ``old`` come to read ``new`` once ``dropping`` is dropped (what
    :func:`bypass_check` finds and :func:`bypass` does)."""

    old: str
    new: str
    dropping: tuple[Node, ...]
    #: ``new``'s producer, the index of its output ``new`` and ``old``'s value, when that output
    #: is renamed to ``old`` (only dropped nodes read ``new``); ``None``: the readers of ``old``
    #: are pointed at ``new``.
    rename: tuple[Node, int, Value] | None = None


def bypass_check(graph: Graph, old: str, new: str, dropping: Iterable[Node]) -> Bypass | Fail:
    """How :func:`bypass` makes the readers of ``old`` read ``new``, or why they cannot: rename
    ``new``'s producer's output to ``old`` when only dropped nodes read ``new`` (readers of
    ``old`` stay untouched, graph outputs keep their names), else point the readers at ``new``."""
    dropping = tuple(dropping)
    if _renamable(graph, new, dropping):
        producer, index = graph.producers[new]
        return Bypass(old, new, dropping, (producer, index, graph.values[old]))
    fail = can_rewire(graph, old, dropping)
    return fail if fail is not None else Bypass(old, new, dropping)


def _renamable(graph: Graph, new: str, dropping: Iterable[Node]) -> bool:
    prod = graph.producers.get(new)
    if prod is None or prod[0].is_opaque or is_output(graph, new):
        return False
    dropped = {n.key for n in dropping}
    return all(n.key in dropped for n in graph.consumers.get(new, ()))


def bypass(edit: Edit, plan: Bypass) -> None:
    """Make ``plan.old``'s readers read ``plan.new`` (as :func:`bypass_check` found they can)."""
    edit.drop(*plan.dropping)
    if plan.rename is not None:
        producer, index, value = plan.rename
        outs = list(producer.outputs)
        outs[index] = value
        edit.drop(producer)
        edit._add.append(producer.replace(outputs=tuple(outs)))
    else:
        edit.rewire(plan.old, plan.new)
