"""gpu_check's precision part: ``gspo optimize --device cuda --cuda-runtime torch --precision
fp16,bf16,tf32 --max-error nmse=1e-3`` of ResNet-50, BERT and Inception-v3 (the zoo's, full size,
batch 1), each with :data:`SAMPLES` random-input calibration and as many validation samples.

Per model: the seconds the optimize took, its pick (the precision block's ``chosen``) and the
pick's error per output on the validation data (the block's, what ``--max-error`` holds), then the
source at fp32, the source marked for TF32 (:func:`gspo.precision.floats.with_tf32`: the torch
executor allows TF32 around its runs) and the pick, each replayed from a CUDA graph and timed
interleaved (CUDA events, medians): the pick's speedup over fp32 and over TF32, and each one's
outputs against onnxruntime's CPU provider on inputs optimize never saw.
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path

__all__ = ["BUDGET_S", "MAX_ERROR", "MODELS", "PRECISIONS", "SAMPLES", "step_precision"]

MODELS = ("resnet50", "bert", "inception_v3")
PRECISIONS = "fp16,bf16,tf32"
MAX_ERROR = "nmse=1e-3"
#: Calibration samples and as many validation samples (random inputs, seeds apart).
SAMPLES = 8
#: Seconds of each ``gspo optimize`` (the exact search and the precision fit share them).
BUDGET_S = 100.0
#: Rehearsal (torch's CPU device, tiny models): samples and seconds per optimize.
REHEARSAL_SAMPLES, REHEARSAL_BUDGET_S = 2, 20.0


def _folder(path: Path, graph, seeds) -> str:
    from gspo.runtime import random_inputs
    from gspo.runtime.npz import write_npz

    path.mkdir(parents=True, exist_ok=True)
    for s in seeds:
        with open(path / f"{s}.npz", "wb") as f:
            write_npz(f, random_inputs(graph, seed=s))
    return str(path)


def _optimize(ctx, name: str, graph) -> tuple[dict, object]:
    """gspo's optimize of ``graph`` with the precision kinds of the torch runtime: the row's
    ``optimize`` entry (seconds, pick, error per output on the validation data) and the result."""
    import gspo
    from gspo.ir import save

    n = REHEARSAL_SAMPLES if ctx.rehearse else SAMPLES
    path = ctx.work / f"precision_{name}.onnx"
    save(graph, path)
    cal = _folder(ctx.work / f"{name}_cal", graph, range(n))
    val = _folder(ctx.work / f"{name}_val", graph, range(1000, 1000 + n))
    start = time.perf_counter()
    res = gspo.optimize(str(path), device="cuda", cuda_runtime="torch", profile=ctx.profile_path(),
                        force_profile=ctx.foreign_profile(), seed=0,
                        time_budget=REHEARSAL_BUDGET_S if ctx.rehearse else BUDGET_S,
                        precision=PRECISIONS, max_error=MAX_ERROR, calibration=cal, validation=val)
    block = res.report["precision"] or {}
    validation = block.get("validation") or {}
    row = {"seconds": round(time.perf_counter() - start, 1), "chosen": block.get("chosen"),
           "holds": validation.get("holds"), "error_per_output": validation.get("outputs"),
           "fp32_validation": (block.get("fp32_validation") or {}).get("outputs"),
           "kinds": [{k: v for k, v in kind.items() if k in ("kind", "median_ms", "dropped", "pieces_reduced")}
                     for kind in block.get("kinds", [])],
           "notes": block.get("notes", []), "samples": n, "exact_pick": res.report.chosen}
    return row, res


def _row(ctx, check, name: str) -> dict:
    """One model: its optimize, then fp32 / TF32 / the pick timed (``check``: gpu_check's module)."""
    from gspo.precision.floats import with_tf32
    from gspo.runtime import random_inputs
    from gspo.zoo import build

    g = build(name, ctx.size_full)
    row: dict = {"model": name, "size": ctx.size_full, "nodes": len(g.nodes)}
    row["optimize"], res = _optimize(ctx, name, g)
    feeds = random_inputs(g, seed=1)  # not a sample optimize saw (those are 0.. and 1000..)
    ref = check.cpu_reference(g, feeds)
    built = {"fp32": check.executor(g, cuda_graph=True), "tf32": check.executor(with_tf32(g), cuda_graph=True),
             "pick": check.executor(res.graph, res.schedule, cuda_graph=True)}
    try:
        row["tf32_on"] = {label: ex.config.tf32 for label, ex in built.items()}
        row["vs_cpu"] = {label: check.compare(ref, ex.run(feeds)) for label, ex in built.items()}
        row["graph_refusal"] = {label: ex.graph_refusal for label, ex in built.items() if ex.graph_refusal}
        times = check.interleave([(label, check.timed(ex, feeds)) for label, ex in built.items()], ctx.runs)
    finally:
        for ex in built.values():
            ex.close()
    row["median_ms"] = {k: v["median_ms"] for k, v in times.items()}
    row["spread"] = {k: v["spread"] for k, v in times.items()}
    pick = row["median_ms"]["pick"]
    row["speedup_over_fp32"] = row["median_ms"]["fp32"] / pick
    row["speedup_over_tf32"] = row["median_ms"]["tf32"] / pick
    row["ok"] = bool(row["vs_cpu"]["fp32"]["ok"] and row["optimize"]["holds"] is not False
                     and row["tf32_on"] == {"fp32": False, "tf32": True, "pick": row["tf32_on"]["pick"]})
    return row


def step_precision(ctx, check) -> dict:
    """Reduced precision on the GPU: fp16, bf16, TF32 within nmse=1e-3 against fp32 and TF32."""
    rows = []
    for name in MODELS:
        if rows and ctx.left() < 60:
            rows.append({"model": name, "ok": False, "skipped": f"deadline: {ctx.left():.0f} s left"})
            continue
        try:
            rows.append(_row(ctx, check, name))
        except Exception as e:  # one model's failure is recorded, the others still run
            rows.append({"model": name, "ok": False, "error": f"{type(e).__name__}: {e}",
                         "traceback": traceback.format_exc()[-3000:]})
    return {"ok": bool(rows) and all(r["ok"] for r in rows), "models": rows, "profile": ctx.profile_path(),
            "precision": PRECISIONS, "max_error": MAX_ERROR, "runs": ctx.runs}


def _ms(row: dict, label: str) -> str:
    v = row.get("median_ms", {}).get(label)
    return f"{v:.3f}" if v is not None else "-"


def _errors(row: dict) -> str:
    outputs = row.get("optimize", {}).get("error_per_output") or {}
    return ", ".join(f"{name} nmse {m.get('nmse', float('nan')):.2e}" for name, m in outputs.items()) or "-"


def markdown(step: dict) -> list[str]:
    """The precision part's table and notes."""
    lines = ["", f"## Reduced precision on the GPU: --precision {step.get('precision')} --max-error "
                 f"{step.get('max_error')}, median ms (replayed from CUDA graphs)", "",
             "`fp32`: the source, TF32 off; `tf32`: the source with TF32 matrix products and convolutions; `pick`: "
             "gspo optimize's output (its precision block's `chosen`); errors per output on the validation data, "
             "as the block measured them.", "",
             "| model | fp32 | tf32 | pick | chosen | over fp32 | over tf32 | error on validation | optimize s |",
             "|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for r in step.get("models", []):
        if "median_ms" not in r:
            lines.append(f"| {r['model']} | " + (r.get("error") or r.get("skipped") or "failed")[:200] + " |")
            continue
        o = r["optimize"]
        lines.append(f"| {r['model']} | {_ms(r, 'fp32')} | {_ms(r, 'tf32')} | {_ms(r, 'pick')} | {o.get('chosen')} | "
                     f"{r['speedup_over_fp32']:.2f}x | {r['speedup_over_tf32']:.2f}x | {_errors(r)} | {o['seconds']} |")
        notes += [f"- {r['model']}: {n}" for n in o.get("notes", [])]
        notes += [f"- {r['model']}: CUDA graph of {k}: {v}" for k, v in r.get("graph_refusal", {}).items()]
    return lines + ([""] + notes if notes else [])
