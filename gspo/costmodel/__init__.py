"""The cost model (GSPO Section 3.3): polynomial-regression profiles, sequential (Eq. 1-2) and
parallel (Eq. 3) estimates, and the calibration that measures a device for them.

Two halves. The estimator is pure, features in and seconds out, and runs nothing:
:mod:`~gspo.costmodel.estimate` (:class:`CostModel`), :mod:`~gspo.costmodel.features`,
:mod:`~gspo.costmodel.poly`, :mod:`~gspo.costmodel.layout`, the profile's record and schema
(:mod:`~gspo.costmodel.schema`), its files (:mod:`~gspo.costmodel.profile`, which tries a profile's
estimates as it reads it: :mod:`~gspo.costmodel.usable`) and :mod:`~gspo.costmodel.fit` (measured
rows in, a profile out). Calibration measures through
:mod:`gspo.runtime`'s timing harness: :mod:`~gspo.costmodel.calibrate` (and its database,
:mod:`~gspo.costmodel.db`), the benchmark suite (:mod:`~gspo.costmodel.microbench`,
:mod:`~gspo.costmodel.subgraphs`), the speed reference (:mod:`~gspo.costmodel.reference`) and the
held-out evaluation (:mod:`~gspo.costmodel.evaluate`).
"""

from gspo.costmodel.estimate import CostModel
from gspo.costmodel.profile import device_description, find_profile, load_profile, save_profile
from gspo.costmodel.schema import Profile, ProfileError

__all__ = ["CostModel", "Profile", "ProfileError", "device_description", "find_profile", "load_profile", "save_profile"]
