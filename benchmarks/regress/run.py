"""Does the measured gate hold? False alarms on an unchanged set, a ~10% slowdown caught, a ~3% one not.

Usage (gspo's own venv; on a quiet machine; after benchmarks/realworld/export.py wrote the models)::

    .venv/bin/python benchmarks/regress/run.py                                  # the real set, 5 runs each
    .venv/bin/python benchmarks/regress/run.py --models squeezenet,resnet50 --runs 3 --rounds 30
    .venv/bin/python benchmarks/regress/run.py --zoo squeezenet,nasrnn --out /tmp/dry  # a dry run on tiny zoo models

Steps, each through the command line a CI job would run (``gspo regress``), with ``--json`` read back:

1. ``gspo regress SET --record WORK/baseline``: optimize every model once (the baseline artifacts).
2. ``--runs`` consecutive ``gspo regress SET --against WORK/baseline`` of the unchanged set: every
   ``REGRESSED`` is a false alarm.
3. The same with one model (``--variant``, default the set's first) replaced by an equivalent
   variant about ``--slowdown`` (10%) slower: each run must say ``REGRESSED`` for it.
4. The same with a variant about ``--small`` (3%) slower: never ``REGRESSED`` at the default
   threshold (5%).

The variants are the model with a chain of ``t = Max(t, t)`` on its first float tensor: each link
is one exact pass over the tensor (``Max(t, t) == t``), which neither gspo's rules nor onnxruntime
remove. The chain's length is tuned to the slowdown asked for: the cost of one link and the
baseline artifact's latency are timed interleaved (through gspo's timing harness), and the chain
gets ``slowdown * latency / link`` links. The slowdown the gate then measures (candidate against
baseline) is reported per run.

Writes ``RESULTS.md`` and ``results.json`` into ``--out`` (default: this folder), with the
commands, the versions, the machine, the load average before and after, and per model the
verdicts and the wall time of a run; and the first unchanged run's own outputs (``against.json``
with every round's samples, ``against.md``, ``against.xml``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnx
from onnx import TensorProto, helper, shape_inference

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
REALWORLD = ROOT / "benchmarks" / "realworld" / "modelset.json"
GSPO = [sys.executable, "-m", "gspo"]
#: Links timed to find the cost of one.
PROBE_LINKS = 20


# --------------------------------------------------------------------------- the set
def _subset(args, work: Path) -> Path:
    """The model set to use, written into ``work`` with absolute paths (a subset, or zoo models as files)."""
    if args.zoo:
        from gspo.ir import serialize
        from gspo.zoo import build

        models = []
        for name in args.zoo.split(","):
            path = work / f"{name}.onnx"
            path.write_bytes(serialize(build(name, "tiny", 0)))
            models.append({"name": name, "path": str(path)})
        data = {"version": 1, "options": {"budget": 4, "jobs": 1, "use_streams": False, "backends": ["ort"],
                                          "time_budget": 20}, "models": models}
    else:
        source = Path(args.modelset)
        data = json.loads(source.read_text())
        for m in data["models"]:
            if "path" in m:
                m["path"] = str((source.parent / m["path"]).resolve())
        if args.models:
            keep = args.models.split(",")
            data["models"] = [m for m in data["models"] if m["name"] in keep]
            missing = set(keep) - {m["name"] for m in data["models"]}
            if missing:
                sys.exit(f"run.py: not in {source}: {', '.join(sorted(missing))}")
    data.setdefault("gate", {})
    if args.rounds:
        data["gate"]["rounds"] = args.rounds
    out = work / "set.json"
    out.write_text(json.dumps(data, indent=1))
    return out


def _with_model(set_path: Path, name: str, model: Path, out: Path) -> Path:
    data = json.loads(set_path.read_text())
    for m in data["models"]:
        if m["name"] == name:
            m["path"] = str(model)
    out.write_text(json.dumps(data, indent=1))
    return out


# ---------------------------------------------------------------------- variants
def _first_float(model: onnx.ModelProto) -> str:
    """The first float tensor of the model: a float graph input, else the first float node output."""
    inferred = shape_inference.infer_shapes(model)
    for v in model.graph.input:
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            return v.name
    floats = {v.name for v in inferred.graph.value_info if v.type.tensor_type.elem_type == TensorProto.FLOAT}
    for node in model.graph.node:
        for out in node.output:
            if out in floats:
                return out
    raise SystemExit("run.py: the model has no float tensor to slow down")


def slower_variant(source: Path, links: int, out: Path) -> Path:
    """``source`` with ``links`` exact ``Max(t, t)`` passes on its first float tensor."""
    model = onnx.load(str(source))
    target = _first_float(model)
    last = target
    chain = []
    for i in range(links):
        chain.append(helper.make_node("Max", [last, last], [f"_regress_slow{i}"], name=f"_regress_slow{i}"))
        last = chain[-1].output[0]
    consumers = list(model.graph.node)
    for node in consumers:
        node.input[:] = [last if x == target else x for x in node.input]
    for o in model.graph.output:
        if o.name == target:
            raise SystemExit("run.py: the model's first float tensor is an output")
    at = next((i + 1 for i, n in enumerate(consumers) if target in n.output), 0)
    nodes = consumers[:at] + chain + consumers[at:]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    onnx.save(model, str(out))
    return out


def _timed(models: dict[str, tuple[Path, int | None]], rounds: int) -> dict[str, float]:
    """Median seconds of each model, timed interleaved through gspo's harness (``None``: saved schedule)."""
    from gspo.ir import load
    from gspo.regress.timing import Bench
    from gspo.runtime import random_inputs

    graphs = {k: (load(p), streams) for k, (p, streams) in models.items()}
    feeds = random_inputs(next(iter(graphs.values()))[0], 0)
    with Bench(graphs) as bench:
        t = bench.rounds(feeds, rounds)
    return {k: statistics.median(v) for k, v in t.items()}


