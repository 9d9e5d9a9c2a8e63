"""Whether a profile's estimates are usable: its fits tried on probe features and a small graph
costed with it (:func:`check_estimates`), when a profile is loaded
(:func:`gspo.costmodel.profile.read_profile`).

The schema (:mod:`gspo.costmodel.schema`) checks a profile's data alone; a fit's coefficients may
have either sign, so the estimates themselves are tried here: a fit that gives NaN, an overflow
or an absurd time near its own features is refused, in one line naming the file and the field.
"""

from __future__ import annotations

import itertools
import math

from gspo.costmodel.estimate import CostModel
from gspo.costmodel.poly import Poly
from gspo.costmodel.schema import Fields, Profile, refuse
from gspo.errors import GspoError
from gspo.ir.builder import GraphBuilder
from gspo.streams import assign_streams

__all__ = ["check_estimates"]

#: log10 seconds an op fit may give near the features it was fitted on: outside, the fit
#: is meaningless (1e-30 s .. 1e10 s).
LOG10_SECONDS = (-30.0, 10.0)


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


def check_estimates(profile: Profile, label: str) -> None:
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


def _check_graph_estimate(profile: Profile, f: Fields) -> None:
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
        refuse(f.label, f"the estimate of a small graph fails ({type(e).__name__}: {e})")
    for seconds in estimates:
        if not (math.isfinite(seconds) and seconds > 0):
            refuse(f.label, f"a small graph's estimate is {seconds!r} s (must be a positive time)")


