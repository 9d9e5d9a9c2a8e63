"""Canonical forms: an exported subgraph rewritten, exactly, into the form onnxruntime fuses.

onnxruntime fuses activation subgraphs only in the operand order it knows. torch's dynamo
exporter writes the erf GELU as ``x * ((1 + erf(x / sqrt 2)) * 0.5)``, which onnxruntime leaves as
five elementwise ops; ``(x * (1 + erf(x / sqrt 2))) * 0.5`` becomes one ``Gelu`` kernel. Scaling by
0.5 is exact in binary floating point (barring subnormals), so the two orders give the same bits.
"""

from __future__ import annotations

import numpy as np

from gspo.ir import Graph, Node
from gspo.rules.base import Mismatch, Rule, array, need, producer, require, single_consumer
from gspo.rules.edit import Edit

__all__ = ["CanonicalGelu", "RULES"]


def _scalar(graph: Graph, name: str, value: float, tol: float = 1e-6) -> bool:
    """Whether ``name`` is a one-element constant equal to ``value`` (within ``tol``)."""
    w = graph.weights.get(name) if name else None
    if w is None or w.size != 1:
        return False
    return abs(float(array(graph, w).reshape(-1)[0]) - value) <= tol * max(1.0, abs(value))


def _other(node: Node, name: str) -> str:
    return node.inputs[1] if node.inputs[0] == name else node.inputs[0]


def _half_of(graph: Graph, name: str) -> tuple[Node, str]:
    """``name`` = ``Mul(a, 0.5)``: that Mul and ``a``, or a Mismatch."""
    half = need(producer(graph, name, ("Mul",)))
    for i in (0, 1):
        if _scalar(graph, half.inputs[i], 0.5):
            return half, half.inputs[1 - i]
    raise Mismatch("not a multiplication by 0.5")


def _halved_operand(graph: Graph, outer: Node) -> tuple[str, str, Node, str]:
    """For ``outer`` = ``x * h`` with ``h = a * 0.5`` (either operand order): x, h, that Mul and a."""
    for i in (0, 1):
        x, h = outer.inputs[i], outer.inputs[1 - i]
        try:
            half, a = _half_of(graph, h)
        except Mismatch:
            continue
        return x, h, half, a
    raise Mismatch("not x * (g * 0.5)")


def _require_erf_term(graph: Graph, a: str, x: str) -> None:
    """A Mismatch unless ``a`` is ``1 + erf(x / sqrt 2)`` (or ``erf(x * 1/sqrt 2)``)."""
    add = need(producer(graph, a, ("Add",)))
    erf_in = next((add.inputs[i] for i in (0, 1) if _scalar(graph, add.inputs[1 - i], 1.0)), None)
    require(bool(erf_in), "not 1 + erf(...)")
    erf = need(producer(graph, erf_in, ("Erf",)))
    scale = producer(graph, erf.inputs[0], ("Div", "Mul"))
    need(scale, "erf does not read the scaled input")
    require(scale.inputs[0] == x, "erf does not read the scaled input")
    root2 = float(np.sqrt(2.0))
    expected = root2 if scale.op_type == "Div" else 1 / root2
    require(_scalar(graph, scale.inputs[1], expected, 1e-5), "erf's argument is not x / sqrt(2)")


class CanonicalGelu(Rule):
    """``x * ((1 + erf(x/sqrt2)) * 0.5)`` -> ``(x * (1 + erf(x/sqrt2))) * 0.5`` (the GELU form onnxruntime fuses)."""

    pattern = ("Mul", "Mul", "Add", "Erf")

    def check(self, graph, site):
        outer = site[0]
        x, h, half, a = _halved_operand(graph, outer)
        _require_erf_term(graph, a, x)
        need(single_consumer(graph, h))
        return self._match([outer, half], x=x, a=a, half_const=_other(half, a))

    def apply(self, graph, match):
        outer, half = match.nodes
        e = Edit(graph).drop(outer, half)
        (prod,) = e.node("Mul", [match["x"], match["a"]], like=half)
        e.node("Mul", [prod, match["half_const"]], outputs=[outer.outputs[0].name], like=outer)
        return e.commit()


RULES = [CanonicalGelu()]
