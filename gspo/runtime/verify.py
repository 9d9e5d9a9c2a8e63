"""Numerical equivalence of two models on the same inputs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.runtime.session import SessionConfig, make_session, random_inputs, run

__all__ = ["OutputDiff", "VerifyResult", "compare_outputs", "verify"]


@dataclass(frozen=True)
class OutputDiff:
    name: str
    max_abs: float
    max_rel: float
    ok: bool


@dataclass(frozen=True)
class VerifyResult:
    equivalent: bool
    outputs: tuple[OutputDiff, ...] = field(default_factory=tuple)

    @property
    def worst(self) -> OutputDiff | None:
        bad = [o for o in self.outputs if not o.ok]
        return bad[0] if bad else None


def _diff(name: str, a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> OutputDiff:
    if a.shape != b.shape:
        return OutputDiff(name, float("inf"), float("inf"), False)
    if a.dtype.kind not in "fc":
        same = bool(np.array_equal(a, b))
        return OutputDiff(name, 0.0 if same else float("inf"), 0.0 if same else float("inf"), same)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    nan_a, nan_b = np.isnan(a64), np.isnan(b64)
    if not np.array_equal(nan_a, nan_b):
        return OutputDiff(name, float("nan"), float("nan"), False)
    both = ~nan_a
    with np.errstate(invalid="ignore", over="ignore"):
        same_inf = (a64 == b64) & both
        err = np.where(same_inf, 0.0, np.abs(a64 - b64))
        err = np.where(both, err, 0.0)
        rel = err / np.maximum(np.abs(a64), np.finfo(np.float64).tiny)
    max_abs = float(err.max()) if err.size else 0.0
    max_rel = float(np.where(err > 0, rel, 0.0).max()) if err.size else 0.0
    ok = bool(np.all(err <= atol + rtol * np.abs(np.where(both, a64, 0.0))))
    return OutputDiff(name, max_abs, max_rel, ok)


def compare_outputs(
    ref: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray], rtol: float, atol: float
) -> VerifyResult:
    """Compare outputs by name: ``|got - ref| <= atol + rtol * |ref|`` everywhere; NaNs must match."""
    if set(ref) != set(got):
        raise GspoError(
            f"the models have different outputs: {sorted(ref)} vs {sorted(got)}"
        )
    diffs = tuple(_diff(name, ref[name], got[name], rtol, atol) for name in ref)
    return VerifyResult(all(d.ok for d in diffs), diffs)


def verify(
    reference: Graph,
    candidate: Graph,
    rtol: float = 1e-3,
    atol: float = 1e-4,
    seed: int = 0,
    runs: int = 1,
    inputs: Mapping[str, np.ndarray] | None = None,
    config: SessionConfig = SessionConfig(),
) -> VerifyResult:
    """Run both graphs with onnxruntime on the same inputs and compare every output.

    With ``inputs`` given they are used once; otherwise ``runs`` sets of random inputs are drawn
    from seeds ``seed, seed+1, ...`` and the worst error per output is reported.
    """
    ref_in = {v.name: (v.dtype, v.shape) for v in reference.inputs}
    cand_in = {v.name: (v.dtype, v.shape) for v in candidate.inputs}
    if ref_in != cand_in:
        raise GspoError("the models have different inputs (names, types or shapes)")
    s_ref, s_cand = make_session(reference, config), make_session(candidate, config)
    feeds_list = [inputs] if inputs is not None else [random_inputs(reference, seed + i) for i in range(runs)]
    worst: dict[str, OutputDiff] = {}
    for feeds in feeds_list:
        res = compare_outputs(run(s_ref, feeds), run(s_cand, feeds), rtol, atol)
        for d in res.outputs:
            old = worst.get(d.name)
            if old is None or (not d.ok and old.ok) or (d.ok == old.ok and d.max_abs > old.max_abs):
                worst[d.name] = d
    diffs = tuple(worst.values())
    return VerifyResult(all(d.ok for d in diffs), diffs)