def tuned_variant(source: Path, baseline_model: Path, slowdown: float, out: Path, rounds: int) -> dict:
    """A variant of ``source`` about ``slowdown`` slower than the baseline artifact: the chain's
    length from one link's cost, then corrected once by the variant's measured slowdown."""
    probe = slower_variant(source, PROBE_LINKS, out.with_suffix(".probe.onnx"))
    med = _timed({"plain": (source, 1), "probe": (probe, 1), "baseline": (baseline_model, None)}, rounds)
    probe.unlink()
    link = max(1e-7, (med["probe"] - med["plain"]) / PROBE_LINKS)
    links = max(1, round(slowdown * med["baseline"] / link))
    slower_variant(source, links, out)
    first = _timed({"variant": (out, 1), "baseline": (baseline_model, None)}, rounds)
    measured = first["variant"] / first["baseline"] - 1
    if measured > 0:
        links = max(1, round(links * slowdown / measured))
        slower_variant(source, links, out)
    return {"links": links, "link_us": link * 1e6, "baseline_ms": med["baseline"] * 1e3, "target": slowdown,
            "first_try_slowdown": measured}


# --------------------------------------------------------------------------- runs
def gspo(*args, log: Path) -> tuple[int, float]:
    """Run ``gspo ARGS``; its exit code and wall seconds (output appended to ``log``)."""
    began = time.perf_counter()
    with log.open("a") as f:
        f.write(f"$ gspo {' '.join(map(str, args))}\n")
        f.flush()
        code = subprocess.call(GSPO + [str(a) for a in args], stdout=f, stderr=subprocess.STDOUT)
    return code, time.perf_counter() - began


def against_runs(label: str, set_path: Path, baseline: Path, runs: int, work: Path, log: Path) -> list[dict]:
    """``runs`` consecutive ``--against`` runs; each run's exit code, wall time and per-model results."""
    out = []
    for k in range(runs):
        report = work / f"{label}-{k}.json"
        code, seconds = gspo("regress", set_path, "--against", baseline, "--json", report, "--markdown",
                             report.with_suffix(".md"), "--junit", report.with_suffix(".xml"), log=log)
        models = json.loads(report.read_text())["models"] if report.exists() else []
        out.append({"exit": code, "seconds": seconds, "models": [_brief(m) for m in models]})
        print(f"{label} run {k + 1}/{runs}: exit {code}, {seconds:.0f} s: "
              + ", ".join(f"{m['name']} {m['verdict']}" for m in models), flush=True)
    return out


