"""Backend placement against each single backend: onnxruntime, OpenVINO and gspo's placement.

Usage (OpenVINO installed: ``.venv/bin/pip install -c constraints.txt openvino``)::

    .venv/bin/python benchmarks/placement/run.py                      # zoo (full) + real-world corpus
    .venv/bin/python benchmarks/placement/run.py --models mixnet_s bert --time-budget 60

Per model, in one process: ``gspo.optimize`` with backends onnxruntime and OpenVINO; then timed as
deployed models run (issue 42): interleaved rounds in rotating order after 3 warm-up rounds, each
runner in turn getting a block of calls (at least 10 ms of them) after a 200 ms pause (see
``PAUSE_S``) and one untimed call; medians of ``--runs`` rounds. Then in bursts, as a served model
is called (issue 51, ``--bursts``): the same rotating rounds, each runner in turn a burst of 3-5 calls
(``BURST_CALLS``, cycling) after a 200 ms pause and one untimed call, timed together (the
burst's mean a call); medians of ``--bursts`` rounds. The runners: the source in onnxruntime as gspo runs
it (spinning off) at 1 and 2 intra-op threads, in onnxruntime as installed (its own defaults,
idle threads spinning), in OpenVINO (latency hint, f32) at 1 and 2 threads, and gspo's result
through ``gspo.InferenceSession`` (a plain file, with or without a saved thread setting, is
onnxruntime's own session; a placement or a schedule is gspo's executor). ``gspo / best`` is
gspo's time over the fastest of the others whose outputs pass gspo's equivalence check. gspo's
outputs are compared with onnxruntime's on fresh inputs. Writes ``results.json`` and
``RESULTS.md`` beside this file.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import shlex
import sys
import tempfile
import time
from pathlib import Path

from gspo.costmodel import device_description
from gspo.errors import GspoError, first_line
from gspo.ir import load, save
from gspo.runtime import (
    SessionConfig,
    calls_per_sample,
    interleaved,
    random_inputs,
    runtime_version,
    warm_sample,
)
from gspo.runtime.backends import backend_status, load_runner
from gspo.runtime.bench import bursts
from gspo.runtime.deploy import InferenceSession
from gspo.runtime.verify import compare_outputs, output_steps
from gspo.search import optimize
from gspo.search.placement import MIXED_MARGIN
from gspo.zoo import MODELS, build

HERE = Path(__file__).resolve().parent
CORPUS = HERE.parent / "realworld" / "models"
THREADS = (1, 2)


def _models(only):
    """(name, source, path) of the zoo's full models and the real-world corpus."""
    out = [(f"zoo:{m}", "gspo zoo (full)", None) for m in MODELS]
    manifest = CORPUS / "manifest.json"
    if manifest.exists():
        for name, entry in sorted(json.loads(manifest.read_text()).items()):
            out.append((name, f"{entry['source']} ({entry['exporter']})", CORPUS / entry["file"]))
    return [m for m in out if not only or m[0] in only or m[0].removeprefix("zoo:") in only]


