"""No module of gspo imports another in a circle.

The graph: an edge A -> B when module A imports B anywhere (at module level or inside a
function); ``from pkg import name`` counts as importing the submodule that defines ``name`` when
the package's ``__init__`` re-exports it (followed through re-exports), and a package's
``__init__`` importing its own submodules is no edge. A circle is a set of modules that reach one
another along these edges.
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

import gspo

ROOT = Path(gspo.__file__).parent


def _modules() -> dict[str, Path]:
    """Every module of gspo by dotted name (a package by its own name)."""
    mods = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _absolute(node: ast.ImportFrom, package: str) -> str:
    """The module a ``from ... import`` names, relative imports resolved from ``package``."""
    if not node.level:
        return node.module or ""
    base = package.split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _defining(mods: dict[str, Path], trees: dict[str, ast.Module], module: str, name: str, seen=()) -> str:
    """The module ``from module import name`` takes ``name`` from: the submodule ``name``, or the
    module a package's ``__init__`` re-exports it from (followed), else ``module`` itself."""
    if f"{module}.{name}" in mods:
        return f"{module}.{name}"
    path = mods.get(module)
    if path is None or path.name != "__init__.py" or module in seen:
        return module
    for node in trees[module].body:
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            source = _absolute(node, module)
            original = next(a.name for a in node.names if (a.asname or a.name) == name)
            return _defining(mods, trees, source, original, (*seen, module)) if source in mods else module
    return module


def import_graph() -> dict[str, set[str]]:
    """Each module of gspo and the modules of gspo it imports (see the module docstring)."""
    mods = _modules()
    trees = {m: ast.parse(p.read_text(), str(p)) for m, p in mods.items()}
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        is_package = path.name == "__init__.py"
        package = m if is_package else m.rsplit(".", 1)[0]
        for node in ast.walk(trees[m]):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = _absolute(node, package)
                targets = [_defining(mods, trees, source, a.name) for a in node.names]
            else:
                continue
            for t in targets:
                if t in mods and t != m and not (is_package and t.startswith(m + ".")):
                    graph[m].add(t)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (no module imports itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def shortest_circle(graph: dict[str, set[str]], start: str, within: set[str]) -> list[str]:
    """A shortest import path from ``start`` back to itself, through the modules ``within``."""
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(graph[node] & within):
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if child not in came_from:
                came_from[child] = node
                queue.append(child)
    return [start]


def test_the_graph_sees_imports_inside_functions_and_through_package_re_exports():
    graph = import_graph()
    assert "gspo.runtime.cuda.choice" in graph["gspo.runtime.executor"]  # imported inside a function
    assert "gspo.ir.graph" in graph["gspo.runtime.executor"]  # `from gspo.ir import Graph`
    assert not any(t.startswith("gspo.ir.") for t in graph["gspo.ir"])  # a package's own submodules
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert shortest_circle({"a": {"b"}, "b": {"a", "c"}, "c": {"a"}}, "a", {"a", "b", "c"}) == ["a", "b", "a"]


def test_no_module_imports_another_in_a_circle():
    graph = import_graph()
    found = circles(graph)
    shown = [" -> ".join(shortest_circle(graph, c[0], set(c))) + (f" (a circle among {', '.join(c)})" if len(c) > 2 else "")
             for c in found]
    assert not found, "modules importing one another in a circle:\n" + "\n".join(shown)
