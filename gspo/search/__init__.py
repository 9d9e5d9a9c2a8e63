"""The joint search (GSPO Algorithm 1) and the whole-model ``optimize`` pipeline."""

from gspo.search.backtrack import Candidate, SearchConfig, SearchResult, joint_cost, search
from gspo.search.optimize import OptimizeConfig, OptimizeError, OptimizeResult, optimize

__all__ = [
    "Candidate",
    "OptimizeConfig",
    "OptimizeError",
    "OptimizeResult",
    "SearchConfig",
    "SearchResult",
    "joint_cost",
    "optimize",
    "search",
]