def _time(path: Path, result_path: Path, runs: int, burst_rounds: int = 20) -> dict:
    g = load(path)
    feeds = random_inputs(g, seed=7)
    data = path.read_bytes()
    runners, closers = [], []
    names = [v.name for v in g.outputs]
    openvino_refused, openvino_differs = _openvino_check(data, g, names, feeds)
    import onnxruntime

    # onnxruntime as installed: its own defaults (idle threads spin), as most users run it
    installed = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    runners.append(("ort-installed", lambda s=installed, n=names: s.run(n, feeds)))
    for t in THREADS:
        ort = load_runner("ort", data, SessionConfig(intra_op_threads=t))
        runners.append((f"ort@{t}", lambda r=ort, n=names: r.run(n, feeds)))
        if openvino_refused is None:
            ov = load_runner("openvino", data, SessionConfig(intra_op_threads=t))
            runners.append((f"openvino@{t}", lambda r=ov, n=names: r.run(n, feeds)))
    # gspo's deploy API, as its users run it: a plain ONNX file (a saved thread setting or none) is
    # onnxruntime's own session (as installed, at that setting); a placement or a schedule is
    # gspo's executor
    deployed = InferenceSession(str(result_path))
    closers.append(deployed)
    runners.append(("gspo", lambda n=names: deployed.run(n, feeds)))
    want = dict(zip(names, runners[0][1]()))
    check_session = InferenceSession(str(result_path))
    check = compare_outputs(want, dict(zip(names, check_session.run(names, random_inputs(g, seed=7)))),
                            steps=output_steps(g))
    check_session.close()
    try:
        calls = calls_per_sample([r for _, r in runners], MIN_SAMPLE_S)
        warm = [(label, warm_sample(run, calls)) for label, run in runners]
        timings = {t.label: t.median * 1e3 for t in interleaved(warm, runs, 3, pause=PAUSE_S)}
        burst = ({t.label: t.median * 1e3 for t in bursts(runners, burst_rounds, BURST_CALLS, PAUSE_S)}
                 if burst_rounds else {})
    finally:
        for c in closers:
            c.close()
    best = lambda prefix: min((v for k, v in timings.items() if k.startswith(prefix + "@")), default=None)  # noqa: E731
    gspo_ms = timings["gspo"] if "gspo" in timings else best("gspo")
    return {"ort_ms": best("ort"), "ort_installed_ms": timings["ort-installed"], "openvino_ms": best("openvino"),
            "gspo_ms": gspo_ms, "openvino_refused": openvino_refused,
            "openvino_differs": openvino_differs,
            "equivalent": check.equivalent, "max_rel_err": check.max_norm_rel,
            "timings_ms": {k: float(f"{v:.4g}") for k, v in timings.items()},
            "burst_ms": {k: float(f"{v:.4g}") for k, v in burst.items()}}


#: A timed sample lasts at least this long: a model of microseconds is called as many times in a
#: row, the same count for every runner (with one call a sample, gspo's row of vad_gru, a
#: session identical to onnxruntime's at one thread, measured 2.8-5.1% slower in three runs).
MIN_SAMPLE_S = 0.01
#: The pause before each block of calls: a deployed model is called after other work, not right
#: after another runtime's threads spun. Issue 42's protocol paused 5 ms; onnxruntime as installed
#: keeps a core spinning for 20-50 ms after a call (the process used 0.79 of a core in a 5 ms
#: sleep after its calls, 0.99 in 20 ms, 0.65 in 50 ms, 0.17 in 200 ms, on a 3 ms SqueezeNet), so
#: after 5 ms the next runner lost a core (onnxruntime as installed right after another spinning
#: session timed like onnxruntime at one thread). 200 ms lets the spin end.
PAUSE_S = 0.2
#: The calls of a burst in the burst timing (issue 51's protocol): 3, 4, 5, 3, ... a round.
BURST_CALLS = (3, 5)


def _openvino_check(data: bytes, g, names, feeds) -> tuple[str | None, str | None]:
    """Why OpenVINO cannot compile or run the model, and why its outputs do not pass gspo's
    equivalence check against onnxruntime's (``None``: they do); such a model is compared with
    onnxruntime alone, as gspo may not choose OpenVINO for it."""
    try:
        got = load_runner("openvino", data).run(names, feeds)
        want = load_runner("ort", data).run(names, feeds)
    except GspoError as e:
        return first_line(e), None
    check = compare_outputs(dict(zip(names, want)), dict(zip(names, got)), steps=output_steps(g))
    return None, (None if check.equivalent else first_line(check.worst.reason or f"{check.worst.name} differs"))


