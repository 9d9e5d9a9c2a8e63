"""The shape of gspo's code: no function takes more than 8 parameters, and optimize's report
records say what they hold (no field a bare ``dict`` or ``list``)."""

from __future__ import annotations

import ast
import collections.abc
import dataclasses
import importlib
import sys
import types
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "gspo"
#: The most parameters a function may take (``self``/``cls`` not counted; ``*args`` and
#: ``**kwargs`` count one each): more is a group of settings that wants a record of its own.
MAX_PARAMETERS = 8
#: Container types that say nothing about what they hold when they are not parameterized.
BARE = (dict, list, tuple, set, frozenset, collections.abc.Mapping, collections.abc.MutableMapping,
        collections.abc.Sequence, collections.abc.Iterable, collections.abc.Collection)


def parameter_count(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = node.args
    count = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)
    first = (a.posonlyargs + a.args)[:1]
    return count - (1 if first and first[0].arg in ("self", "cls") else 0)


def test_no_function_takes_more_than_8_parameters():
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and parameter_count(node) > MAX_PARAMETERS:
                offenders.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} {node.name}: "
                                 f"{parameter_count(node)} parameters")
    assert not offenders, "more than 8 parameters (group related ones into a record):\n" + "\n".join(offenders)


def test_the_parameter_count_leaves_out_self_and_counts_star_arguments_once():
    source = ("def f(self, a, /, b, *args, c, **kwargs): pass\n"
              "def g(a, b=1, *, c=2): pass\n"
              "class K:\n    @classmethod\n    def h(cls, x): pass\n")
    counts = {n.name: parameter_count(n) for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef)}
    assert counts == {"f": 5, "g": 3, "h": 1}


def _type_checking_names(module: types.ModuleType) -> dict[str, object]:
    """The names ``module`` imports only under ``if TYPE_CHECKING:`` (its annotations name them)."""
    names: dict[str, object] = {}
    for node in ast.walk(ast.parse(Path(module.__file__).read_text())):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            for imp in (s for s in node.body if isinstance(s, ast.ImportFrom)):
                source = importlib.import_module(imp.module)
                names.update({a.asname or a.name: getattr(source, a.name) for a in imp.names})
    return names


def _hints(cls: type) -> dict[str, object]:
    module = sys.modules[cls.__module__]
    return typing.get_type_hints(cls, vars(module), _type_checking_names(module))


def _untyped(hint) -> str | None:
    """What in ``hint`` is a container that does not say what it holds (``None``: nothing)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is None:
        return getattr(hint, "__name__", str(hint)) if hint in BARE else None
    return next((found for found in map(_untyped, args) if found), None)


def _records(hint) -> list[type]:
    """The dataclasses ``hint`` names (inside ``list[...]``, ``X | None``, ``dict[str, X]`` too)."""
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return [hint]
    return [r for arg in typing.get_args(hint) for r in _records(arg)]


def report_offenders(root: type) -> list[str]:
    """Every field of ``root`` and of the records its fields name, recursively, whose type is
    a bare container (``dict``, ``list``, ``dict | None``, ``list[dict]``, ``dict[str, dict]``)."""
    offenders, seen, todo = [], set(), [root]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        for name, hint in _hints(cls).items():
            if name not in {f.name for f in dataclasses.fields(cls)}:
                continue
            bare = _untyped(hint)
            if bare:
                offenders.append(f"{cls.__module__}.{cls.__qualname__}.{name}: {hint} (a bare {bare})")
            todo += _records(hint)
    return sorted(offenders)


def test_the_optimize_reports_records_say_what_they_hold():
    from gspo.search.report import Report

    offenders = report_offenders(Report)
    assert not offenders, "report fields that do not say what they hold:\n" + "\n".join(offenders)


@dataclasses.dataclass
class _Inner:
    fine: dict[str, float]
    rows: list[dict]


@dataclasses.dataclass
class _Outer:
    counts: dict[str, int]
    nested: dict[str, dict[str, float]]
    loose: dict | None
    items: list
    inner: list[_Inner] | None
    table: collections.abc.Mapping


def test_the_report_check_finds_bare_containers_at_any_depth():
    found = [line.split(":")[0].rsplit(".", 2)[1:] for line in report_offenders(_Outer)]
    assert found == [["_Inner", "rows"], ["_Outer", "items"], ["_Outer", "loose"], ["_Outer", "table"]]
