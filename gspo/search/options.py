"""``optimize``'s settings, by concern: the device, the search, verification, timing and precision.

Each default is written once, here: the command line builds these records from its options (and
reads its defaults from them: :func:`default`), the library takes them. ``optimize``'s keyword
options and the report's ``config`` block name the settings flat (``budget``, ``rtol``, ...); the
flat names come from the records' own fields (:func:`settings`): a field is named by itself, or
by its ``keyword`` metadata where the flat name differs (``max_expansions`` is ``budget``), the
tolerance by its ``terms``. The report lists them record by record in the fields' order, a field
with ``after`` metadata right after the setting it names (where the report has always shown
it), none with ``report`` metadata false. :meth:`OptimizeConfig.of` and
:meth:`OptimizeConfig.replace` build the record from flat options, each value read once as it
enters, by its field's ``read`` metadata (a list as a tuple, ``"bf16,int8"`` split,
``--max-error`` parsed into a :class:`MaxError`); :meth:`OptimizeConfig.options` gives the
settings back flat.

This module imports nothing heavy (the command line imports it as it starts): the defaults that
live elsewhere (the partition threshold, the tolerance, the rule set) are read when a record is
made.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

from gspo.errors import GspoError

if TYPE_CHECKING:
    from gspo.precision.accuracy import ErrorBudget
    from gspo.rules import Rule
    from gspo.runtime.verify import Tolerance

__all__ = ["DeviceOptions", "MaxError", "OptimizeConfig", "PrecisionOptions", "SearchOptions", "Setting",
           "TimingOptions", "VerifyOptions", "default", "precisions_of", "settings"]


def _threshold() -> int:
    from gspo.partition import DEFAULT_THRESHOLD

    return DEFAULT_THRESHOLD


def _rules() -> tuple[Rule, ...]:
    from gspo.rules import DEFAULT_RULES

    return DEFAULT_RULES


def _tolerance() -> Tolerance:
    from gspo.runtime.verify import Tolerance

    return Tolerance()


def _tuple(value):
    """A list given for a tuple setting as a tuple (anything else as given: the check says why not)."""
    return tuple(value) if isinstance(value, list) else value


def precisions_of(value):
    """``--precision``'s list, read once as it enters: ``"bf16, INT8"`` -> ``("bf16", "int8")``, a
    list as a tuple (anything else as given: the check says why not)."""
    if isinstance(value, str):
        return tuple(p.strip().lower() for p in value.split(",") if p.strip())
    return _tuple(value)


@dataclass(frozen=True)
class MaxError:
    """``--max-error``: the accuracy budget as given (``spec``: the report's ``config`` block
    shows it so) and as parsed (``budget``, the :class:`~gspo.precision.accuracy.ErrorBudget` the
    precision stage judges by), parsed once where the option enters (:meth:`parse`)."""

    spec: str
    budget: ErrorBudget

    @classmethod
    def parse(cls, spec: str) -> MaxError:
        """The budget ``spec`` states (:meth:`gspo.precision.accuracy.ErrorBudget.parse`).

        Raises:
            GspoError: a spec that states no budget (one line naming what is wrong).
        """
        from gspo.precision.accuracy import ErrorBudget

        return cls(spec, ErrorBudget.parse(spec))

    @classmethod
    def read(cls, value):
        """A keyword's ``max_error``: text parsed (:meth:`parse`), anything else as given (the
        check says why not)."""
        return cls.parse(value) if isinstance(value, str) else value

    def to_json(self) -> str:
        """The spec as given."""
        return self.spec


@dataclass(frozen=True)
class DeviceOptions:
    """Where candidates are measured: the device (``"cpu"``, ``"cuda"``), the CUDA runtime
    (``"auto"``: onnxruntime-gpu where its CUDA provider works, else torch; ``"ort"``,
    ``"torch"``; ``None``: ``$GSPO_CUDA_RUNTIME``, else ``"auto"``), the cost
    profile (``None``: the device's) and whether one made elsewhere is used anyway, the backends
    to place the model or its pieces on (``None``: every one installed here), and the
    calibration database caching piece timings (``None``: the user's cache)."""

    name: str = field(default="cpu", metadata={"keyword": "device"})
    cuda_runtime: str | None = None
    profile: str | None = None
    force_profile: bool = False
    backends: tuple[str, ...] | None = field(default=None, metadata={"after": "frontend", "read": _tuple})
    db_path: str | None = field(default=None, metadata={"after": "backends"})


@dataclass(frozen=True)
class SearchOptions:
    """The search: explore graphs up to ``alpha`` x the best cost, at most ``max_expansions``
    graphs expanded per piece (``--budget``), pieces of at most ``threshold`` ops, the stream cap
    (``None``: the device's, which optimize resolves, :func:`~gspo.search.driver.resolved`,
    before any stage reads it; a search given ``None`` caps nothing) and the search's processes
    (0: one per core, resolved the same way), the two halves of the joint search (ablations), K
    candidates per piece to verify, whether the model first goes through the front end (constant
    folding, shape arithmetic as constants), and the rules. Each piece's search
    (:func:`~gspo.search.backtrack.search`) reads these settings."""

    alpha: float = 1.05
    max_expansions: int = field(default=40, metadata={"keyword": "budget"})
    threshold: int = field(default_factory=_threshold)
    max_streams: int | None = None
    jobs: int = 0
    use_rules: bool = True
    use_streams: bool = True
    keep: int = 3
    frontend: bool = field(default=True, metadata={"after": "select"})
    rules: tuple[Rule, ...] = field(default_factory=_rules, compare=False,
                                    metadata={"after": "db_path", "read": _tuple, "report": False})


@dataclass(frozen=True)
class VerifyOptions:
    """Verification: the seed of the random inputs, the equivalence tolerance (one
    :class:`~gspo.runtime.verify.Tolerance`), and the random input sets every candidate is
    verified on (user inputs replace them)."""

    seed: int = 0
    tolerance: Tolerance = field(default_factory=_tolerance, metadata={"terms": ("rtol", "atol", "ntol")})
    runs: int = field(default=2, metadata={"keyword": "verify_runs"})


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

    time_budget: float | None = field(default=90.0, metadata={"after": "budget"})
    runs: int = field(default=30, metadata={"keyword": "timing_runs"})
    piece_timing_budget: float = 1.0
    final_timing_budget: float = 8.0
    margin: float = 0.05
    final_margin: float = 0.02
    select: str = "measured"


@dataclass(frozen=True)
class PrecisionOptions:
    """Reduced precisions to search besides fp32 (``("bf16", "int8")``; empty: exact fp32
    only), within ``max_error`` (the accuracy budget, ``--max-error nmse=1e-3`` parsed:
    :class:`MaxError`), measured on the ``validation`` data (an .npz file or a folder of them)
    after tuning on ``calibration``."""

    precisions: tuple[str, ...] = field(default=(), metadata={"keyword": "precision", "read": precisions_of})
    max_error: MaxError | None = field(default=None, metadata={"read": MaxError.read})
    calibration: str | None = None
    validation: str | None = None


def default(record: type, name: str):
    """The default of the field ``name`` of an options record, read without making one (the
    command line's defaults: nothing heavy is imported)."""
    f = record.__dataclass_fields__[name]
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()


@dataclass(frozen=True)
class Setting:
    """One flat option (``optimize``'s keyword, the report's ``config`` key): its ``name``, the
    :class:`OptimizeConfig` field it belongs to (``concern``) and its field there, ``term`` a
    field of that field's record (the tolerance's terms: ``None`` for the others), how a keyword's
    value is read as it enters (``None``: as given), and whether the report shows it."""

    name: str
    concern: str
    field: str
    term: str | None = None
    read: Callable[[object], object] | None = None
    shown: bool = True

    def value(self, cfg: OptimizeConfig):
        """This setting's value in ``cfg``."""
        value = getattr(getattr(cfg, self.concern), self.field)
        return value if self.term is None else getattr(value, self.term)


@functools.cache
def settings(config: type | None = None) -> tuple[Setting, ...]:
    """Every flat option of ``config`` (an :class:`OptimizeConfig` class; ``None``: that one), read
    from its records' fields (see the module docstring), in the report's order.

    Raises:
        TypeError: a field's ``after`` names no setting (it would be lost).
    """
    rows: list[tuple[Setting, str | None]] = []
    for concern in fields(config or OptimizeConfig):
        for f in fields(concern.default_factory):
            meta = f.metadata
            named = [Setting(t, concern.name, f.name, t) for t in meta.get("terms", ())] or \
                [Setting(meta.get("keyword", f.name), concern.name, f.name, read=meta.get("read"),
                         shown=meta.get("report", True))]
            rows += [(s, meta.get("after")) for s in named]
    return _in_order(rows)


def _in_order(rows: list[tuple[Setting, str | None]]) -> tuple[Setting, ...]:
    """The settings in order, each one with an ``after`` moved right behind the one it names."""
    behind: dict[str, list[Setting]] = {}
    for s, after in rows:
        if after is not None:
            behind.setdefault(after, []).append(s)
    out: list[Setting] = []

    def place(s: Setting) -> None:
        out.append(s)
        for t in behind.get(s.name, ()):
            place(t)

    for s, after in rows:
        if after is None:
            place(s)
    if len(out) != len(rows):
        lost = sorted({s.name for s, _ in rows} - {s.name for s in out})
        raise TypeError(f"the options {', '.join(lost)} come after no setting")
    return tuple(out)


@dataclass(frozen=True)
class OptimizeConfig:
    """Settings of ``optimize`` by concern (the command line builds this record; :meth:`of` takes
    the settings flat, as ``optimize``'s keyword options)."""

    device: DeviceOptions = field(default_factory=DeviceOptions)
    search: SearchOptions = field(default_factory=SearchOptions)
    verify: VerifyOptions = field(default_factory=VerifyOptions)
    timing: TimingOptions = field(default_factory=TimingOptions)
    precision: PrecisionOptions = field(default_factory=PrecisionOptions)

    @classmethod
    def of(cls, **options) -> OptimizeConfig:
        """The defaults with the flat ``options`` (:func:`settings`) given (each read as it enters;
        not validated: :func:`~gspo.search.config.check_options` validates).

        Raises:
            GspoError: an unknown option, or a ``max_error`` that states no budget (one line).
        """
        return cls().replace(**options)

    def replace(self, **options) -> OptimizeConfig:
        """These settings with the flat ``options`` replaced (each read as it enters: the one
        place that builds this record from flat options).

        Raises:
            GspoError: an unknown option, or a ``max_error`` that states no budget (one line).
        """
        by_name = {s.name: s for s in settings(type(self))}
        unknown = sorted(set(options) - set(by_name))
        if unknown:
            raise GspoError(f"unknown option(s) {', '.join(unknown)} (known: {', '.join(sorted(by_name))})")
        changed: dict[str, dict[str, object]] = {}
        terms: dict[tuple[str, str], dict[str, object]] = {}
        for name, value in options.items():
            s = by_name[name]
            value = s.read(value) if s.read is not None else value
            if s.term is None:
                changed.setdefault(s.concern, {})[s.field] = value
            else:
                terms.setdefault((s.concern, s.field), {})[s.term] = value
        for (concern, name), given in terms.items():
            changed.setdefault(concern, {})[name] = dataclasses.replace(getattr(getattr(self, concern), name), **given)
        return dataclasses.replace(self, **{c: dataclasses.replace(getattr(self, c), **v) for c, v in changed.items()})

    def options(self) -> dict[str, object]:
        """Every setting by its flat name, in the order of :func:`settings`."""
        return {s.name: s.value(self) for s in settings(type(self))}

    def to_json(self) -> dict[str, object]:
        """The settings as the report shows them: flat, every one but ``rules`` (a value with a
        ``to_json`` as its JSON: ``max_error`` as given)."""
        out = {}
        for s in settings(type(self)):
            if s.shown:
                value = s.value(self)
                out[s.name] = value.to_json() if hasattr(value, "to_json") else value
        return out

    @classmethod
    def from_json(cls, data: Mapping) -> OptimizeConfig:
        """The settings of :meth:`to_json`'s dict (each read as a keyword is; not validated)."""
        names = {s.name for s in settings(cls)}
        return cls.of(**{k: v for k, v in data.items() if k in names})

    @property
    def tolerance(self) -> Tolerance:
        """The equivalence tolerance (:class:`~gspo.runtime.verify.Tolerance`)."""
        return self.verify.tolerance
