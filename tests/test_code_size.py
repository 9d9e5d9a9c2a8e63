"""The package stays readable: no function over 60 lines, no module over 500."""

from __future__ import annotations

import ast
from pathlib import Path

import gspo

ROOT = Path(gspo.__file__).parent


def test_no_function_over_60_lines_and_no_module_over_500():
    too_long = []
    for path in sorted(ROOT.rglob("*.py")):
        source = path.read_text()
        name = path.relative_to(ROOT.parent)
        if len(source.splitlines()) > 500:
            too_long.append(f"{name}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > 60:
                    too_long.append(f"{name}:{node.lineno} {node.name}: {lines} lines")
    assert not too_long, too_long
    assert len(list(ROOT.rglob("*.py"))) > 50  # the package was found and read
