"""How well could any cost model score in one `gspo calibrate --evaluate` run on this machine?

Usage: .venv/bin/python benchmarks/noise_floor.py benchmarks/evaluations/*.json.gz [--profile cpu] > benchmarks/noise_floor.md

Reads several evaluation reports of the same held-out set (`gspo calibrate --evaluate PROFILE
--passes P --report FILE`; gzipped or not) and puts every measured time in one unit (the
profile's speed reference; each report records the reference it was measured in). Then, per run
and kind:
  model     the profile's mean absolute error against that run (estimates recomputed with
            --profile, so every run is scored by the same model)
  in-run    the noise left in that run's mean of its passes (half the error between the mean of
            its odd passes and that of its even ones), as the report computes it
  oracle    the error of an "oracle" that knows each subgraph's typical time: the geometric mean
            of the *other* runs' measurements of it, taken as the estimate for this run. No model
            of the subgraphs alone can be expected to do better against a single run; it is the
            noise floor of the evaluation, measured across runs.
and, once per kind, the model against the geometric mean of all runs (the best measurement we
have of each subgraph's typical time) and the oracle when each run keeps only its first k passes
(how the floor falls with longer runs).
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import math
import platform
import statistics
import sys

from gspo.costmodel.estimate import CostModel
from gspo.costmodel.evaluate import Evaluation, held_out_schedule, held_out_subgraphs
from gspo.costmodel.profile import load_profile


def load_report(path: str) -> dict:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    if not data.get("reference_s"):
        sys.exit(f"{path}: the report does not record its unit (reference_s: the speed reference of the profile it "
                 "was measured with); reports written since gspo calibrate --evaluate records it do")
    return data


def _mape(estimated, measured) -> float:
    """Mean absolute percentage error, in percent (gspo's own, as ``--evaluate`` reports it)."""
    return 100 * Evaluation("", tuple(estimated), tuple(measured), ()).mape


def _in_run_noise(passes: list[list[float]]) -> float:
    """The noise left in a run's mean of its passes, in percent, as ``--evaluate`` reports it."""
    means = tuple(statistics.fmean(p) for p in passes)
    return 100 * Evaluation("", means, means, (), passes=tuple(tuple(p) for p in passes)).noise_of_mean


def _geomean(xs) -> float:
    return math.exp(statistics.fmean(math.log(x) for x in xs))


def estimates(profile_name: str, labels: dict[str, list[str]]) -> tuple[float, dict[str, dict[str, float]]]:
    """The profile's reference and its estimate of every held-out subgraph named in ``labels``,
    on the schedule ``--evaluate`` measures it with."""
    profile = load_profile(profile_name, force=True)
    model = CostModel(profile)
    out: dict[str, dict[str, float]] = {}
    for kind, wanted in labels.items():
        parallel = kind == "parallel"
        subs = dict(held_out_subgraphs(100, parallel))
        out[kind] = {lbl: model.cost(subs[lbl], held_out_schedule(subs[lbl]) if parallel else None)
                     for lbl in wanted if lbl in subs}
    return profile.reference_s, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("reports", nargs="+", help="evaluation reports (JSON, optionally gzipped) of one held-out set")
    ap.add_argument("--profile", default="cpu", help="profile whose estimates are scored [default: the shipped cpu]")
    args = ap.parse_args()
    if len(args.reports) < 3:
        sys.exit("give at least three reports (the oracle of one run is the geometric mean of the others)")
    runs = [(p.rsplit("/", 1)[-1].split(".")[0], load_report(p)) for p in args.reports]
    kinds = ("sequential", "parallel")
    # kind -> label -> run -> passes (in each report's own unit)
    table: dict[str, dict[str, dict[str, list[float]]]] = {k: {} for k in kinds}
    for name, data in runs:
        for res in data["results"]:
            for row in res["rows"]:
                table[res["kind"]].setdefault(row["subgraph"], {})[name] = row["passes_s"] or [row["measured_s"]]
    names = [n for n, _ in runs]
    common = {k: sorted(lbl for lbl, by in table[k].items() if all(n in by for n in names)) for k in kinds}
    ref, est = estimates(args.profile, common)
    scale = {n: ref / d["reference_s"] for n, d in runs}

    print("# Noise floor of the cost model's evaluation (held-out subgraphs)\n")
    print(f"Generated {datetime.date.today()} on {platform.node() or 'this machine'} ({platform.processor() or platform.machine()}) by\n")
    print(f"    .venv/bin/python benchmarks/noise_floor.py {' '.join(args.reports)} --profile {args.profile}\n")
    print("Mean absolute percentage errors, every time in the profile's reference units. *oracle*: each")
    print("subgraph's geometric mean over the other runs taken as the estimate for this run (no model can")
    print("be expected to beat it against one run); *in-run*: the noise left in the run's own mean of its passes.\n")
    for kind in kinds:
        labels = [lbl for lbl in common[kind] if lbl in est[kind]]
        if not labels:
            continue
        passes = {n: [[x * scale[n] for x in table[kind][lbl][n]] for lbl in labels] for n in names}
        mean = {n: [statistics.fmean(p) for p in passes[n]] for n in names}
        e = [est[kind][lbl] for lbl in labels]
        print(f"## {kind} ({len(labels)} subgraphs, {len(names)} runs)\n")
        print("| run | passes | model | in-run noise | oracle |")
        print("|---|---|---|---|---|")
        oracle = {}
        for n in names:
            others = [_geomean([mean[m][i] for m in names if m != n]) for i in range(len(labels))]
            oracle[n] = others
            print(f"| {n} | {min(len(p) for p in passes[n])} | {_mape(e, mean[n]):.1f}% | "
                  f"{_in_run_noise(passes[n]):.1f}% | {_mape(others, mean[n]):.1f}% |")
        model_runs = [_mape(e, mean[n]) for n in names]
        oracle_runs = [_mape(oracle[n], mean[n]) for n in names]
        print(f"| mean of the runs | | {statistics.fmean(model_runs):.1f}% | | {statistics.fmean(oracle_runs):.1f}% |\n")
        # What a speed reference per model (per kind of op) could cancel at most: each run's median
        # shift per zoo model against the oracle taken out before scoring.
        shifted = []
        for n in names:
            ratio = [math.log(mean[n][i] / oracle[n][i]) for i in range(len(labels))]
            by_model: dict[str, list[float]] = {}
            for lbl, r in zip(labels, ratio):
                by_model.setdefault(lbl.split("/")[0], []).append(r)
            shift = {m: statistics.median(v) for m, v in by_model.items()}
            shifted.append(_mape(oracle[n], [mean[n][i] / math.exp(shift[lbl.split("/")[0]]) for i, lbl in enumerate(labels)]))
        print(f"Oracle with each run's median shift per zoo model taken out (the most a speed reference per "
              f"kind of op could cancel): {statistics.fmean(shifted):.1f}% (mean over the runs).\n")
        everyone = [_geomean([mean[n][i] for n in names]) for i in range(len(labels))]
        print(f"Model against the geometric mean of all {len(names)} runs: **{_mape(e, everyone):.1f}%**.\n")
        fewest = min(len(p) for n in names for p in passes[n])
        ks = [k for k in (1, 2, 3, 4, 6, 8, 12, 16, 20) if k <= fewest]
        cells = []
        for k in ks:
            cells.append(statistics.fmean(
                _mape(oracle[n], [statistics.fmean(p[:k]) for p in passes[n]]) for n in names))
        print("Oracle (mean over the runs) when each run keeps only its first k passes:\n")
        print("| k | " + " | ".join(str(k) for k in ks) + " |")
        print("|---|" + "---|" * len(ks))
        print("| oracle | " + " | ".join(f"{c:.1f}%" for c in cells) + " |\n")


if __name__ == "__main__":
    main()
