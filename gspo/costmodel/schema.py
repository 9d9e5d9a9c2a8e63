"""A calibration profile's data: the :class:`Profile` record, its JSON form, and the schema that
form is checked against field by field (:meth:`Profile.from_json`): every error names the file
and the field, in one line.

A profile's numbers must be finite; costs, factors and representative timings must not be
negative (a negative call cost printed "estimate -998.948 ms"), and no number may pass the
bounds no calibration comes near (:func:`check_bounds`). Nothing here runs the estimator: a
fit's coefficients may have either sign, so whether its estimates are usable is tried when a
profile is loaded (:func:`gspo.costmodel.usable.check_estimates`, through
:func:`gspo.costmodel.profile.read_profile`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, NoReturn

from gspo import __version__
from gspo.costmodel.poly import Local, Poly
from gspo.errors import GspoError

__all__ = ["Profile", "ProfileError", "Fields", "read_fields", "check_bounds", "refuse", "SCHEMA", "SCHEMA_VERSION"]

SCHEMA = "gspo-profile"
#: 2: convolution fits take a fifth feature (``slow_depthwise``); version-1 profiles must be recalibrated.
SCHEMA_VERSION = 2
#: Highest power of a feature in a fit (the fits are degree 2).
MAX_POWER = 4
#: Most features a fit may take (op fits take 4 or 5, beta_a's 5).
MAX_FEATURES = 16
#: Nesting allowed inside ``meta`` (free-form notes; the calibration writes flat numbers).
MAX_META_DEPTH = 4
#: Costs (seconds) that must not be negative; the first three are required.
COSTS = ("call_cost", "segment_cost", "sync_cost", "segment_byte_cost", "op_overhead", "reference_s",
         "launch_cost")
REQUIRED = ("device", "runtime", "call_cost", "segment_cost", "sync_cost", "families", "representatives")
#: Bounds on a profile's numbers that no calibration comes near: any number's magnitude (a fit's
#: coefficients and points included), a cost in seconds, a family's factor. A profile past them
#: is refused in one line (1e300s made numpy warn of overflows at every estimate).
MAX_MAGNITUDE = 1e30
MAX_COST_S = 3600.0
MAX_FAMILY_SCALE = 1e6


class ProfileError(GspoError):
    """A missing, corrupt, foreign or mismatched profile."""


@dataclass(frozen=True)
class Profile:
    """A device's fitted cost model: per-family op fits, fixed costs and the corrections."""

    device: str
    runtime: str
    call_cost: float  # seconds: one session run of a trivial graph
    segment_cost: float  # seconds added per segment of a multi-stream plan
    sync_cost: float  # seconds per cross-stream event
    families: dict[str, Poly]  # log10(seconds) ~ poly(features)
    representatives: dict[str, list[tuple[float, float]]]  # family -> [(flops, seconds)]
    parallel: Poly | None  # beta_a ~ poly(parallel features)
    #: Sequential aggregate: log10(graph seconds - call) = a * log10(sum of op costs) + b.
    seq_scale: tuple[float, float] = (1.0, 0.0)
    #: Seconds per segment byte (inputs + outputs crossing a segment boundary), on top of segment_cost.
    segment_byte_cost: float = 0.0
    #: Seconds every executed op costs at least (kernel dispatch), whatever its size.
    op_overhead: float = 0.0
    #: Median seconds of the speed reference (gspo.costmodel.reference) during calibration: the
    #: profile's estimates are in these reference units. 0: measurements were not normalized.
    reference_s: float = 0.0
    #: Per op family, the factor from a single-op cost (measured alone) to the same op's share of a
    #: zoo piece's run time, fitted on calibration pieces; families not listed keep 1.
    family_scale: dict[str, float] = field(default_factory=dict)
    #: Seconds a multi-stream run costs beyond its segment DAG (handing the run to the stream
    #: threads and collecting it), added to the critical path of every schedule with 2+ streams.
    launch_cost: float = 0.0
    #: Seconds per reorder into or out of onnxruntime's blocked layout (:mod:`gspo.costmodel.layout`),
    #: fitted on the calibration pieces with the family factors; 0: not modelled.
    reorder_cost: float = 0.0
    #: Channel block of that layout on the calibrated device (8, 16; 0: none).
    layout_block: int = 0
    gspo_version: str = __version__
    meta: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        """The profile as JSON (what :func:`~gspo.costmodel.profile.save_profile` writes)."""
        return {
            "schema": SCHEMA,
            "version": SCHEMA_VERSION,
            "device": self.device,
            "runtime": self.runtime,
            "gspo_version": self.gspo_version,
            "call_cost": self.call_cost,
            "segment_cost": self.segment_cost,
            "sync_cost": self.sync_cost,
            "families": {k: v.to_json() for k, v in sorted(self.families.items())},
            "representatives": {k: [list(r) for r in v] for k, v in sorted(self.representatives.items())},
            "parallel": self.parallel.to_json() if self.parallel else None,
            "seq_scale": list(self.seq_scale),
            "segment_byte_cost": self.segment_byte_cost,
            "op_overhead": self.op_overhead,
            "reference_s": self.reference_s,
            "family_scale": dict(sorted(self.family_scale.items())),
            "launch_cost": self.launch_cost,
            "reorder_cost": self.reorder_cost,
            "layout_block": self.layout_block,
            "meta": self.meta,
        }

    @classmethod
    def from_json(cls, d: dict, label: str = "profile") -> Profile:
        """The profile stored by :meth:`to_json`, its schema checked (types, required fields,
        finite numbers, costs not negative). Its bounds and its estimates are not: a profile read
        from a file goes through :func:`~gspo.costmodel.profile.read_profile`, which checks both.

        Raises:
            ProfileError: one line naming ``label`` and the field that is wrong.
        """
        if not isinstance(d, dict) or d.get("schema") != SCHEMA:
            raise ProfileError(f"{label}: not a gspo profile")
        if d.get("version") != SCHEMA_VERSION:
            raise ProfileError(f"{label}: profile schema version {d.get('version')!r}, gspo reads {SCHEMA_VERSION}")
        return cls(**read_fields(Fields(label), d))


