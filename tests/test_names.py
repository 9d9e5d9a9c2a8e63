"""Names say what they hold: a :class:`~gspo.search.budget.Timebox` (the run's time) is never
called ``budget``, the name of the accuracy budget (:class:`~gspo.precision.accuracy.ErrorBudget`)."""

from __future__ import annotations

import ast
from pathlib import Path

import gspo

ROOT = Path(gspo.__file__).parent


def _holds_timebox(annotation: ast.expr | None) -> bool:
    """Whether an annotation names Timebox (``Timebox``, ``Timebox | None``, ``"Timebox"``)."""
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        annotation = ast.parse(annotation.value, mode="eval").body
    return any(isinstance(n, ast.Name) and n.id == "Timebox" or isinstance(n, ast.Attribute) and n.attr == "Timebox"
               for n in ast.walk(annotation))


def timeboxes_named_budget(source: str) -> list[str]:
    """The parameters and class fields annotated ``Timebox`` (or ``Timebox | None``) named ``budget``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            every = args.posonlyargs + args.args + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a]
            found += [f"{node.lineno} {getattr(node, 'name', 'lambda')}({a.arg})" for a in every
                      if a.arg == "budget" and _holds_timebox(a.annotation)]
        elif isinstance(node, ast.ClassDef):
            found += [f"{s.lineno} {node.name}.budget" for s in node.body
                      if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and s.target.id == "budget"
                      and _holds_timebox(s.annotation)]
    return found


def test_the_check_finds_a_timebox_named_budget():
    source = ("def f(budget: Timebox): ...\n"
              "def g(x, *, budget: Timebox | None = None): ...\n"
              "def h(budget: ErrorBudget, timebox: Timebox): ...\n"
              "class Run:\n    budget: Timebox\n    errors: ErrorBudget\n")
    assert timeboxes_named_budget(source) == ["1 f(budget)", "2 g(budget)", "5 Run.budget"]


def test_no_timebox_in_the_package_is_named_budget():
    found = {str(path.relative_to(ROOT.parent)): hits for path in sorted(ROOT.rglob("*.py"))
             if (hits := timeboxes_named_budget(path.read_text()))}
    assert found == {}
    assert len(list(ROOT.rglob("*.py"))) > 50  # the package was found and read
