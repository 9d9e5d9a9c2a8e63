"""``gspo regress``: guard a model set against optimization regressions in CI.

Each model of a model set (JSON) is optimized with a fixed seed, a fixed search budget, no time
budget and selection by the cost model, so its *estimated* speedup is reproducible for a fixed
profile. A model fails when it is not equivalent (optimize refuses it) or when its estimated
speedup is more than ``tolerance`` below the baseline's. Measured latencies are reported but do
not gate: shared machines are noisy.

Model set::

    {"version": 1,
     "options": {"budget": 8, "seed": 0},
     "models": [{"name": "nasrnn", "zoo": "nasrnn", "size": "tiny"},
                {"name": "mine", "path": "models/mine.onnx", "input_shapes": {"x": [1, 3, 224, 224]},
                 "options": {"threshold": 32}, "exclude_rules": ["SplitConv"]}]}
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from gspo.errors import GspoError
from gspo.ir import load
from gspo.outputs import atomic_write
from gspo.rules import DEFAULT_RULES
from gspo.search import OptimizeError, optimize
from gspo.zoo import build

__all__ = ["RegressRow", "load_modelset", "run_regress", "write_baseline", "TOLERANCE"]

TOLERANCE = 0.02
VERSION = 1
_FIXED = {"select": "estimated", "time_budget": None, "timing_runs": 5, "piece_timing_budget": 0.2,
          "final_timing_budget": 1.0, "backends": ("ort",)}


@dataclass(frozen=True)
class RegressRow:
    """One model's regression result: status, estimated and measured speedups, substitutions."""

    name: str
    status: str  # "ok", "REGRESSED", "NOT EQUIVALENT", "NO BASELINE"
    estimated_speedup: float | None
    baseline_speedup: float | None
    measured_speedup: float | None
    substitutions: dict
    baseline_substitutions: dict | None
    detail: str = ""

    def to_json(self) -> dict:
        """The row as JSON."""
        return self.__dict__.copy()


def _read_json(path: Path, what: str) -> dict:
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise GspoError(f"{path}: cannot read the {what} ({e.strerror or e})") from None
    except (ValueError, RecursionError):
        raise GspoError(f"{path}: the {what} is not valid JSON") from None
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise GspoError(f"{path}: not a gspo {what} (expected a JSON object with \"version\": {VERSION})")
    return data


def load_modelset(path: str | Path) -> tuple[Path, dict]:
    """The model set at ``path``: its folder and its parsed contents (a GspoError when invalid)."""
    p = Path(path)
    data = _read_json(p, "model set")
    models = data.get("models")
    if not isinstance(models, list) or not models:
        raise GspoError(f"{p}: the model set lists no models")
    names = set()
    for i, m in enumerate(models):
        if not isinstance(m, dict) or not isinstance(m.get("name"), str):
            raise GspoError(f"{p}: model #{i} needs a \"name\"")
        if m["name"] in names:
            raise GspoError(f"{p}: model name {m['name']!r} appears twice")
        names.add(m["name"])
        if ("zoo" in m) == ("path" in m):
            raise GspoError(f"{p}: model {m['name']!r} needs exactly one of \"zoo\" and \"path\"")
    return p, data


def _graph(base: Path, m: dict):
    if "zoo" in m:
        return build(m["zoo"], m.get("size", "tiny"), m.get("seed", 0))
    shapes = {k: tuple(v) for k, v in (m.get("input_shapes") or {}).items()}
    return load(base.parent / m["path"], shapes)


def _options(data: dict, m: dict) -> dict:
    opts = {"budget": 8, "seed": 0, "jobs": 1, **data.get("options", {}), **m.get("options", {}), **_FIXED}
    exclude = set(data.get("exclude_rules", [])) | set(m.get("exclude_rules", []))
    unknown = exclude - {r.name for r in DEFAULT_RULES}
    if unknown:
        raise GspoError(f"unknown rule(s) in exclude_rules: {', '.join(sorted(unknown))}")
    if exclude:
        opts["rules"] = tuple(r for r in DEFAULT_RULES if r.name not in exclude)
    return opts


def run_regress(modelset: str | Path, baseline: dict | None, tolerance: float = TOLERANCE, progress=None) -> list[RegressRow]:
    """Optimize every model of ``modelset`` and compare its estimated speedup with ``baseline``."""
    base, data = load_modelset(modelset)
    known = (baseline or {}).get("models", {})
    rows = []
    for i, m in enumerate(data["models"]):
        name = m["name"]
        ref = known.get(name)
        try:
            result = optimize(_graph(base, m), **_options(data, m))
        except OptimizeError as e:
            rows.append(RegressRow(name, "NOT EQUIVALENT", None, ref and ref["estimated_speedup"], None, {},
                                   ref and ref["substitutions"], str(e)))
            continue
        except TypeError as e:
            raise GspoError(f"model {name!r}: bad options ({e})") from None
        r = result.report
        est = r["estimated_before_ms"] / r["estimated_after_ms"]
        measured = r["latency_before_ms"] / r["latency_after_ms"]
        subs = r["substitutions"]
        if ref is None:
            status, detail = "NO BASELINE", "run with --update to record one"
        elif est < ref["estimated_speedup"] * (1 - tolerance):
            status, detail = "REGRESSED", f"estimated speedup {est:.4f} < baseline {ref['estimated_speedup']:.4f}"
        else:
            status, detail = "ok", ""
        rows.append(RegressRow(name, status, est, ref and ref["estimated_speedup"], measured, subs,
                               ref and ref["substitutions"], detail))
        if progress:
            progress(i + 1, len(data["models"]), name)
    return rows


def write_baseline(path: str | Path, rows: list[RegressRow], profile_device: str = "") -> Path:
    """Write ``rows``' estimated speedups and substitutions as the baseline at ``path``."""
    p = Path(path)
    data = {"version": VERSION, "profile_device": profile_device,
            "models": {r.name: {"estimated_speedup": r.estimated_speedup, "substitutions": r.substitutions}
                       for r in rows if r.estimated_speedup is not None}}
    atomic_write(p, json.dumps(data, indent=1, sort_keys=True) + "\n", overwrite=True)
    return p


def read_baseline(path: str | Path) -> dict:
    """The baseline stored at ``path`` (a GspoError when it is not one)."""
    p = Path(path)
    data = _read_json(p, "baseline")
    models = data.get("models")
    if not isinstance(models, dict) or not all(
        isinstance(v, dict) and isinstance(v.get("estimated_speedup"), (int, float)) for v in models.values()
    ):
        raise GspoError(f"{p}: corrupt baseline (each model needs an estimated_speedup)")
    return data
