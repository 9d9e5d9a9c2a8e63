"""The cost model (GSPO Section 3.3): microbenchmarks, polynomial-regression profiles,
sequential (Eq. 1-2) and parallel (Eq. 3) estimates."""

from gspo.costmodel.estimate import CostModel
from gspo.costmodel.profile import (
    Profile,
    ProfileError,
    device_description,
    find_profile,
    load_profile,
    save_profile,
)

__all__ = ["CostModel", "Profile", "ProfileError", "device_description", "find_profile", "load_profile", "save_profile"]
