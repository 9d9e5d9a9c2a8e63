"""Degree-2 polynomial ridge regression, fitted with scikit-learn, stored and evaluated as plain
numbers (JSON-safe, and cheap to evaluate thousands of times in the search).

Optionally with a *local correction*: the fit's residuals at its training points, smoothed by a
Gaussian kernel (Nadaraya-Watson, shrunk toward zero by a prior weight). Near a measured point
the prediction moves toward that measurement; far from every point it is the polynomial alone.
This is GSPO's Eq. 2 ("the nearest representative op") and the regression of its Section 3.3
in one: a global polynomial cannot bend at a cache or kernel boundary, a measured neighbour can.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

__all__ = ["Poly", "Local", "fit_poly"]


@dataclass(frozen=True)
class Local:
    """Residuals of the fit at its training points (standardized inputs), and the kernel."""

    points: tuple[tuple[float, ...], ...]
    residuals: tuple[float, ...]
    bandwidth: float  # in standardized units
    prior: float  # weight of "no correction" (a point at distance 0 has weight 1)

    @cached_property
    def _arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(self.points, dtype=np.float64), np.asarray(self.residuals, dtype=np.float64)

    def __call__(self, z: Sequence[float]) -> float:
        points, residuals = self._arrays
        d2 = ((points - np.asarray(z, dtype=np.float64)) ** 2).sum(axis=1)
        w = np.exp(-d2 / (2.0 * self.bandwidth**2))
        return float(w @ residuals / (w.sum() + self.prior))

    def to_json(self) -> dict:
        """The correction as JSON."""
        return {"points": [list(p) for p in self.points], "residuals": list(self.residuals),
                "bandwidth": self.bandwidth, "prior": self.prior}

    @classmethod
    def from_json(cls, d: dict) -> Local:
        """The correction stored by :meth:`to_json`."""
        return cls(tuple(tuple(float(v) for v in p) for p in d["points"]), tuple(float(r) for r in d["residuals"]),
                   float(d["bandwidth"]), float(d["prior"]))


@dataclass(frozen=True)
class Poly:
    """A fitted polynomial of standardized features (with an optional local correction)."""

    powers: tuple[tuple[int, ...], ...]
    coef: tuple[float, ...]
    intercept: float
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    local: Local | None = None
    #: Per input, the range the fit saw; inputs outside it are clipped to it (``None``: a fit
    #: allowed to extrapolate, as the op fits must to larger ops).
    bounds: tuple[tuple[float, float], ...] | None = None

    def __call__(self, x: Sequence[float]) -> float:
        if self.bounds is not None:
            x = [min(max(a, lo), hi) for a, (lo, hi) in zip(x, self.bounds)]
        z = [(a - m) / s for a, m, s in zip(x, self.mean, self.scale)]
        total = self.intercept
        for p, c in zip(self.powers, self.coef):
            term = c
            for zi, e in zip(z, p):
                if e:
                    term *= zi**e
            total += term
        if self.local is not None:
            total += self.local(z)
        return total

    def to_json(self) -> dict:
        """The polynomial as JSON."""
        d = {"powers": [list(p) for p in self.powers], "coef": list(self.coef), "intercept": self.intercept,
             "mean": list(self.mean), "scale": list(self.scale)}
        if self.local is not None:
            d["local"] = self.local.to_json()
        if self.bounds is not None:
            d["bounds"] = [list(b) for b in self.bounds]
        return d

    @classmethod
    def from_json(cls, d: dict) -> Poly:
        """The polynomial stored by :meth:`to_json`."""
        return cls(tuple(tuple(int(e) for e in p) for p in d["powers"]), tuple(float(c) for c in d["coef"]),
                   float(d["intercept"]), tuple(float(v) for v in d["mean"]), tuple(float(v) for v in d["scale"]),
                   Local.from_json(d["local"]) if d.get("local") else None,
                   tuple((float(lo), float(hi)) for lo, hi in d["bounds"]) if d.get("bounds") else None)


def fit_poly(x: Sequence[Sequence[float]], y: Sequence[float], degree: int = 2, alpha: float = 1e-3,
             bandwidth: float | None = None, prior: float = 0.5, clip: bool = False) -> Poly:
    """Fit ``y ~ poly(x)`` (standardized inputs, ridge penalty ``alpha``); with ``bandwidth``, add
    the local correction of the residuals (see the module docstring); with ``clip``, the fit
    evaluates inputs outside the training range at its edge (:attr:`Poly.bounds`)."""
    from sklearn.linear_model import Ridge
    from sklearn.preprocessing import PolynomialFeatures

    xa = np.asarray(x, dtype=np.float64)
    ya = np.asarray(y, dtype=np.float64)
    mean = xa.mean(axis=0)
    scale = xa.std(axis=0)
    scale[scale == 0] = 1.0
    z = (xa - mean) / scale
    pf = PolynomialFeatures(degree, include_bias=False)
    zz = pf.fit_transform(z)
    model = Ridge(alpha=alpha).fit(zz, ya)
    local = None
    if bandwidth is not None:
        resid = ya - model.predict(zz)
        local = Local(tuple(tuple(float(v) for v in row) for row in z), tuple(float(r) for r in resid),
                      float(bandwidth), float(prior))
    bounds = tuple((float(lo), float(hi)) for lo, hi in zip(xa.min(axis=0), xa.max(axis=0))) if clip else None
    return Poly(tuple(tuple(int(e) for e in p) for p in pf.powers_), tuple(float(c) for c in model.coef_),
                float(model.intercept_), tuple(float(m) for m in mean), tuple(float(s) for s in scale), local,
                bounds)
