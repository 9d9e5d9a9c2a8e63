"""gspo over the real-world corpus: does every exported model optimize, stay equivalent, get faster?

Usage (after ``export.py`` wrote the models; gspo's own venv runs this)::

    .venv/bin/python benchmarks/realworld/run.py                     # every model: RESULTS.md, results.json
    .venv/bin/python benchmarks/realworld/run.py --models bert gpt2  # some (results merged into results.json)

Per model, in this order:

1. ``gspo.optimize`` on the exported file as a user would run it (``--time-budget``, default 90 s;
   dynamic dimensions get gspo's defaults), the output saved to a temporary folder. An error is
   the model's status, one line.
2. An independent equivalence check of the saved output against the exported file, on fresh
   valid random inputs (another seed than optimize's), with gspo's scale-aware criterion.
3. Timing: the exported file and the output, each in plain onnxruntime sessions at 1 and at 2
   intra-op threads (no spinning), interleaved in one process (rotating order, warm-up, medians).
   ``ort_ms`` and ``gspo_ms`` are each at its best thread setting; ``speedup`` is their ratio.
   An output that carries a stream schedule runs in gspo's executor, as ``gspo run`` runs it.

Writes ``results.json`` (one object per model) and ``RESULTS.md`` beside this file.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import shlex
import sys
import tempfile
import time
from pathlib import Path

import gspo
from gspo.costmodel import device_description
from gspo.errors import first_line
from gspo.ir import load
from gspo.runtime import (
    SessionConfig,
    interleaved,
    make_executor,
    make_session,
    random_inputs,
    run,
    runtime_version,
)
from gspo.runtime.executor import saved_schedule
from gspo.runtime.verify import verify
from gspo.search import optimize

HERE = Path(__file__).resolve().parent
MODELS = HERE / "models"
THREADS = (1, 2)


def _timed(original: Path, optimized: Path, runs: int) -> dict:
    """Interleaved medians of both files under plain onnxruntime at each thread setting."""
    g = load(original)
    feeds = random_inputs(g, seed=7)
    runners, closers = [], []
    result = load(optimized)
    streams = saved_schedule(result) is not None  # a schedule: run as gspo run runs it
    for graph, label in ((g, "ort"), (result, "gspo")):  # graphs: weights in external data stay in their files
        for t in THREADS:
            if label == "gspo" and streams:
                ex = make_executor(result, config=SessionConfig(intra_op_threads=t))
                closers.append(ex)
                runners.append((f"{label}@{t}", lambda ex=ex: ex.run(feeds)))
                continue
            s = make_session(graph, SessionConfig(intra_op_threads=t))
            run(s, feeds)
            runners.append((f"{label}@{t}", lambda s=s: s.run(None, feeds)))
    try:
        timings = {t.label: t.median for t in interleaved(runners, runs, 3)}
    finally:
        for ex in closers:
            ex.close()
    best = {lbl: min(v for k, v in timings.items() if k.startswith(lbl + "@")) for lbl in ("ort", "gspo")}
    threads = {lbl: min((v, k) for k, v in timings.items() if k.startswith(lbl + "@"))[1].split("@")[1]
               for lbl in ("ort", "gspo")}
    return {"ort_ms": best["ort"] * 1e3, "gspo_ms": best["gspo"] * 1e3, "ort_threads": int(threads["ort"]),
            "gspo_threads": int(threads["gspo"]), "timings_ms": {k: v * 1e3 for k, v in timings.items()}}


def _why(report: dict) -> str:
    """What the search tried, what the cost model predicted, what measurement decided."""
    tried = sum(len(p["candidates"]) for p in report["pieces_detail"])
    rejected = report["candidates_rejected_by_verification"]
    invalid = sum(report["invalid_rewrites"].values())
    est = report["estimated_before_ms"] / max(report["estimated_after_ms"], 1e-12)
    finals = ", ".join(f"{c['label']} {c['measured_ms']:.2f} ms" if c["measured_ms"] else f"{c['label']} rejected"
                       for c in report["final_candidates"])
    rules = sorted({r for p in report["pieces_detail"] for c in p["candidates"] for r in c["rules"]})
    parts = [f"{tried} piece options measured ({', '.join(rules) or 'no rule matched'})"]
    if invalid:
        parts.append(f"{invalid} invalid rewrites dropped")
    if rejected:
        parts.append(f"{rejected} rejected by verification")
    parts.append(f"cost model x{est:.3f} for the pick; whole model: {finals}")
    return "; ".join(parts)


def run_model(name: str, entry: dict, args, out_dir: Path) -> dict:
    path = MODELS / entry["file"]
    row = {"model": name, "exporter": entry["exporter"], "source": entry["source"], "status": "ok",
           "equivalent": False, "max_rel_err": None, "rules": {}, "ort_ms": None, "gspo_ms": None,
           "speedup": None, "search_s": None, "total_s": None, "chosen": None, "dynamic_dims": None, "why": ""}
    out = out_dir / f"{name}.gspo.onnx"
    start = time.perf_counter()
    try:
        result = optimize(path, time_budget=args.time_budget, jobs=args.jobs, seed=0,
                          backends=tuple(args.backends.split(",")))
        row["optimize_s"] = round(time.perf_counter() - start, 2)  # the call, loading included (--time-budget's count)
        result.save(out, overwrite=True)
        row["same_bytes"] = out.read_bytes() == path.read_bytes()
    except Exception as e:  # the model's status: one line
        row["status"] = f"{type(e).__name__}: {first_line(e)}"
        return row
    r = result.report
    row.update(rules=r["substitutions"], search_s=round(r["search_seconds"], 2), total_s=round(time.perf_counter() - start, 1),
               chosen=r["chosen"], dynamic_dims=r["dynamic_dims"], verdict=r["verdict"],
               estimated_speedup=r["estimated_before_ms"] / r["estimated_after_ms"],
               rejected=r["candidates_rejected_by_verification"], invalid_rewrites=sum(r["invalid_rewrites"].values()),
               notes=r["notes"], why=_why(r))
    try:
        check = verify(load(path), load(out), seed=101, runs=2)
        row["equivalent"] = check.equivalent
        row["max_rel_err"] = check.max_norm_rel
        row.update(_timed(path, out, args.runs))
    except Exception as e:
        row["status"] = f"check failed: {type(e).__name__}: {first_line(e)}"
        return row
    row["measured_ratio"] = row["ort_ms"] / row["gspo_ms"]
    # The same model runs at the same speed: its measured ratio is this run's noise, not a result
    # (the same file; or the input written again, as a model with external data is).
    row["unchanged"] = row["same_bytes"] or result.report["unchanged"]
    row["speedup"] = 1.0 if row["unchanged"] else row["measured_ratio"]
    return row


def _geomean(xs) -> float:
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def _noise(rows: list[dict]) -> str:
    """How far apart two timings of the same file came out in this run."""
    same = sorted(abs(math.log(r["measured_ratio"])) for r in rows
                  if (r.get("same_bytes") or r.get("unchanged")) and r.get("measured_ratio"))
    if not same:
        return "no model came back unchanged"
    pct = lambda x: f"{(math.exp(x) - 1) * 100:.1f}%"  # noqa: E731
    return f"median {pct(same[len(same) // 2])}, largest {pct(same[-1])} over {len(same)} unchanged models"


def write_markdown(rows: list[dict], meta: dict) -> str:
    ok = [r for r in rows if r["status"] == "ok"]
    failed = [r for r in rows if r["status"] != "ok"]
    bad = [r for r in ok if not r["equivalent"]]
    lines = [
        "# gspo on real exported models",
        "",
        f"Measured {meta['date']} on `{meta['machine']}`, onnxruntime {meta['onnxruntime']}, gspo {meta['gspo']}.",
        f"Command: `{meta['command']}` (models from `benchmarks/realworld/export.py` and `export_kinds.py`, "
        "random weights)." + (f" {meta['note']}" if meta.get("note") else ""),
        *_other_runs(rows, meta),
        "",
        f"**{len(rows)} models: {len(ok)} optimized, {len(failed)} failed, {len(bad)} not equivalent.** "
        f"Geometric-mean speedup over plain onnxruntime at its best thread setting: "
        f"**{_geomean(r['speedup'] for r in ok):.3f}x**.",
        "",
        "`ort_ms` / `gspo_ms`: medians of interleaved runs of the exported file and gspo's output in plain "
        "onnxruntime, each at its better of 1 and 2 intra-op threads. `max rel err`: the largest difference "
        "over an output's largest magnitude, on fresh random inputs. Where gspo handed the input back "
        "unchanged (`same file`), the speedup is 1 by construction and the geometric mean counts it so; "
        "the two timings of that one file are still measured, and their ratio is this run's noise floor: "
        + _noise(ok) + ".",
        "",
        "| model | exporter | status | equivalent | max rel err | ort ms | gspo ms | speedup | verdict | search s | optimize s | rules |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        fmt = lambda x, f: (f.format(x) if x is not None else "-")  # noqa: E731
        speedup = ("1 (same file)" if r.get("same_bytes") else "1 (unchanged)" if r.get("unchanged")
                   else fmt(r["speedup"], "{:.3f}"))
        rules = ", ".join(f"{k} {v}" for k, v in r["rules"].items()) or "-"
        lines.append(f"| {r['model']} | {r['exporter']} | {r['status'] if r['status'] == 'ok' else 'FAILED'} | "
                     f"{'yes' if r['equivalent'] else 'NO'} | {fmt(r['max_rel_err'], '{:.1e}')} | "
                     f"{fmt(r['ort_ms'], '{:.2f}')} | {fmt(r['gspo_ms'], '{:.2f}')} | {speedup} | "
                     f"{r.get('verdict', '-')} | {fmt(r['search_s'], '{:.1f}')} | {fmt(r.get('optimize_s'), '{:.1f}')} | "
                     f"{rules} |")
    if failed:
        lines += ["", "## Failures", ""] + [f"- **{r['model']}**: {r['status']}" for r in failed]
    lines += ["", "## Why, per model", "",
              "What the search tried, what the cost model predicted for the pick, and what the whole-model "
              "measurement decided (from `gspo optimize --report`).", ""]
    for r in rows:
        if r["status"] == "ok":
            lines.append(f"- **{r['model']}** ({r['chosen']}): {r['why']}")
    return "\n".join(lines) + "\n"


def _other_runs(rows: list[dict], meta: dict) -> list[str]:
    """Lines naming the runs that measured rows kept from before (``--models`` measures some again)."""
    this = _measured(meta)
    others = sorted({r.get("measured", PREVIOUS_RUN) for r in rows} - {this})
    if not others:
        return []
    return ["", "Rows not measured by this command come from: " + "; ".join(others) + " (`measured` in results.json)."]


#: The run that measured the rows recorded before each row named its own run.
PREVIOUS_RUN = ("2026-11-24 on cpu:Intel(R) Xeon(R) Processor:2c (x86_64): "
                "`.venv/bin/python benchmarks/realworld/run.py --time-budget 60 --runs 20`")


def _measured(meta: dict) -> str:
    """The run that measured a row: its date, machine and command."""
    return f"{meta['date']} on {meta['machine']}: `{meta['command']}`"


def _meta(argv) -> dict:
    return {"date": datetime.date.today().isoformat(), "machine": f"{device_description('cpu')} ({platform.machine()})",
            "onnxruntime": runtime_version(), "gspo": gspo.__version__,
            "command": ".venv/bin/python benchmarks/realworld/run.py " + shlex.join(sys.argv[1:] if argv is None else argv)}


def _render(args, argv) -> int:
    """RESULTS.md again from results.json (rows measured before ``same_bytes`` was recorded: an
    output chosen as ``original`` is the input written back unchanged)."""
    rows = json.loads((HERE / "results.json").read_text())
    for r in rows:
        if r["status"] == "ok" and "same_bytes" not in r:
            r["same_bytes"] = r["chosen"] == "original"
            r["measured_ratio"] = r["ort_ms"] / r["gspo_ms"]
            r["speedup"] = 1.0 if r["same_bytes"] else r["measured_ratio"]
    meta = json.loads((HERE / "meta.json").read_text()) if (HERE / "meta.json").exists() else _meta(argv)
    (HERE / "results.json").write_text(json.dumps(rows, indent=1) + "\n")
    (HERE / "RESULTS.md").write_text(write_markdown(rows, meta))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", help="Only these (default: every model in models/manifest.json).")
    ap.add_argument("--time-budget", type=float, default=90.0, help="gspo optimize --time-budget per model.")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--runs", type=int, default=30, help="Timing rounds per configuration.")
    ap.add_argument("--backends", default="ort",
                    help="gspo optimize --backends (default: onnxruntime only, so the output is a plain ONNX "
                         "file compared with plain onnxruntime; benchmarks/placement/ compares backends).")
    ap.add_argument("--render", action="store_true", help="Only rewrite RESULTS.md from results.json.")
    args = ap.parse_args(argv)
    if args.render:
        return _render(args, argv)
    manifest_path = MODELS / "manifest.json"
    if not manifest_path.exists():
        print("run.py: no models; run benchmarks/realworld/export.py first", file=sys.stderr)
        return 2
    manifest = json.loads(manifest_path.read_text())
    names = args.models or sorted(manifest)
    unknown = [n for n in names if n not in manifest]
    if unknown:
        print(f"run.py: not in the corpus: {', '.join(unknown)}", file=sys.stderr)
        return 2
    results_path = HERE / "results.json"
    old = {r["model"]: r for r in json.loads(results_path.read_text())} if results_path.exists() and args.models else {}
    meta = _meta(argv)
    (HERE / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            row = run_model(name, manifest[name], args, Path(tmp))
            row["measured"] = _measured(meta)
            old[name] = row
            sp = f"x{row['speedup']:.3f}" if row["speedup"] else "-"
            print(f"{name:<24} {row['status'][:80]:<10} equivalent={row['equivalent']} {sp} {row['rules']}", flush=True)
            rows = [old[n] for n in sorted(old)]  # written after every model: an interrupted run keeps what it measured
            results_path.write_text(json.dumps(rows, indent=1) + "\n")
            (HERE / "RESULTS.md").write_text(write_markdown(rows, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