def _brief(m: dict) -> dict:
    vb = m.get("vs_baseline") or {}
    return {"name": m["name"], "verdict": m["verdict"], "ratio": vb.get("ratio"), "low": vb.get("low"),
            "high": vb.get("high"), "rounds": vb.get("rounds"), "reused": m["reused"],
            "seconds": m["seconds"].get("total"), "optimize_s": m["seconds"].get("optimize")}


# ------------------------------------------------------------------------ results
def _count(runs: list[dict], name: str | None = None, verdict: str = "REGRESSED") -> int:
    return sum(m["verdict"] == verdict for r in runs for m in r["models"] if name is None or m["name"] == name)


def _per_model(phases: dict) -> list[str]:
    rows = ["| model | wall s per run (median) | optimize s | ratios to baseline, unchanged runs |", "|---|---|---|---|"]
    names = [m["name"] for m in phases["unchanged"][0]["models"]] if phases["unchanged"] else []
    for name in names:
        ms = [m for r in phases["unchanged"] for m in r["models"] if m["name"] == name]
        rec = [m for m in phases["record"]["models"] if m["name"] == name]
        ratios = ", ".join(f"{m['ratio']:.3f}" for m in ms if m["ratio"])
        rows.append(f"| {name} | {statistics.median(m['seconds'] for m in ms):.1f} | "
                    f"{rec[0]['seconds']:.1f} | {ratios} |" if rec else f"| {name} | - | - | {ratios} |")
    return rows


def _variant_rows(phases: dict, name: str) -> list[str]:
    rows = ["| change | links (tuned) | runs REGRESSED | verdicts | ratios to baseline |", "|---|---|---|---|---|"]
    for key in ("slowdown", "small"):
        runs, tune = phases[key], phases[f"{key}_tuning"]
        ms = [m for r in runs for m in r["models"] if m["name"] == name]
        verdicts = ", ".join(m["verdict"] for m in ms)
        ratios = ", ".join(f"{m['ratio']:.3f}" for m in ms if m["ratio"])
        rows.append(f"| ~{100 * tune['target']:g}% slower | {tune['links']} | {_count(runs, name)} of {len(runs)} | "
                    f"{verdicts} | {ratios} |")
    return rows