def run_model(name, source, path, args, tmp: Path) -> dict:
    row = {"model": name, "source": source, "status": "ok", "ort_ms": None, "openvino_ms": None, "gspo_ms": None,
           "placement": {}, "equivalent": False, "chosen": None, "ratio_to_best": None}
    try:
        if path is None:
            path = save(build(name.removeprefix("zoo:"), "full"), tmp / f"{name.removeprefix('zoo:')}.onnx", overwrite=True)
        start = time.perf_counter()
        result = optimize(path, time_budget=args.time_budget, jobs=2, backends=("ort", "openvino"))
        out = result.save(tmp / f"{path.stem}.gspo.onnx", overwrite=True)
        row.update(chosen=result.report["chosen"], placement=result.report["placement"]["chosen"],
                   estimate=result.report["placement"].get("mixed_s"), optimize_s=round(time.perf_counter() - start, 1),
                   refused=len(result.report["placement"].get("refused", [])),
                   rules=result.report["substitutions"], split=_split(result.report["placement"]),
                   settings=_settings(result.report.get("settings")),
                   # what decided: the first timing of every whole-model option, each contender's own
                   # timing against the input, and what the time budget skipped
                   final_ms={c["label"]: c["measured_ms"] and round(c["measured_ms"], 3)
                             for c in result.report["final_candidates"]},
                   confirmations=result.report["confirmations"],
                   skipped=[f"{s['stage']}: {s['what']}" for s in result.report["skipped"]])
        row.update(_time(path, out, args.runs, args.bursts))
        if out.read_bytes() == path.read_bytes():
            # The input handed back unchanged runs exactly as the input does in onnxruntime; the
            # two measurements of that one file differ only by the machine's noise.
            row.update(same_file=True, measured_gspo_ms=row["gspo_ms"], gspo_ms=row["ort_installed_ms"])
    except Exception as e:  # the model's status, one line
        row["status"] = f"{type(e).__name__}: {first_line(e)}"
        return row
    row["ratio_to_best"] = row["gspo_ms"] / _best_ms(row)
    row["burst_ratio_to_best"] = _burst_ratio(row)
    return row


def _burst_ratio(row) -> float | None:
    """gspo's time in bursts over the fastest contender's in bursts whose outputs pass gspo's
    check (``None``: not timed in bursts). The input handed back unchanged runs as onnxruntime
    as installed does: 1."""
    times = row.get("burst_ms") or {}
    if "gspo" not in times:
        return None
    if row.get("same_file"):
        return 1.0
    others = [v for k, v in times.items() if k != "gspo" and not (k.startswith("openvino") and row.get("openvino_differs"))]
    return times["gspo"] / min(others)


def _best_ms(row) -> float:
    """The fastest contender whose outputs pass gspo's equivalence check: onnxruntime as gspo runs
    it or as installed, OpenVINO f32."""
    return min(t for t in (row["ort_ms"], row.get("ort_installed_ms"),
                           None if row.get("openvino_differs") else row["openvino_ms"]) if t is not None)


def _settings(report: dict | None) -> str:
    """The thread setting gspo chose, as the table shows it."""
    if not report or not report.get("threads"):
        return "default"
    return f"{report['backend'] or 'executor'} threads={report['threads']}"


def _split(placement: dict) -> dict | None:
    """What the search estimated for putting each piece on its fastest backend (ms), when the
    pieces do not all prefer one backend; ``None`` when they do."""
    prefer = {b: n for b, n in placement.get("pieces", {}).items() if n}
    if len(prefer) < 2:
        return None
    whole = {b: round(s * 1e3, 3) for b, s in placement["whole_s"].items() if math.isfinite(s)}
    return {"pieces": prefer, "pieces_best_ms": round((placement["mixed_s"] - placement["crossing_s"]) * 1e3, 3),
            "crossings": placement["crossings"], "crossing_ms": round(placement["crossing_s"] * 1e3, 3),
            "mixed_ms": round(placement["mixed_s"] * 1e3, 3), "whole_ms": whole}


def _tried(r) -> bool:
    """Whether the split was a candidate: estimated faster than every single backend by the margin."""
    s = r["split"]
    best = min(s["whole_ms"].values()) if s["whole_ms"] else float("nan")
    return r["chosen"].endswith("@mixed") or s["mixed_ms"] < best * (1 - MIXED_MARGIN)


