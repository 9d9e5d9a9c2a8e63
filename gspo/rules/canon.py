"""Canonical forms: an exported subgraph rewritten, exactly, into the form onnxruntime fuses.

onnxruntime fuses activation subgraphs only in the operand order it knows. torch's dynamo
exporter writes the erf GELU as ``x * ((1 + erf(x / sqrt 2)) * 0.5)``, which onnxruntime leaves as
five elementwise ops; ``(x * (1 + erf(x / sqrt 2))) * 0.5`` becomes one ``Gelu`` kernel. Scaling by
0.5 is exact in binary floating point (barring subnormals), so the two orders give the same bits.
"""

from __future__ import annotations

import numpy as np

from gspo.ir import Graph, Node
from gspo.rules.base import Edit, Fail, Rule, array, constant, producer, single_consumer

__all__ = ["CanonicalGelu", "RULES"]


def _scalar(graph: Graph, name: str, value: float, tol: float = 1e-6) -> bool:
    w = constant(graph, name)
    if isinstance(w, Fail) or w.size != 1:
        return False
    return abs(float(array(graph, w).reshape(-1)[0]) - value) <= tol * max(1.0, abs(value))


def _other(node: Node, name: str) -> str:
    return node.inputs[1] if node.inputs[0] == name else node.inputs[0]


def _half_of(graph: Graph, name: str) -> tuple[Node, str] | Fail:
    """``name`` = ``Mul(a, 0.5)``: that Mul and ``a``."""
    half = producer(graph, name, ("Mul",))
    if isinstance(half, Fail):
        return half
    for i in (0, 1):
        if _scalar(graph, half.inputs[i], 0.5):
            return half, half.inputs[1 - i]
    return Fail("not a multiplication by 0.5")


def _is_erf_term(graph: Graph, a: str, x: str) -> Fail | None:
    """Why ``a`` is not ``1 + erf(x / sqrt 2)`` (or ``erf(x * 1/sqrt 2)``)."""
    add = producer(graph, a, ("Add",))
    if isinstance(add, Fail):
        return add
    erf_in = next((add.inputs[i] for i in (0, 1) if _scalar(graph, add.inputs[1 - i], 1.0)), None)
    erf = producer(graph, erf_in, ("Erf",)) if erf_in else Fail("not 1 + erf(...)")
    if isinstance(erf, Fail):
        return erf
    scale = producer(graph, erf.inputs[0], ("Div", "Mul"))
    if isinstance(scale, Fail) or scale.inputs[0] != x:
        return Fail("erf does not read the scaled input")
    root2 = float(np.sqrt(2.0))
    if not _scalar(graph, scale.inputs[1], root2 if scale.op_type == "Div" else 1 / root2, 1e-5):
        return Fail("erf's argument is not x / sqrt(2)")
    return None


class CanonicalGelu(Rule):
    """``x * ((1 + erf(x/sqrt2)) * 0.5)`` -> ``(x * (1 + erf(x/sqrt2))) * 0.5`` (the GELU form onnxruntime fuses)."""

    pattern = ("Mul", "Mul", "Add", "Erf")
    pattern_ops = (frozenset(["Mul"]), frozenset(["Mul"]), frozenset(["Add"]), frozenset(["Erf"]))
    anchors = ("Mul",)

    def check(self, graph, site):
        outer = site[0]
        for i in (0, 1):
            x, h = outer.inputs[i], outer.inputs[1 - i]
            found = _half_of(graph, h)
            if isinstance(found, Fail):
                continue
            half, a = found
            fail = _is_erf_term(graph, a, x)
            if fail:
                return fail
            users = single_consumer(graph, h)
            if isinstance(users, Fail):
                return users
            return self._match([outer, half], x=x, a=a, half_const=_other(half, a))
        return Fail("not x * (g * 0.5)")

    def apply(self, graph, match):
        outer, half = match.nodes
        e = Edit(graph).drop(outer, half)
        (prod,) = e.node("Mul", [match["x"], match["a"]], like=half)
        e.node("Mul", [prod, match["half_const"]], outputs=[outer.outputs[0].name], like=outer)
        return e.commit()


RULES = [CanonicalGelu()]
