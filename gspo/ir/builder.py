"""Build graphs in code (the model zoo and the tests use this; no protobufs involved).

Example:
    >>> b = GraphBuilder("tiny")
    >>> x = b.input("x", (1, 8))
    >>> y = b.op("Relu", [b.op("MatMul", [x, b.weight("w", (8, 4))])])
    >>> g = b.output(y).build()
    >>> [n.op_type for n in g.nodes], g.outputs[0].shape
    (['MatMul', 'Relu'], (1, 4))
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import numpy as np
from onnx import AttributeProto, TensorProto

from gspo.ir.digests import digest
from gspo.ir.graph import Attr, Graph, Node, Value
from gspo.ir.shapes import infer_shapes
from gspo.ir.weights import Literal, Random, Weight, WeightStore

__all__ = ["GraphBuilder", "make_attr"]


def make_attr(name: str, value: object) -> Attr:
    """An :class:`Attr` from a Python value (int, float, str, bytes, or a list of ints/floats)."""
    if isinstance(value, bool | int | np.integer):
        return Attr(name, AttributeProto.INT, int(value))
    if isinstance(value, float | np.floating):
        return Attr(name, AttributeProto.FLOAT, float(np.float32(value)))
    if isinstance(value, str):
        return Attr(name, AttributeProto.STRING, value.encode())
    if isinstance(value, bytes):
        return Attr(name, AttributeProto.STRING, value)
    if isinstance(value, list | tuple):
        if all(isinstance(v, int | np.integer) for v in value):
            return Attr(name, AttributeProto.INTS, tuple(int(v) for v in value))
        return Attr(name, AttributeProto.FLOATS, tuple(float(np.float32(v)) for v in value))
    raise TypeError(f"unsupported attribute {name}={value!r}")


class GraphBuilder:
    """Accumulates nodes with inferred shapes and builds an immutable :class:`Graph`.

    Args:
        name: graph name.
        opset: default-domain opset version.
        seed: base seed of :meth:`weight`; each weight's seed also depends on its name, so
            weights do not change when unrelated ones are added.
    """

    def __init__(self, name: str = "graph", opset: int = 17, seed: int = 0):
        self.name = name
        self.opset = opset
        self.seed = seed
        self._inputs: list[Value] = []
        self._outputs: list[str] = []
        self._nodes: list[Node] = []
        self._weights: dict[str, Weight] = {}
        self._values: dict[str, Value] = {}
        self._counts: dict[str, int] = {}
        self._scope: list[str] = []

    # ---------------------------------------------------------------- naming
    @contextlib.contextmanager
    def scope(self, name: str) -> Iterator[None]:
        """Prefix names created inside with ``name/``."""
        self._scope.append(name)
        try:
            yield
        finally:
            self._scope.pop()

    def _name(self, hint: str) -> str:
        base = "/".join(self._scope + [hint])
        n = self._counts.get(base, 0)
        self._counts[base] = n + 1
        return base if n == 0 else f"{base}_{n}"

    # ---------------------------------------------------------------- values
    def input(self, name: str, shape: Sequence[int], dtype: int = TensorProto.FLOAT) -> str:
        """Declare a graph input; returns its name."""
        v = Value(name, dtype, tuple(shape))
        self._inputs.append(v)
        self._values[name] = v
        return name

    def add_weight(self, hint: str, weight: Weight) -> str:
        """Add ``weight`` as an initializer under a fresh name built from ``hint``; returns the name."""
        name = self._name(hint)
        self._weights[name] = weight
        self._values[name] = Value(name, weight.dtype, weight.shape)
        return name

    def weight(
        self,
        hint: str,
        shape: Sequence[int],
        scale: float | None = None,
        loc: float = 0.0,
        dist: str = "normal",
        dtype: int = TensorProto.FLOAT,
    ) -> str:
        """A random weight; ``scale`` defaults to He initialization ``sqrt(2 / fan_in)``."""
        shape = tuple(int(d) for d in shape)
        if scale is None:
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else (shape[0] if shape else 1)
            scale = float(np.sqrt(2.0 / max(fan_in, 1)))
        name = self._name(hint)
        seed = int.from_bytes(digest(self.seed, name)[:8], "little")
        w = Random(seed, dtype, shape, loc, scale, dist)
        self._weights[name] = w
        self._values[name] = Value(name, dtype, shape)
        return name

    def const(self, hint: str, array: np.ndarray | Sequence) -> str:
        """A constant weight with the given contents (shapes, axes, small tables)."""
        return self.add_weight(hint, Literal.from_array(np.asarray(array)))

    def _const_value(self, name: str) -> np.ndarray | None:
        w = self._weights.get(name)
        return w.evaluate(WeightStore()) if isinstance(w, Literal) else None

    def shape(self, name: str) -> tuple[int, ...]:
        """The shape of the value ``name``."""
        return self._values[name].shape

    # ----------------------------------------------------------------- nodes
    def op(
        self,
        op_type: str,
        inputs: Sequence[str],
        n_outputs: int = 1,
        name: str | None = None,
        out: str | None = None,
        **attrs: object,
    ) -> str | list[str]:
        """Add a node; returns its output name (a list when ``n_outputs > 1``).

        ``out`` names the (single) output value explicitly, e.g. a graph output ``"logits"``.
        """
        node_name = self._name(name or op_type.lower())
        in_values = [self._values[i] if i else None for i in inputs]
        attr_objs = tuple(make_attr(k, v) for k, v in sorted(attrs.items()))
        plain = {a.name: a.value for a in attr_objs}
        types = infer_shapes(op_type, plain, in_values, n_outputs, self._const_value)
        outs = []
        for i, (dtype, shape) in enumerate(types):
            out_name = (out or node_name) if n_outputs == 1 else f"{node_name}:{i}"
            v = Value(out_name, dtype, tuple(int(d) for d in shape))
            self._values[out_name] = v
            outs.append(v)
        self._nodes.append(Node(op_type, tuple(inputs), tuple(outs), attr_objs, name=node_name))
        names = [v.name for v in outs]
        return names[0] if n_outputs == 1 else names

    def output(self, *names: str) -> GraphBuilder:
        """Mark values as graph outputs, in order; returns the builder."""
        self._outputs.extend(names)
        return self

    def build(self) -> Graph:
        """The graph built so far."""
        return Graph(
            inputs=tuple(self._inputs),
            outputs=tuple(self._values[n] for n in self._outputs),
            nodes=tuple(self._nodes),
            weights=self._weights,
            opsets=(("", self.opset),),
            name=self.name,
        ).check()
