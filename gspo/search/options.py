"""``optimize``'s settings, by concern: the device, the search, verification, timing and precision.

Each default is written once, here (the command line reads its defaults from these records:
:func:`default`). ``optimize``'s keyword options and the report's ``config`` block name the
settings flat (``budget``, ``rtol``, ...), in the order of :data:`FLAT`; :meth:`OptimizeConfig.of`
and :meth:`OptimizeConfig.replace` take them so, :meth:`OptimizeConfig.options` gives them so.

This module imports nothing heavy (the command line imports it as it starts): the defaults that
live elsewhere (the partition threshold, the tolerance, the rule set) are read when a record is
made.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gspo.rules import Rule
    from gspo.runtime.verify import Tolerance

__all__ = ["DeviceOptions", "FLAT", "OptimizeConfig", "PrecisionOptions", "SearchOptions", "TimingOptions",
           "VerifyOptions", "default"]


def _threshold() -> int:
    from gspo.partition import DEFAULT_THRESHOLD

    return DEFAULT_THRESHOLD


def _rules() -> tuple[Rule, ...]:
    from gspo.rules import DEFAULT_RULES

    return DEFAULT_RULES


def _tolerance() -> Tolerance:
    from gspo.runtime.verify import Tolerance

    return Tolerance()


@dataclass(frozen=True)
class DeviceOptions:
    """Where candidates are measured: the device (``"cpu"``, ``"cuda"``), the CUDA runtime
    (``"auto"``: onnxruntime-gpu where its CUDA provider works, else torch; ``"ort"``,
    ``"torch"``; ``None``: ``$GSPO_CUDA_RUNTIME``, else ``"auto"``), the cost
    profile (``None``: the device's) and whether one made elsewhere is used anyway, the backends
    to place the model or its pieces on (``None``: every one installed here), and the
    calibration database caching piece timings (``None``: the user's cache)."""

    name: str = "cpu"
    cuda_runtime: str | None = None
    profile: str | None = None
    force_profile: bool = False
    backends: tuple[str, ...] | None = None
    db_path: str | None = None


@dataclass(frozen=True)
class SearchOptions:
    """The search: explore graphs up to ``alpha`` x the best cost, at most ``max_expansions``
    graphs expanded per piece (``--budget``), pieces of at most ``threshold`` ops, the stream cap
    (``None``: the device's) and the search's processes (0: one per core; optimize resolves
    both, :func:`~gspo.search.driver.resolved`, before any stage reads them), the two halves of
    the joint search (ablations), K candidates per piece to verify, whether the model first goes
    through the front end (constant folding, shape arithmetic as constants), and the rules."""

    alpha: float = 1.05
    max_expansions: int = 40
    threshold: int = field(default_factory=_threshold)
    max_streams: int | None = None
    jobs: int = 0
    use_rules: bool = True
    use_streams: bool = True
    keep: int = 3
    frontend: bool = True
    rules: tuple[Rule, ...] = field(default_factory=_rules, compare=False)


@dataclass(frozen=True)
class VerifyOptions:
    """Verification: the seed of the random inputs, the equivalence tolerance (one
    :class:`~gspo.runtime.verify.Tolerance`), and the random input sets every candidate is
    verified on (user inputs replace them)."""

    seed: int = 0
    tolerance: Tolerance = field(default_factory=_tolerance)
    runs: int = 2


@dataclass(frozen=True)
class TimingOptions:
    """Timing and the choice: seconds for the whole optimization (anytime; ``None``: no limit;
    90 keeps a full zoo model under 2 minutes on 2 cores, benchmarks/RESULTS.md), rounds per
    timing, the seconds of timing per piece and per whole-model comparison at most (rounds
    shrink to fit, at least 5), how much faster than the piece as given a piece's pick must
    measure (the best of several noisy options is biased low, so the bar is high) and the same
    for the whole model (chosen among two or three options and held in two separate timings: a
    lower bar, so that a real gain of 2-5% is not thrown away as noise), and how to pick:
    ``"measured"`` (by measured latency; never slower as measured) or ``"estimated"`` (by the
    cost model among the verified candidates: the same bytes for the same input, seed and
    profile)."""

    time_budget: float | None = 90.0
    runs: int = 30
    piece_timing_budget: float = 1.0
    final_timing_budget: float = 8.0
    margin: float = 0.05
    final_margin: float = 0.02
    select: str = "measured"


@dataclass(frozen=True)
class PrecisionOptions:
    """Reduced precisions to search besides fp32 (``("bf16", "int8")``; empty: exact fp32
    only), within ``max_error`` (the accuracy budget, e.g. ``"nmse=1e-3"``), measured on the
    ``validation`` data (an .npz file or a folder of them) after tuning on ``calibration``."""

    precisions: tuple[str, ...] = ()
    max_error: str | None = None
    calibration: str | None = None
    validation: str | None = None


#: Each flat option (``optimize``'s keyword, the report's ``config`` key), in the report's
#: order: the concern it belongs to and its field there (``tolerance.rtol``: a field of the
#: tolerance).
FLAT: tuple[tuple[str, str, str], ...] = (
    ("device", "device", "name"), ("cuda_runtime", "device", "cuda_runtime"), ("profile", "device", "profile"),
    ("force_profile", "device", "force_profile"), ("alpha", "search", "alpha"),
    ("budget", "search", "max_expansions"), ("time_budget", "timing", "time_budget"),
    ("threshold", "search", "threshold"), ("max_streams", "search", "max_streams"), ("jobs", "search", "jobs"),
    ("use_rules", "search", "use_rules"), ("use_streams", "search", "use_streams"), ("keep", "search", "keep"),
    ("seed", "verify", "seed"), ("rtol", "verify", "tolerance.rtol"), ("atol", "verify", "tolerance.atol"),
    ("ntol", "verify", "tolerance.ntol"), ("verify_runs", "verify", "runs"), ("timing_runs", "timing", "runs"),
    ("piece_timing_budget", "timing", "piece_timing_budget"),
    ("final_timing_budget", "timing", "final_timing_budget"), ("margin", "timing", "margin"),
    ("final_margin", "timing", "final_margin"), ("select", "timing", "select"), ("frontend", "search", "frontend"),
    ("backends", "device", "backends"), ("db_path", "device", "db_path"), ("rules", "search", "rules"),
    ("precision", "precision", "precisions"), ("max_error", "precision", "max_error"),
    ("calibration", "precision", "calibration"), ("validation", "precision", "validation"),
)
_WHERE = {flat: (concern, name) for flat, concern, name in FLAT}


def default(record: type, name: str):
    """The default of the field ``name`` of an options record, read without making one (the
    command line's defaults: nothing heavy is imported)."""
    f = record.__dataclass_fields__[name]
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()


@dataclass(frozen=True)
class OptimizeConfig:
    """Settings of ``optimize`` by concern (the command line builds this from its options:
    :meth:`of` takes them flat)."""

    device: DeviceOptions = DeviceOptions()
    search: SearchOptions = field(default_factory=SearchOptions)
    verify: VerifyOptions = field(default_factory=VerifyOptions)
    timing: TimingOptions = TimingOptions()
    precision: PrecisionOptions = PrecisionOptions()

    @classmethod
    def of(cls, **options) -> OptimizeConfig:
        """The defaults with the flat ``options`` (:data:`FLAT`) given (not validated:
        :func:`~gspo.search.config.check_options` validates)."""
        return cls().replace(**options)

    def replace(self, **options) -> OptimizeConfig:
        """These settings with the flat ``options`` replaced.

        Raises:
            TypeError: an option that is not one of :data:`FLAT`.
        """
        unknown = sorted(set(options) - set(_WHERE))
        if unknown:
            raise TypeError(f"unknown option(s) {', '.join(unknown)}")
        changed: dict[str, dict] = {}
        for flat, value in options.items():
            concern, name = _WHERE[flat]
            changed.setdefault(concern, {})[name] = value
        parts = {}
        for concern, values in changed.items():
            record = getattr(self, concern)
            inner = {k.split(".", 1)[1]: v for k, v in values.items() if "." in k}
            plain = {k: v for k, v in values.items() if "." not in k}
            if inner:  # the tolerance's terms
                plain["tolerance"] = dataclasses.replace(record.tolerance, **inner)
            parts[concern] = dataclasses.replace(record, **plain)
        return dataclasses.replace(self, **parts)

    def options(self) -> dict:
        """Every setting by its flat name, in the order of :data:`FLAT`."""
        out = {}
        for flat, concern, name in FLAT:
            value = getattr(self, concern)
            for part in name.split("."):
                value = getattr(value, part)
            out[flat] = value
        return out

    def to_json(self) -> dict:
        """The settings as the report shows them: flat, every one but ``rules``."""
        return {k: v for k, v in self.options().items() if k != "rules"}

    @classmethod
    def from_json(cls, data: Mapping) -> OptimizeConfig:
        """The settings of :meth:`to_json`'s dict (lists read as tuples; not validated)."""
        return cls.of(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in _WHERE})

    @property
    def tolerance(self) -> Tolerance:
        """The equivalence tolerance (:class:`~gspo.runtime.verify.Tolerance`)."""
        return self.verify.tolerance


