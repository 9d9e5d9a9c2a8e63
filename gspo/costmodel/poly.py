"""Degree-2 polynomial ridge regression, fitted with scikit-learn, stored and evaluated as plain
numbers (JSON-safe, and cheap to evaluate thousands of times in the search)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Poly", "fit_poly"]


@dataclass(frozen=True)
class Poly:
    powers: tuple[tuple[int, ...], ...]
    coef: tuple[float, ...]
    intercept: float
    mean: tuple[float, ...]
    scale: tuple[float, ...]

    def __call__(self, x: Sequence[float]) -> float:
        z = [(a - m) / s for a, m, s in zip(x, self.mean, self.scale)]
        total = self.intercept
        for p, c in zip(self.powers, self.coef):
            term = c
            for zi, e in zip(z, p):
                if e:
                    term *= zi**e
            total += term
        return total

    def to_json(self) -> dict:
        return {"powers": [list(p) for p in self.powers], "coef": list(self.coef), "intercept": self.intercept,
                "mean": list(self.mean), "scale": list(self.scale)}

    @classmethod
    def from_json(cls, d: dict) -> Poly:
        return cls(tuple(tuple(int(e) for e in p) for p in d["powers"]), tuple(float(c) for c in d["coef"]),
                   float(d["intercept"]), tuple(float(v) for v in d["mean"]), tuple(float(v) for v in d["scale"]))


def fit_poly(x: Sequence[Sequence[float]], y: Sequence[float], degree: int = 2, alpha: float = 1e-3) -> Poly:
    """Fit ``y ~ poly(x)`` (standardized inputs, ridge penalty ``alpha``)."""
    from sklearn.linear_model import Ridge
    from sklearn.preprocessing import PolynomialFeatures

    xa = np.asarray(x, dtype=np.float64)
    mean = xa.mean(axis=0)
    scale = xa.std(axis=0)
    scale[scale == 0] = 1.0
    z = (xa - mean) / scale
    pf = PolynomialFeatures(degree, include_bias=False)
    zz = pf.fit_transform(z)
    model = Ridge(alpha=alpha).fit(zz, np.asarray(y, dtype=np.float64))
    return Poly(tuple(tuple(int(e) for e in p) for p in pf.powers_), tuple(float(c) for c in model.coef_),
                float(model.intercept_), tuple(float(m) for m in mean), tuple(float(s) for s in scale))