def _split_lines(rows) -> list[str]:
    """Why a split across backends was or was not chosen, per model whose pieces disagree."""
    split = [r for r in rows if r["status"] == "ok" and r.get("split")]
    if not split:
        return ["", "On every model all pieces ran fastest on one backend: no split to consider."]
    tried = [r for r in split if _tried(r)]
    won = [r for r in split if r["chosen"].endswith("@mixed")]
    summary = (f"On {len(split)} models the pieces prefer different backends. On {len(split) - len(tried)} of them the "
               f"split is estimated within {MIXED_MARGIN:.0%} of the best single backend or slower: each crossing costs "
               f"{min(r['split']['crossing_ms'] / max(r['split']['crossings'], 1) for r in split):.2f}-"
               f"{max(r['split']['crossing_ms'] / max(r['split']['crossings'], 1) for r in split):.2f} ms, about what the "
               f"pieces gain by moving. The split was tried (measured as a whole model) on {len(tried)} "
               f"({', '.join(r['model'] for r in tried) or 'none'}) and chosen on {len(won)}"
               + (": the whole model on one backend measured faster." if tried and not won else "."))
    lines = ["", "## Models whose pieces prefer different backends", "", summary, "",
             "From the search's piece timings (sum of each piece at its fastest backend, then the measured "
             "cost of the values crossing between backends) against the pieces summed on one backend. A "
             f"split is tried only when it is estimated {MIXED_MARGIN:.0%} faster than the best single backend.", "",
             "| model | pieces per backend | pieces at their best ms | crossings | crossing ms | split ms | "
             "one backend ms | split tried |", "|---|---|---|---|---|---|---|---|"]
    for r in split:
        s = r["split"]
        tried = "yes" if _tried(r) else ("no" if s["whole_ms"] else "no (pieces not all timed in the budget)")
        lines.append(f"| {r['model']} | {', '.join(f'{b} {n}' for b, n in s['pieces'].items())} | "
                     f"{s['pieces_best_ms']:.2f} | {s['crossings']} | {s['crossing_ms']:.2f} | {s['mixed_ms']:.2f} | "
                     f"{', '.join(f'{b} {v:.2f}' for b, v in s['whole_ms'].items())} | {tried} |")
    return lines


def _same_setting(r) -> str | None:
    """The contender that runs what gspo saved (the source unrewritten, one backend whole, at its
    saved thread count), or ``None`` when gspo's result is something no contender runs (rewrites,
    a schedule, a split)."""
    m = re.fullmatch(r"(ort|openvino) threads=(\d+)", r.get("settings") or "")
    if (not m or not r["chosen"].startswith("original") or len(r["placement"]) != 1
            or next(iter(r["placement"])) != m[1] or r.get("same_file")):
        return None
    return f"{m[1]}@{m[2]}" if f"{m[1]}@{m[2]}" in r["timings_ms"] else None


def _fastest(r, spinning: bool = True) -> tuple[str, float]:
    """The fastest contender (label, ms) whose outputs pass gspo's check; without onnxruntime as
    installed when ``spinning`` is false."""
    times = {k: v for k, v in r["timings_ms"].items() if k != "gspo" and (spinning or k != "ort-installed")
             and not (k.startswith("openvino") and r.get("openvino_differs"))}
    label = min(times, key=times.get)
    return label, times[label]


def _searched(r, label: str) -> str:
    """What optimize's own timing measured for its pick and for the contender's configuration."""
    backend, _, threads = label.partition("@")
    same = ("original" if backend == "ort" else "original@openvino") + f"[threads={threads}]"
    mine, theirs = r.get("final_ms", {}).get(r["chosen"]), r.get("final_ms", {}).get(same)
    if mine is None or theirs is None:
        return ""
    order = "as deployed the order of the two reversed" if mine <= theirs else "the pick was slower there too"
    return f" In optimize's own interleaved timing the pick measured {mine:.2f} ms and {same} {theirs:.2f} ms; {order}."


