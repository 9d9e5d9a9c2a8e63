"""The joint search (GSPO Algorithm 1) and the whole-model ``optimize`` pipeline.

The names below are imported on first use (``gspo.search.options``, which the command line reads
its defaults from as it starts, imports nothing heavy).
"""

from importlib import import_module

_WHERE = {
    "Candidate": "gspo.search.candidate",
    "OptimizeConfig": "gspo.search.options",
    "OptimizeError": "gspo.search.config",
    "OptimizeResult": "gspo.search.result",
    "Report": "gspo.search.report",
    "SearchOptions": "gspo.search.options",
    "SearchResult": "gspo.search.backtrack",
    "Strategies": "gspo.search.strategies",
    "joint_cost": "gspo.search.backtrack",
    "optimize": "gspo.search.driver",
    "search": "gspo.search.backtrack",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'gspo.search' has no attribute {name!r}")
    value = getattr(import_module(_WHERE[name]), name)
    globals()[name] = value
    return value