class Fields:
    """Typed reads of a profile's JSON; a wrong value raises a ProfileError naming the field."""

    def __init__(self, label: str):
        self.label = label

    def fail(self, where: str, what: str) -> NoReturn:
        """Raise the one-line error for field ``where``."""
        refuse(self.label, f"field {where!r} {what}")

    def obj(self, value: Any, where: str) -> dict:
        """``value`` as a JSON object."""
        if not isinstance(value, dict):
            self.fail(where, f"must be an object (got {_kind(value)})")
        return value

    def seq(self, value: Any, where: str, length: int | None = None) -> list:
        """``value`` as a JSON array (of ``length`` items when given)."""
        if not isinstance(value, list):
            self.fail(where, f"must be an array (got {_kind(value)})")
        if length is not None and len(value) != length:
            self.fail(where, f"must have {length} items (got {len(value)})")
        return value

    def string(self, value: Any, where: str) -> str:
        """``value`` as a string."""
        if not isinstance(value, str):
            self.fail(where, f"must be a string (got {_kind(value)})")
        return value

    def number(self, value: Any, where: str, low: float | None = None, positive: bool = False) -> float:
        """``value`` as a finite float, at least ``low`` (above it with ``positive``)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(where, f"must be a number (got {_kind(value)})")
        try:
            x = float(value)
        except OverflowError:
            x = math.inf
        if not math.isfinite(x):
            self.fail(where, f"must be a finite number (got {value!r})")
        if low is not None and (x <= low if positive else x < low):
            self.fail(where, f"must be {'above' if positive else 'at least'} {low:g} (got {value!r})")
        return x

    def integer(self, value: Any, where: str, low: int, high: int) -> int:
        """``value`` as an integer in ``[low, high]``."""
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(where, f"must be an integer (got {_kind(value)})")
        if not low <= value <= high:
            self.fail(where, f"must be in [{low}, {high}] (got {value})")
        return value

    def numbers(self, value: Any, where: str, length: int | None = None, **bounds) -> tuple[float, ...]:
        """``value`` as an array of finite numbers."""
        return tuple(self.number(v, f"{where}[{i}]", **bounds) for i, v in enumerate(self.seq(value, where, length)))


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def read_poly(f: Fields, value: Any, where: str) -> Poly:
    """A :class:`Poly` from its JSON: powers, coefficients, standardization, optional parts."""
    d = f.obj(value, where)
    for key in ("powers", "coef", "intercept", "mean", "scale"):
        if key not in d:
            f.fail(f"{where}.{key}", "is missing")
    mean = f.numbers(d["mean"], f"{where}.mean")
    n = len(mean)
    if not 1 <= n <= MAX_FEATURES:
        f.fail(f"{where}.mean", f"must have 1 to {MAX_FEATURES} features (got {n})")
    powers = tuple(tuple(f.integer(e, f"{where}.powers[{i}][{j}]", 0, MAX_POWER)
                         for j, e in enumerate(f.seq(row, f"{where}.powers[{i}]", n)))
                   for i, row in enumerate(f.seq(d["powers"], f"{where}.powers")))
    local = read_local(f, d["local"], f"{where}.local", n) if d.get("local") else None
    bounds = None
    if d.get("bounds"):
        bounds = tuple(f.numbers(b, f"{where}.bounds[{i}]", 2) for i, b in enumerate(f.seq(d["bounds"], f"{where}.bounds", n)))
        if any(lo > hi for lo, hi in bounds):
            f.fail(f"{where}.bounds", "must give each feature's low end first")
    return Poly(powers, f.numbers(d["coef"], f"{where}.coef", len(powers)), f.number(d["intercept"], f"{where}.intercept"),
                mean, f.numbers(d["scale"], f"{where}.scale", n, low=0.0, positive=True), local, bounds)


def read_local(f: Fields, value: Any, where: str, n: int) -> Local:
    """A :class:`Local` correction from its JSON (points of ``n`` features)."""
    d = f.obj(value, where)
    for key in ("points", "residuals", "bandwidth", "prior"):
        if key not in d:
            f.fail(f"{where}.{key}", "is missing")
    points = tuple(f.numbers(p, f"{where}.points[{i}]", n) for i, p in enumerate(f.seq(d["points"], f"{where}.points")))
    return Local(points, f.numbers(d["residuals"], f"{where}.residuals", len(points)),
                 f.number(d["bandwidth"], f"{where}.bandwidth", low=0.0, positive=True),
                 f.number(d["prior"], f"{where}.prior", low=0.0, positive=True))


def _check_meta(f: Fields, value: Any, where: str, depth: int = 0) -> None:
    if depth > MAX_META_DEPTH:
        f.fail(where, f"is nested deeper than {MAX_META_DEPTH} levels")
    if isinstance(value, float) and not math.isfinite(value):
        f.fail(where, f"must be a finite number (got {value!r})")
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in children:
        _check_meta(f, v, f"{where}.{k}" if isinstance(value, dict) else f"{where}[{k}]", depth + 1)


def read_fields(f: Fields, d: dict) -> dict[str, Any]:
    """The :class:`~gspo.costmodel.profile.Profile` fields of the profile JSON ``d``, checked."""
    for key in REQUIRED:
        if key not in d:
            f.fail(key, "is missing")
    out: dict[str, Any] = {key: f.number(d[key], key, low=0.0) for key in COSTS if key in d}
    out.update(device=f.string(d["device"], "device"), runtime=f.string(d["runtime"], "runtime"),
               gspo_version=f.string(d.get("gspo_version", ""), "gspo_version"))
    out["families"] = {k: read_poly(f, v, f"families.{k}") for k, v in f.obj(d["families"], "families").items()}
    out["representatives"] = {
        k: [f.numbers(r, f"representatives.{k}[{i}]", 2, low=0.0) for i, r in enumerate(f.seq(v, f"representatives.{k}"))]
        for k, v in f.obj(d["representatives"], "representatives").items()}
    out["parallel"] = read_poly(f, d["parallel"], "parallel") if d.get("parallel") is not None else None
    if "seq_scale" in d:
        out["seq_scale"] = f.numbers(d["seq_scale"], "seq_scale", 2)
    if "family_scale" in d:
        out["family_scale"] = {k: f.number(v, f"family_scale.{k}", low=0.0)
                               for k, v in f.obj(d["family_scale"], "family_scale").items()}
    if "reorder_cost" in d:
        out["reorder_cost"] = f.number(d["reorder_cost"], "reorder_cost")
    if "layout_block" in d:
        out["layout_block"] = f.integer(d["layout_block"], "layout_block", 0, 1024)
    meta = f.obj(d.get("meta", {}), "meta")
    _check_meta(f, meta, "meta")
    out["meta"] = dict(meta)
    return out


def _numbers(x, where: str):
    """Every number in the JSON ``x``, with the path of its field."""
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _numbers(v, f"{where}.{k}" if where else str(k))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _numbers(v, f"{where}[{i}]")
    elif isinstance(x, (int, float)) and not isinstance(x, bool):
        yield where, x


def check_bounds(d: dict, label: str) -> None:
    """Refuse numbers no calibration gives (see :data:`MAX_MAGNITUDE`), naming the field."""
    def field_is(where: str, what: str):
        refuse(label, f"field {where!r} is {what}")

    for where, v in _numbers({k: v for k, v in d.items() if k not in ("meta", "version")}, ""):
        if abs(v) > MAX_MAGNITUDE:
            field_is(where, f"{v:g}, beyond any calibration's numbers (at most {MAX_MAGNITUDE:g})")
    for key in ("call_cost", "segment_cost", "sync_cost", "segment_byte_cost", "op_overhead", "reference_s",
                "launch_cost", "reorder_cost"):
        if d.get(key, 0) > MAX_COST_S:
            field_is(key, f"{d[key]:g} s, more than an hour")
    for family, factor in (d.get("family_scale") or {}).items():
        if factor > MAX_FAMILY_SCALE:
            field_is(f"family_scale.{family}", f"{factor:g}, more than {MAX_FAMILY_SCALE:g}")


def refuse(label: str, what: str) -> NoReturn:
    """Raise the one-line :class:`ProfileError` saying the profile ``label`` is not usable, and why."""
    raise ProfileError(f"{label}: not a usable profile: {what}")
