"""Every rule's ``apply`` builds its rewrite from the match alone.

Read statically, from the source of each rule class (``ast``):

- the *deciding helpers* of a rule are its ``check`` and every function, method or class of
  gspo (or of the rule's own module) that ``check`` names (calls, or passes on to be called),
  followed transitively through the functions of ``gspo.rules`` and of the rule's module;
- the *reach* of ``apply`` is, in the same way, everything ``apply`` names, transitively.

``apply`` must reach no deciding helper (so it neither re-checks nor re-derives what ``check``
found: ``need``, ``require``, ``conv_params``, ``split_sizes``, ``elementwise``, ``producer``,
... are all deciding helpers), and no function it reaches in ``gspo.rules`` may look a node,
value or weight up in the graph (``graph.values``, ``graph.weights``, ``graph.producers``, ...):
what it builds from comes in the match. Names are resolved through the module's globals,
``self.`` and modules' attributes; calls on values (``e.node(...)``, ``match["part"].bias_or_zeros``)
are not followed, and ``Edit`` (which reads the graph to build) is a leaf.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import textwrap

import pytest

from gspo.rules import DEFAULT_RULES, WHOLE_MODEL_RULES, Rule
from gspo.rules.base import require
from gspo.rules.edit import Edit

#: The graph's lookups a rewrite must not make: what it needs comes in the match.
LOOKUPS = frozenset({"values", "weights", "producers", "consumers", "nodes", "nodes_by_op", "output_names", "position"})


def _home(obj, rule_module: str) -> bool:
    """Whether ``obj`` is defined in ``gspo.rules`` or the rule's own module (followed further)."""
    module = getattr(obj, "__module__", None) or ""
    return module.startswith("gspo.rules") or module == rule_module


def _tree(func) -> ast.AST | None:
    """``func``'s syntax tree without its annotations (types are not calls)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    except (OSError, TypeError):  # no source (e.g. made by dataclasses)
        return None
    for n in ast.walk(tree):
        if isinstance(n, ast.arg):
            n.annotation = None
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n.returns = None
        elif isinstance(n, ast.AnnAssign):
            n.annotation = ast.Constant(None)
    return tree


def _locals(tree: ast.AST) -> set[str]:
    """The names a function binds itself (arguments, assignments, loop variables, ...)."""
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    return names | {a.arg for n in ast.walk(tree) if isinstance(n, ast.arguments) for a in (*n.args, *n.kwonlyargs)}


def _named(func, cls) -> list:
    """The functions, methods and classes ``func``'s body names (not its own locals or builtins)."""
    tree = _tree(func)
    if tree is None:
        return []
    mine, out = _locals(tree), []
    for n in ast.walk(tree):
        obj = None
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in mine:
            obj = func.__globals__.get(n.id, getattr(builtins, n.id, None))
            obj = None if getattr(builtins, n.id, None) is obj else obj
        elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
            if n.value.id == "self" and cls is not None:
                obj = inspect.getattr_static(cls, n.attr, None)
                obj = obj.__func__ if isinstance(obj, (staticmethod, classmethod)) else obj
            elif inspect.ismodule(func.__globals__.get(n.value.id)):
                obj = getattr(func.__globals__[n.value.id], n.attr, None)
        if inspect.isfunction(obj) or inspect.isclass(obj):
            out.append(obj)
    return out


def reach(func, cls) -> set:
    """Everything ``func`` names, followed through the functions of ``gspo.rules`` and of ``cls``'s module."""
    seen: set = set()
    stack = [func]
    while stack:
        for obj in _named(stack.pop(), cls):
            if obj not in seen:
                seen.add(obj)
                if inspect.isfunction(obj) and _home(obj, cls.__module__):
                    stack.append(obj)
    return seen


def _graph_lookups(func) -> list[str]:
    """``graph.values``-like lookups in ``func`` (on a name ``graph`` or an attribute ``.graph``)."""
    tree = _tree(func)
    if tree is None:
        return []
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and n.attr in LOOKUPS:
            on = n.value
            if (isinstance(on, ast.Name) and on.id == "graph") or (isinstance(on, ast.Attribute) and on.attr == "graph"):
                found.append(f"{func.__qualname__}: graph.{n.attr}")
    return found


def _name(obj) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def violations(rule_class) -> list[str]:
    """Why ``rule_class``'s apply does not build from its match alone (empty: it does)."""
    check, apply = rule_class.check, rule_class.apply
    deciding = reach(check, rule_class) | {check}
    applied = reach(apply, rule_class)
    ours = {f for f in applied & deciding if _name(f).startswith(("gspo.", rule_class.__module__ + "."))}
    out = [f"apply reaches {_name(f)}, which check uses to decide" for f in ours if f is not Edit]
    for f in {apply} | {f for f in applied if inspect.isfunction(f) and _home(f, rule_class.__module__)}:
        out += [f"apply reads the graph: {w}" for w in _graph_lookups(f)]
    return sorted(out)


RULE_CLASSES = sorted({type(r) for r in (*DEFAULT_RULES, *WHOLE_MODEL_RULES)}, key=lambda c: c.__name__)


@pytest.mark.parametrize("rule_class", RULE_CLASSES, ids=lambda c: c.__name__)
def test_apply_builds_from_the_match_alone(rule_class):
    assert violations(rule_class) == []


def test_check_reaches_its_deciding_helpers():
    """The analysis sees what a check decides with (else the test above would prove nothing)."""
    from gspo.rules.merge import MergeParallelConvs
    from gspo.rules.move import PushThroughSplit

    names = {_name(f) for f in reach(PushThroughSplit.check, PushThroughSplit)}
    assert {"gspo.rules.move.elementwise", "gspo.rules.base.split_sizes", "gspo.rules.base.require"} <= names
    names = {_name(f) for f in reach(MergeParallelConvs.check, MergeParallelConvs)}
    assert {"gspo.rules.base.plain_conv", "gspo.rules.base.conv_params", "gspo.rules.base.need"} <= names


# ------------------------------------------------- rules that break the shape, on purpose
def _is_relu(graph, node) -> None:
    require(node.op_type == "Relu", "not a Relu")


class _RechecksInApply(Rule):
    """Test-only: apply calls a helper its check decides with."""

    pattern = ("Relu",)

    def check(self, graph, site):
        _is_relu(graph, site[0])
        return self._match(site)

    def apply(self, graph, match):
        _is_relu(graph, match.nodes[0])
        return Edit(graph).drop(match.nodes[0]).commit()


class _CallsCheck(_RechecksInApply):
    """Test-only: apply calls check again."""

    def apply(self, graph, match):
        self.check(graph, match.nodes)
        return Edit(graph).drop(match.nodes[0]).commit()


class _LooksUp(_RechecksInApply):
    """Test-only: apply reads a weight from the graph instead of the match."""

    def apply(self, graph, match):
        return _rebuild(graph, match.nodes[0])


def _rebuild(graph, node):
    graph.weights[node.inputs[0]]
    return Edit(graph).drop(node).commit()


def test_the_shape_test_fails_on_rules_that_break_it():
    assert violations(_RechecksInApply) == [
        "apply reaches gspo.rules.base.Mismatch, which check uses to decide",
        "apply reaches gspo.rules.base.require, which check uses to decide",
        f"apply reaches {__name__}._is_relu, which check uses to decide",
    ]
    assert f"apply reaches {__name__}._RechecksInApply.check, which check uses to decide" in violations(_CallsCheck)
    assert violations(_LooksUp) == ["apply reads the graph: _rebuild: graph.weights"]
