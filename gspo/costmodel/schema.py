"""The calibration profile's JSON schema, checked field by field (what :meth:`Profile.from_json`
reads): every error names the file and the field, in one line.

A profile's numbers must be finite; costs, factors and representative timings must not be
negative (a negative call cost printed "estimate -998.948 ms"); a fit's coefficients may have
either sign, so the estimates themselves are tried on probe features (:func:`check_estimates`):
a fit that gives NaN, an overflow or an absurd time there is refused.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, NoReturn

from gspo.costmodel.poly import Local, Poly
from gspo.errors import GspoError

__all__ = ["Fields", "read_fields", "check_estimates"]

#: Highest power of a feature in a fit (the fits are degree 2).
MAX_POWER = 4
#: Most features a fit may take (op fits take 4 or 5, beta_a's 5).
MAX_FEATURES = 16
#: Nesting allowed inside ``meta`` (free-form notes; the calibration writes flat numbers).
MAX_META_DEPTH = 4
#: log10 seconds an op fit may give near the features it was fitted on: outside, the fit
#: is meaningless (1e-30 s .. 1e10 s).
LOG10_SECONDS = (-30.0, 10.0)
#: Costs (seconds) that must not be negative; the first three are required.
COSTS = ("call_cost", "segment_cost", "sync_cost", "segment_byte_cost", "op_overhead", "reference_s",
         "launch_cost")
REQUIRED = ("device", "runtime", "call_cost", "segment_cost", "sync_cost", "families", "representatives")


class Fields:
    """Typed reads of a profile's JSON; a wrong value raises a ProfileError naming the field."""

    def __init__(self, label: str):
        self.label = label

    def fail(self, where: str, what: str) -> NoReturn:
        """Raise the one-line error for field ``where``."""
        _refuse(self.label, f"field {where!r} {what}")

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


def _probe_points(fit: Poly) -> list[list[float]]:
    """Features around those a fit was made on: its centre, one scale either way along each
    feature, and the corners of its bounds when it has them."""
    centre = list(fit.mean)
    points = [centre]
    for i, s in enumerate(fit.scale):
        for sign in (-1.0, 1.0):
            p = list(centre)
            p[i] += sign * s
            points.append(p)
    if fit.bounds is not None and len(fit.bounds) <= 6:
        points += [list(c) for c in itertools.product(*fit.bounds)]
    return points


def _try(fit: Poly, x: list[float]) -> float:
    try:
        return fit(x)
    except (OverflowError, ZeroDivisionError):
        return math.inf


def check_estimates(profile, label: str) -> None:
    """Refuse a profile whose estimates are meaningless: an op fit giving NaN, an overflow or a
    time outside 1e-30 .. 1e10 s near its own features, the aggregate correction not increasing
    or outside that range for 1e-7 .. 100 s of ops, beta_a not finite, or a small graph's
    estimate not a positive finite time."""
    f = Fields(label)
    low, high = LOG10_SECONDS
    for family, fit in profile.families.items():
        for x in _probe_points(fit):
            y = _try(fit, x)
            if not low <= y <= high:
                f.fail(f"families.{family}", f"gives log10 seconds {y:.4g} at features {[round(v, 3) for v in x]}")
    a, b = profile.seq_scale
    if a <= 0:
        f.fail("seq_scale", f"must have a positive slope (got {a!r}): more work must cost more")
    for op_sum in (1e-7, 1e-4, 1e-1, 1e2):
        if not low <= a * math.log10(op_sum) + b <= high:
            f.fail("seq_scale", f"turns {op_sum:g} s of ops into 10**{a * math.log10(op_sum) + b:.4g} s")
    if profile.parallel is not None:
        for x in _probe_points(profile.parallel):
            if not math.isfinite(_try(profile.parallel, x)):
                f.fail("parallel", f"is not finite at features {[round(v, 3) for v in x]}")
    _check_graph_estimate(profile, f)


def _check_graph_estimate(profile, f: Fields) -> None:
    from gspo.costmodel.estimate import CostModel
    from gspo.ir.builder import GraphBuilder
    from gspo.streams import assign_streams

    b = GraphBuilder("probe", seed=0)
    x = b.input("x", (1, 8, 16, 16))
    left = b.op("Relu", [b.op("Conv", [x, b.weight("w", (8, 8, 3, 3))], kernel_shape=[3, 3], pads=[1, 1, 1, 1])])
    right = b.op("MaxPool", [x], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])
    y = b.op("MatMul", [b.op("Reshape", [b.op("Add", [left, right]), b.const("s", [8, 256])]), b.weight("m", (256, 32))])
    graph = b.output(b.op("Softmax", [y], axis=-1)).build()
    model = CostModel(profile)
    try:
        estimates = [model.cost(graph), model.cost(graph, assign_streams(graph, max_streams=2))]
    except (OverflowError, ZeroDivisionError, ValueError, GspoError) as e:
        _refuse(f.label, f"the estimate of a small graph fails ({type(e).__name__}: {e})")
    for seconds in estimates:
        if not (math.isfinite(seconds) and seconds > 0):
            _refuse(f.label, f"a small graph's estimate is {seconds!r} s (must be a positive time)")


def _refuse(label: str, what: str) -> NoReturn:
    from gspo.costmodel.profile import ProfileError

    raise ProfileError(f"{label}: not a usable profile: {what}")
