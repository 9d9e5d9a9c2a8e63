"""The README is a user's document: short, its two commands true, no development history."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HISTORY = re.compile(r"session [0-9]+|(this|next|last|previous|earlier) session|next issue", re.I)
#: Phrases that tell how the project changed rather than what it does (checked in the prose).
CHANGES = re.compile(
    r"\bno longer\b|\bnow fixed\b|\(it took\b|\bpreviously\b|\bformerly\b|\buntil now\b"
    r"|\bnow (takes|about)\b|\ban earlier (profile|version)\b",
    re.I,
)


def test_readme_is_short_and_names_the_two_commands_the_makefile_has():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 320
    makefile = (ROOT / "Makefile").read_text()
    for target in ("demo", "test"):
        assert f"make {target}" in text and re.search(rf"^{target}:", makefile, re.M)
    assert "../" not in text  # no link outside the repository
    for section in ("## Install", "## Quickstart", "## Results", "## Limits", "## Licence and citation"):
        assert section in text


def test_no_development_history_in_the_readme_docs_code_or_benchmarks():
    ignored = {".venv", "models", "__pycache__"}  # environments and generated models, not the project's text
    files = [ROOT / "README.md"] + [p for d in ("docs", "gspo", "benchmarks") for p in (ROOT / d).rglob("*")
                                    if p.suffix in (".md", ".py") and not ignored & set(p.relative_to(ROOT).parts)]
    assert [str(p.relative_to(ROOT)) for p in files if HISTORY.search(p.read_text())] == []
    prose = [p for p in files if p.suffix == ".md"]
    assert [str(p.relative_to(ROOT)) for p in prose if CHANGES.search(p.read_text())] == []


def test_every_file_the_readme_points_to_exists():
    text = (ROOT / "README.md").read_text()
    for path in re.findall(r"`((?:docs|benchmarks|gspo)/[\w./-]+\.(?:md|py|json))`", text):
        if path.startswith("docs/gpu.md") or path.endswith("/RESULTS.md") and "/" in path[11:]:
            continue  # written separately: the GPU notes and the per-benchmark result files
        assert (ROOT / path).exists(), path


def test_the_rule_table_in_the_docs_lists_every_default_rule_under_its_module():
    """docs/internals.md's table of rule families is checked against ``DEFAULT_RULES`` (what
    ``gspo rules --list`` prints): each row names exactly the rules of its module."""
    from gspo.rules import DEFAULT_RULES

    text = (ROOT / "docs" / "internals.md").read_text()
    rows = re.findall(r"^\| `(\w+)`[^|]*\| (.*) \|$", text, re.M)
    names = {r.name for r in DEFAULT_RULES}
    listed = {family: {w for w in re.findall(r"\b[A-Z]\w+", cells) if w in names} for family, cells in rows}
    by_module: dict[str, set[str]] = {}
    for rule in DEFAULT_RULES:
        by_module.setdefault(type(rule).__module__.rsplit(".", 1)[-1], set()).add(rule.name)
    assert listed == by_module
