"""``gspo regress SET --estimate``: the deterministic check, without timing.

Each model is optimized with a fixed seed, a fixed search budget, no time budget and selection
by the cost model, so its *estimated* speedup is reproducible for a fixed profile. A model fails
when optimize refuses its result (not equivalent) or its estimated speedup is more than
``tolerance`` below the baseline's. It guards the search and the rules, not the latency users
get: that is the measured gate's job (:mod:`gspo.regress.gate`).

The baseline is checked in full before use: a value that is not a finite positive number, a
missing field or a foreign format is a one-line error, never a pass.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from gspo.errors import GspoError, read_json
from gspo.outputs import atomic_write, check_outputs
from gspo.regress.modelset import ModelSet, load_modelset

__all__ = ["EstimateRow", "TOLERANCE", "check_baseline_output", "known_baseline", "read_baseline", "run_estimate",
           "write_baseline"]

TOLERANCE = 0.02
VERSION = 1
_FIXED = {"select": "estimated", "time_budget": None, "timing_runs": 5, "piece_timing_budget": 0.2,
          "final_timing_budget": 1.0, "backends": ("ort",)}


@dataclass(frozen=True)
class EstimateRow:
    """One model's result: status, estimated and measured speedups, substitutions."""

    name: str
    status: str  # "ok", "REGRESSED", "NOT EQUIVALENT", "NO BASELINE", "ERROR"
    estimated_speedup: float | None
    baseline_speedup: float | None
    measured_speedup: float | None
    substitutions: dict
    baseline_substitutions: dict | None
    detail: str = ""

    def to_json(self) -> dict:
        """The row as JSON."""
        return self.__dict__.copy()


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def read_baseline(path: str | os.PathLike) -> dict:
    """The baseline at ``path``, checked (a one-line GspoError when it is not a valid one)."""
    p = Path(path)
    data = read_json(p, "baseline")
    if not isinstance(data, dict) or data.get("version") != VERSION:
        found = data.get("version") if isinstance(data, dict) else None
        raise GspoError(f"{p}: not a gspo baseline of format {VERSION} (found version {json.dumps(found)})")
    models = data.get("models")
    if not isinstance(models, dict):
        raise GspoError(f"{p}: corrupt baseline (\"models\" must be an object of model name -> entry)")
    for name, entry in models.items():
        if not isinstance(entry, dict) or "estimated_speedup" not in entry:
            raise GspoError(f"{p}: corrupt baseline (model {name!r} has no estimated_speedup)")
        if not _positive(entry["estimated_speedup"]):
            raise GspoError(f"{p}: corrupt baseline (model {name!r}: estimated_speedup "
                            f"{json.dumps(entry['estimated_speedup'])} is not a finite positive number)")
        subs = entry.get("substitutions", {})
        if not isinstance(subs, dict) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                                 for v in subs.values()):
            raise GspoError(f"{p}: corrupt baseline (model {name!r}: substitutions must map rule names to counts)")
    return data


def known_baseline(path: str | os.PathLike) -> dict:
    """The baseline at ``path`` (:func:`read_baseline`), or an empty one where there is none yet.

    Raises:
        GspoError: it cannot be read or is not a baseline (one line).
    """
    p = Path(path)
    try:
        there = p.exists()
    except OSError as e:  # a name too long for the file system, ...
        raise GspoError(f"{p}: cannot read the baseline ({e.strerror or e})") from None
    return read_baseline(p) if there else {"models": {}}


def check_baseline_output(path: str | os.PathLike, mset: ModelSet, force: bool) -> None:
    """Refuse, before any work, a baseline to write that is an input (the set, a model, its inputs)
    or an existing file that is not a baseline (unless ``force``); an existing baseline is replaced."""
    p = Path(path)
    check_outputs({"--baseline": p}, mset.reads(), force=True)
    if p.exists() and not force:
        try:
            read_baseline(p)
        except GspoError:
            raise GspoError(f"{p}: exists and is not a gspo baseline; use --force to replace it") from None


def _row(spec, ref: dict | None, tolerance: float) -> EstimateRow:
    from gspo.rules import DEFAULT_RULES
    from gspo.search import OptimizeError, optimize
    from gspo.zoo import build

    ref_speed = ref["estimated_speedup"] if ref else None
    ref_subs = ref.get("substitutions", {}) if ref else None
    opts = {"budget": 8, "seed": 0, "jobs": 1, **spec.options, **_FIXED}
    if spec.exclude_rules:
        opts["rules"] = tuple(r for r in DEFAULT_RULES if r.name not in spec.exclude_rules)
    model = build(spec.zoo, spec.size, spec.zoo_seed) if spec.zoo else spec.path
    try:
        r = optimize(model, input_shapes=spec.input_shapes or None, **opts).report
    except OptimizeError as e:
        return EstimateRow(spec.name, "NOT EQUIVALENT", None, ref_speed, None, {}, ref_subs, str(e))
    est = r.estimated_before_ms / r.estimated_after_ms
    measured = r.latency_before_ms / r.latency_after_ms
    if ref is None:
        status, detail = "NO BASELINE", "run with --update to record one"
    elif est < ref_speed * (1 - tolerance):
        status, detail = "REGRESSED", f"estimated speedup {est:.4f} < baseline {ref_speed:.4f}"
    else:
        status, detail = "ok", ""
    return EstimateRow(spec.name, status, est, ref_speed, measured, r.substitutions, ref_subs, detail)


def run_estimate(modelset: str | os.PathLike | ModelSet, baseline: dict | None, tolerance: float = TOLERANCE,
                 progress=None) -> list[EstimateRow]:
    """Optimize every model of ``modelset`` and compare its estimated speedup with ``baseline``."""
    mset = modelset if isinstance(modelset, ModelSet) else load_modelset(modelset)
    known = (baseline or {}).get("models", {})
    rows = []
    for i, spec in enumerate(mset.models):
        rows.append(_row(spec, known.get(spec.name), tolerance))
        if progress:
            progress(i + 1, len(mset.models), spec.name)
    return rows


def write_baseline(path: str | os.PathLike, rows: list[EstimateRow], profile_device: str = "") -> Path:
    """Write ``rows``' estimated speedups and substitutions as the baseline at ``path``."""
    data = {"version": VERSION, "profile_device": profile_device,
            "models": {r.name: {"estimated_speedup": r.estimated_speedup, "substitutions": r.substitutions}
                       for r in rows if r.estimated_speedup is not None}}
    return atomic_write(path, json.dumps(data, indent=1, sort_keys=True) + "\n", overwrite=True)