def _why_not_lines(rows) -> list[str]:
    """Per model outside 2% of the fastest contender, what that contender does that gspo's result
    does not, from the measured timings."""
    ok = [r for r in rows if r["status"] == "ok" and r.get("timings_ms") and "gspo" in r["timings_ms"]]
    late = [r for r in ok if r["ratio_to_best"] > 1.02]
    if not late:
        return []
    same = [r["timings_ms"]["gspo"] / r["timings_ms"][_same_setting(r)] for r in ok if _same_setting(r)]
    lines = ["", "## Where gspo is not within 2% of the fastest contender, and why", ""]
    for r in late:
        label, ms = _fastest(r)
        gspo = r["timings_ms"]["gspo"]
        if label == "ort-installed":
            quiet, quiet_ms = _fastest(r, spinning=False)
            why = (f"the fastest is onnxruntime as installed ({ms:.2f} ms), whose idle threads spin between calls. "
                   f"gspo's sessions never spin: spinning starves the next runtime when two alternate (the search "
                   f"times its options interleaved), and offered as a searched setting it lost on net "
                   f"([spin_setting.md](spin_setting.md)). Against the fastest contender that does not spin "
                   f"({quiet}, {quiet_ms:.2f} ms) gspo's result is {gspo / quiet_ms:.3f}.")
        elif label == _same_setting(r):
            why = (f"the fastest contender ({label}, {ms:.2f} ms) runs what gspo saved: the same backend at the same "
                   f"threads ({r['settings']}). The two are one configuration timed twice, gspo's through "
                   "`gspo.InferenceSession`; over the " + str(len(same)) + " models where gspo saved the unrewritten "
                   f"source at one contender's own setting, gspo / that contender spans {min(same):.3f}-{max(same):.3f}: this "
                   "model is that spread's tail, not another configuration.")
        else:
            why = (f"the fastest contender is {label} ({ms:.2f} ms); gspo chose {r['chosen']} ({r['settings']}), "
                   f"{gspo:.2f} ms as deployed." + _searched(r, label))
        lines.append(f"- {r['model']} ({r['ratio_to_best']:.3f}): {why}")
    return lines


