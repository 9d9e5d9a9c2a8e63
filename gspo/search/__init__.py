"""The joint search (GSPO Algorithm 1) and the whole-model ``optimize`` pipeline."""

from gspo.search.backtrack import Candidate, SearchConfig, SearchResult, joint_cost, search
from gspo.search.optimize import OptimizeConfig, OptimizeError, OptimizeResult, optimize
from gspo.search.report import Report

__all__ = [
    "Candidate",
    "OptimizeConfig",
    "OptimizeError",
    "OptimizeResult",
    "Report",
    "SearchConfig",
    "SearchResult",
    "joint_cost",
    "optimize",
    "search",
]
