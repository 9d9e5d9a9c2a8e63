"""Canonical forms: an exported subgraph rewritten, exactly, into the form onnxruntime fuses.

onnxruntime fuses activation subgraphs only in the operand order it knows. torch's dynamo
exporter writes the erf GELU as ``x * ((1 + erf(x / sqrt 2)) * 0.5)``, which onnxruntime leaves as
five elementwise ops; ``(x * (1 + erf(x / sqrt 2))) * 0.5`` becomes one ``Gelu`` kernel. Scaling by
0.5 is exact in binary floating point (barring subnormals), so the two orders give the same bits.
"""

from __future__ import annotations

import numpy as np

from gspo.ir import Graph, Node
from gspo.rules.base import Fail, OpSet, Rule, array, need, require, single_consumer
from gspo.rules.edit import Edit
from gspo.rules.pattern import Input, Pattern, Root

__all__ = ["CanonicalGelu", "RULES"]


def _scalar(graph: Graph, name: str, value: float, tol: float = 1e-6) -> bool:
    """Whether ``name`` is a one-element constant equal to ``value`` (within ``tol``)."""
    w = graph.weights.get(name) if name else None
    if w is None or w.size != 1:
        return False
    return abs(float(array(graph, w).reshape(-1)[0]) - value) <= tol * max(1.0, abs(value))


def _beside(graph: Graph, node: Node, value: float, order: tuple[int, int]) -> int | None:
    """The position of the operand beside the first operand (in ``order``) that is the constant ``value``."""
    return next((1 - i for i in order if _scalar(graph, node.inputs[i], value)), None)


def _halved(graph: Graph, half: Node) -> int | Fail:
    """The position of the operand ``half`` multiplies by 0.5."""
    at = _beside(graph, half, 0.5, (0, 1))
    return Fail("not a multiplication by 0.5") if at is None else at


def _plus_one(graph: Graph, add: Node) -> int | Fail:
    """The position of the operand ``add`` adds 1 to (the second operand looked at first)."""
    at = _beside(graph, add, 1.0, (1, 0))
    return Fail("not 1 + erf(...)") if at is None else at


def _halves(graph: Graph, node: Node) -> bool:
    """Whether ``node`` (a Mul) multiplies by 0.5."""
    return any(_scalar(graph, name, 0.5) for name in node.inputs[:2])


class CanonicalGelu(Rule):
    """``x * ((1 + erf(x/sqrt2)) * 0.5)`` -> ``(x * (1 + erf(x/sqrt2))) * 0.5`` (the GELU form onnxruntime fuses)."""

    pattern = Pattern(
        Root("outer", "Mul"),
        Input("half", "Mul", of="outer", at=(1, 0), where=_halves, reason="not x * (g * 0.5)"),
        Input("add", "Add", of="half", at=_halved),
        Input("erf", "Erf", of="add", at=_plus_one),
        Input("scale", OpSet("Div", ("Div", "Mul")), of="erf", reason="erf does not read the scaled input", weight=0),
    )

    def check(self, graph, site):
        outer, half, scale = site["outer"], site["half"], site["scale"]
        h = outer.inputs[site.at("half")]
        x = outer.inputs[1 - site.at("half")]
        a = half.inputs[site.at("add")]
        require(scale.inputs[0] == x, "erf does not read the scaled input")
        root2 = float(np.sqrt(2.0))
        expected = root2 if scale.op_type == "Div" else 1 / root2
        require(_scalar(graph, scale.inputs[1], expected, 1e-5), "erf's argument is not x / sqrt(2)")
        need(single_consumer(graph, h))
        return self._match([outer, half], x=x, a=a, half_const=half.inputs[1 - site.at("add")])

    def apply(self, graph, match):
        outer, half = match.nodes
        e = Edit(graph).drop(outer, half)
        (prod,) = e.node("Mul", [match["x"], match["a"]], like=half)
        e.node("Mul", [prod, match["half_const"]], outputs=[outer.outputs[0].name], like=outer)
        return e.commit()


RULES = [CanonicalGelu()]
