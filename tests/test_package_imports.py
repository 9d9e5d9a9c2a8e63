"""gspo's packages depend one way: the precision fit imports nothing of the search (the search's
whole-model stage calls the fit, and both keep time with :mod:`gspo.timing`), and no two
top-level packages import each other but the one tie still left (:data:`LEFT`).

The graph is :func:`tests.test_imports.import_graph` (imports inside functions count, names
followed through package re-exports), read at the level of ``gspo``'s top-level packages and
modules.
"""

from __future__ import annotations

from tests.test_imports import import_graph

#: The one two-way tie between top-level parts left: gspo.outputs reads a model's external-data
#: locations (gspo.ir.external) to refuse writing over them, and gspo.ir writes through
#: gspo.outputs. Remove it from here once it is gone.
LEFT = {("gspo.ir", "gspo.outputs")}


def _top(module: str) -> str:
    return ".".join(module.split(".")[:2])


def package_edges(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """Each pair of top-level parts (A, B) with A importing B, and the module imports behind it."""
    edges: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for a, targets in graph.items():
        for b in sorted(targets):
            if _top(a) != _top(b):
                edges.setdefault((_top(a), _top(b)), []).append((a, b))
    return edges


def two_way(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """The pairs of top-level parts that import each other (each pair once, in name order), with
    the module imports of both directions."""
    edges = package_edges(graph)
    return {(a, b): edges[a, b] + edges[b, a] for a, b in sorted(edges) if a < b and (b, a) in edges}


def test_the_reading_sees_a_tie_between_packages():
    graph = {"gspo.a.x": {"gspo.b.y"}, "gspo.b.y": set(), "gspo.b.z": {"gspo.a"}, "gspo.a": set()}
    assert list(two_way(graph)) == [("gspo.a", "gspo.b")]
    assert two_way({"gspo.a.x": {"gspo.b.y"}, "gspo.b.y": set()}) == {}


def test_no_precision_module_imports_the_search():
    found = sorted((a, b) for a, targets in import_graph().items() if a.startswith("gspo.precision")
                   for b in targets if b == "gspo.search" or b.startswith("gspo.search."))
    assert not found, "gspo.precision imports gspo.search:\n" + "\n".join(f"{a} -> {b}" for a, b in found)


def test_no_two_packages_import_each_other():
    ties = two_way(import_graph())
    shown = [f"{a} <-> {b}: " + ", ".join(f"{x} -> {y}" for x, y in via) for (a, b), via in ties.items()
             if (a, b) not in LEFT]
    assert not shown, "packages importing each other:\n" + "\n".join(shown)
    assert set(ties) == LEFT, f"a tie listed as left is gone: remove it from LEFT ({sorted(LEFT - set(ties))})"