def markdown(rows, meta) -> str:
    ok = [r for r in rows if r["status"] == "ok"]
    within = [r for r in ok if r["ratio_to_best"] <= 1.02]
    burst_within = [r for r in ok if r.get("burst_ratio_to_best") and r["burst_ratio_to_best"] <= 1.02]
    geo = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")  # noqa: E731
    lines = [
        "# Backend placement: gspo against onnxruntime and OpenVINO", "",
        f"Measured {meta['date']} on `{meta['machine']}`, onnxruntime {meta['ort']}, {meta['openvino']}.",
        "Commands: " + "; then ".join(f"`{c}`" for c in meta["commands"])
        + (" (each later one measured again the models it names)." if len(meta["commands"]) > 1 else "."), "",
        f"**{len(ok)} of {len(rows)} models measured; gspo within 2% of the fastest contender (or faster) on "
        f"{len(within)} back to back, on {len(burst_within)} of {sum(1 for r in ok if r.get('burst_ratio_to_best'))} "
        f"in bursts after idle; equivalent on {sum(r['equivalent'] for r in ok)}.** Geometric means: gspo / onnxruntime "
        f"{geo([r['gspo_ms'] / r['ort_ms'] for r in ok]):.3f}, gspo / OpenVINO "
        f"{geo([r['gspo_ms'] / r['openvino_ms'] for r in ok if r['openvino_ms']]):.3f} (the models OpenVINO runs), "
        f"gspo / the better of the two {geo([r['ratio_to_best'] for r in ok]):.3f} (below 1 = gspo faster). "
        f"OpenVINO cannot compile or run {sum(1 for r in ok if not r['openvino_ms'])} of the sources "
        "(`openvino ms` is `-`); its outputs fail gspo's equivalence check against onnxruntime's on "
        f"{sum(1 for r in ok if r.get('openvino_differs'))} (`differs`, with the worst output below): there the "
        "better backend is onnxruntime, as gspo may not choose OpenVINO.", "",
        "Timed as deployed models run: medians of interleaved rounds in one process, each runner in turn a "
        "block of calls after a 200 ms pause (onnxruntime as installed spins a core for 20-50 ms after a call) "
        "and one untimed call. `ort ms`: onnxruntime as gspo runs it "
        "(spinning off), at its better of 1 and 2 threads; `ort as installed`: onnxruntime's own defaults "
        "(idle threads spinning); OpenVINO f32 at its better of 1 and 2 threads. gspo's result runs through "
        "`gspo.InferenceSession` (a plain file, with or without a saved thread setting, is onnxruntime's own "
        "session; a placement or a schedule is gspo's executor; `placement`: ops per backend). A result that is "
        "the input unchanged (`same file`) runs as the input does, so its time is onnxruntime's as installed.", "",
        "In bursts (`gspo / best in bursts`): the same rotating rounds, each runner in turn a burst of 3-5 "
        "calls after a 200 ms pause and one untimed call, timed together (the burst's mean a call); "
        "gspo's median over the fastest contender's.", "",
        "| model | ort ms | ort as installed ms | openvino ms | gspo ms | gspo / best | gspo / best in bursts | chosen "
        "| placement | settings | equivalent |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"| {r['model']} | - | - | - | - | - | - | FAILED: {r['status'][:80]} | - | - | - |")
            continue
        pl = ", ".join(f"{b} {n}" for b, n in r["placement"].items())
        gspo = "= ort (same file)" if r.get("same_file") else f"{r['gspo_ms']:.2f}"
        ov = f"{r['openvino_ms']:.2f}" if r["openvino_ms"] else "-"
        ov += " (differs)" if r.get("openvino_differs") else ""
        installed = f"{r['ort_installed_ms']:.2f}" if r.get("ort_installed_ms") else "-"
        in_bursts = f"{r['burst_ratio_to_best']:.3f}" if r.get("burst_ratio_to_best") else "-"
        lines.append(f"| {r['model']} | {r['ort_ms']:.2f} | {installed} | {ov} | {gspo} | "
                     f"{r['ratio_to_best']:.3f} | {in_bursts} | {r['chosen']} | {pl} | {r.get('settings', 'default')} | "
                     f"{'yes' if r['equivalent'] else 'NO'} |")
    differs = [f"- {r['model']}: {r['openvino_differs']}" for r in ok if r.get("openvino_differs")]
    if differs:
        lines += ["", "OpenVINO's outputs against onnxruntime's on the same inputs, where they differ:", ""] + differs
    notes = ["", "## Notes", ""] + [f"- {n}" for n in meta["notes"]] if meta.get("notes") else []
    return "\n".join(lines + _why_not_lines(rows) + _split_lines(rows) + notes) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", help="Only these (zoo names or corpus names).")
    ap.add_argument("--skip", nargs="*", default=[], help="Not these (corpus names, or zoo names as zoo:NAME).")
    ap.add_argument("--time-budget", type=float, default=90.0)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--bursts", type=int, default=20, help="Rounds of the timing in bursts after idle (0: none).")
    ap.add_argument("--render", action="store_true", help="Only rewrite RESULTS.md from results.json and meta.json.")
    args = ap.parse_args(argv)
    if args.render:
        rows = json.loads((HERE / "results.json").read_text())
        (HERE / "RESULTS.md").write_text(markdown(rows, json.loads((HERE / "meta.json").read_text())))
        return 0
    ok, why = backend_status("openvino")
    if not ok:
        print(f"placement/run.py: {why}", file=sys.stderr)
        return 2
    results_path = HERE / "results.json"
    old = {r["model"]: r for r in json.loads(results_path.read_text())} if results_path.exists() and args.models else {}
    command = ".venv/bin/python benchmarks/placement/run.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    meta_path = HERE / "meta.json"
    earlier = json.loads(meta_path.read_text())["commands"] if args.models and meta_path.exists() else []
    meta = {"date": datetime.date.today().isoformat(), "machine": device_description("cpu"), "ort": runtime_version(),
            "openvino": backend_status("openvino")[1], "commands": earlier + [command]}
    meta_path.write_text(json.dumps(meta, indent=1) + "\n")
    with tempfile.TemporaryDirectory() as d:
        for name, source, path in [m for m in _models(args.models) if m[0] not in args.skip]:
            row = run_model(name, source, path, args, Path(d))
            old[name] = row
            ratio = f"{row['ratio_to_best']:.3f}" if row["ratio_to_best"] else "-"
            burst = f"{row['burst_ratio_to_best']:.3f}" if row.get("burst_ratio_to_best") else "-"
            print(f"{name:<24} {row['status'][:60]:<6} gspo/best {ratio} in bursts {burst} {row['placement']} {row['chosen']} {row.get('settings', '')}", flush=True)
            rows = [old[n] for n in sorted(old)]
            results_path.write_text(json.dumps(rows, indent=1) + "\n")
            (HERE / "RESULTS.md").write_text(markdown(rows, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
