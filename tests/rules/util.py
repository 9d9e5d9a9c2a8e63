"""Helpers for rule tests: apply one rule and check the result against onnxruntime."""

from __future__ import annotations

from gspo import ir
from gspo.rules import Fail, Match, Rule
from gspo.runtime import verify
from gspo.runtime.verify import Tolerance

RTOL, ATOL = 1e-4, 1e-5


def matches(rule: Rule, graph) -> list[Match]:
    return [m for m in rule.match(graph)]


def reasons(rule: Rule, graph) -> list[str]:
    return [f.reason for f in rule.match(graph, explain=True) if isinstance(f, Fail)]


def apply_first(rule: Rule, graph):
    found = matches(rule, graph)
    assert found, f"{rule.name} did not match; reasons: {reasons(rule, graph)}"
    out = rule.apply(graph, found[0]).check()
    assert out.key != graph.key
    return out


def assert_equivalent(original, rewritten, runs: int = 2):
    saved = ir.load_bytes(ir.serialize(rewritten))
    res = verify(original, saved, Tolerance(rtol=RTOL, atol=ATOL), runs=runs)
    assert res.equivalent, [(d.name, d.max_abs, d.max_rel) for d in res.outputs]
    return saved


def ops(graph) -> list[str]:
    return [n.op_type for n in graph.nodes]