def write_results(out: Path, meta: dict, phases: dict) -> None:
    """RESULTS.md and results.json."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"meta": meta, "phases": phases}, indent=1) + "\n")
    unchanged = phases["unchanged"]
    n_models = len(unchanged[0]["models"]) if unchanged else 0
    name = meta["variant_model"]
    text = [
        f"# The measured gate on `{meta['modelset']}`", "",
        f"{meta['date']}, {meta['machine']}, gspo {meta['versions'].get('gspo')}, onnxruntime "
        f"{meta['versions'].get('onnxruntime')}, OpenVINO {meta['versions'].get('openvino')}; load average "
        f"{meta['load_before']} before, {meta['load_after']} after; {meta['total_s'] / 60:.1f} min in all.", "",
        f"Command: `{meta['command']}`", "",
        f"- Unchanged set, {len(unchanged)} consecutive `--against` runs: **{_count(unchanged)} REGRESSED** "
        f"(false alarms) of {len(unchanged) * n_models} model-runs; exit codes {[r['exit'] for r in unchanged]}.",
        f"- `{name}` replaced by a variant ~{100 * meta['slowdown']:g}% slower: REGRESSED in "
        f"**{_count(phases['slowdown'], name)} of {len(phases['slowdown'])}** runs.",
        f"- `{name}` replaced by a variant ~{100 * meta['small']:g}% slower: REGRESSED in "
        f"**{_count(phases['small'], name)} of {len(phases['small'])}** runs (threshold 5%).", "",
        "## Per model (unchanged runs)", "", *_per_model(phases), "",
        f"## The variants of `{name}`", "", *_variant_rows(phases, name), "",
        "The commands of every step are in the work folder's `log.txt`; every round's samples in its "
        "per-run reports (`--json`).", "",
    ]
    (out / "RESULTS.md").write_text("\n".join(text))


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--modelset", default=str(REALWORLD), help="the model set [default: the real-world one]")
    p.add_argument("--models", help="a subset of the set's models, comma-separated")
    p.add_argument("--zoo", help="instead: these zoo models at tiny size (a dry run), comma-separated")
    p.add_argument("--runs", type=int, default=5, help="consecutive --against runs per phase [default: 5]")
    p.add_argument("--rounds", type=int, help="interleaved rounds per model [default: the set's]")
    p.add_argument("--variant", help="the model replaced by slower variants [default: the set's first]")
    p.add_argument("--slowdown", type=float, default=0.10, help="the slowdown the gate must catch [default: 0.10]")
    p.add_argument("--small", type=float, default=0.03, help="the slowdown it must let pass [default: 0.03]")
    p.add_argument("--out", default=str(HERE), help="where RESULTS.md and results.json go [default: this folder]")
    p.add_argument("--work", help="the work folder (baseline, reports, log) [default: a temporary one, kept]")
    return p.parse_args()


def _phase_variant(key: str, slowdown: float, args, set_path: Path, base: Path, name: str, work: Path, log: Path,
                   phases: dict) -> None:
    spec = next(m for m in json.loads(set_path.read_text())["models"] if m["name"] == name)
    variant = work / f"{name}-{key}.onnx"
    phases[f"{key}_tuning"] = tuned_variant(Path(spec["path"]), base / name / "model.onnx", slowdown, variant,
                                            args.rounds or 30)
    print(f"{key}: {phases[f'{key}_tuning']}", flush=True)
    changed = _with_model(set_path, name, variant, work / f"set-{key}.json")
    phases[key] = against_runs(key, changed, base, args.runs, work, log)


def main() -> None:
    args = _parse()
    from gspo.regress.store import machine, versions

    work = Path(args.work or tempfile.mkdtemp(prefix="gspo-regress-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    log = work / "log.txt"
    began, load_before = time.perf_counter(), os.getloadavg()
    set_path = _subset(args, work)
    name = args.variant or json.loads(set_path.read_text())["models"][0]["name"]
    base = work / "baseline"
    record_json = work / "record.json"
    code, seconds = gspo("regress", set_path, "--record", base, "--force", "--json", record_json, log=log)
    if code != 0:
        sys.exit(f"run.py: recording failed (exit {code}); see {log}")
    phases = {"record": {"exit": code, "seconds": seconds,
                         "models": [_brief(m) for m in json.loads(record_json.read_text())["models"]]}}
    print(f"recorded in {seconds:.0f} s", flush=True)
    phases["unchanged"] = against_runs("unchanged", set_path, base, args.runs, work, log)
    _phase_variant("slowdown", args.slowdown, args, set_path, base, name, work, log, phases)
    _phase_variant("small", args.small, args, set_path, base, name, work, log, phases)
    meta = {"date": datetime.date.today().isoformat(), "machine": machine()["device"], "versions": versions(),
            "modelset": args.zoo and f"tiny zoo models {args.zoo}" or Path(args.modelset).name,
            "command": " ".join(["python", "benchmarks/regress/run.py"] + sys.argv[1:]), "variant_model": name,
            "slowdown": args.slowdown, "small": args.small, "runs": args.runs, "work": str(work),
            "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in os.getloadavg()],
            "total_s": time.perf_counter() - began}
    write_results(Path(args.out), meta, phases)
    for suffix in (".json", ".md", ".xml"):  # one whole --against run's own outputs, as CI keeps them
        first = work / f"unchanged-0{suffix}"
        if first.exists():
            (Path(args.out) / f"against{suffix}").write_bytes(first.read_bytes())
    print(f"wrote {Path(args.out) / 'RESULTS.md'} ({meta['total_s'] / 60:.1f} min; work folder {work})")


if __name__ == "__main__":
    main()
