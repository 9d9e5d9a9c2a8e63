"""The precision benchmark's results file and table: the CPU a row ran on, merging a run's rows
into ``results.json``, and ``RESULTS.md``.

A row is marked with the CPU it ran on (:func:`cpu_record`: the model name, the cores and the
instruction-set flags that decide reduced precision's speed); rows of one CPU are not comparable
with another's, so a run replaces only the rows of its own CPU that it measured again
(:func:`row_key`) and RESULTS.md has one table per CPU, the CPUs and their flags at the top.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from nncf_peer import ACCURACY_CONTROL, HINTS, QUANTIZE

from gspo.costmodel import device_description
from gspo.runtime.cpu_features import cpu_flags

__all__ = ["CEILING", "CPU_FLAGS", "NNCF_COLUMNS", "PEERS", "PRECISION", "SAMPLES", "cpu_record", "markdown",
           "merged", "row_key"]

#: The precisions asked when ``--precision`` is not given (and in rows written before the option).
PRECISION = "bf16,int8"
#: The calibration and validation samples each, unless ``--samples`` (and in rows written before it).
SAMPLES = 16
#: The ``/proc/cpuinfo`` (``lscpu``) flags that decide which reduced precisions a CPU runs fast,
#: in the order shown; every ``amx_*`` flag is kept too (:func:`cpu_record`).
CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16")
#: The peers' columns of RESULTS.md after gspo's, and NNCF's (see ``nncf_peer.py``).
PEERS = ("ort quantize_static", "ort quantize_dynamic", "openvino default (bf16)")
NNCF_COLUMNS = (QUANTIZE, ACCURACY_CONTROL)
#: The label prefix of the reduced-precision builds of the source, every piece reduced, the budget
#: ignored: the fastest of them bounds what a budget lets gspo reach here, short of its rewrites.
CEILING = "any error: "


def cpu_record(flags: Collection[str] | None = None, model: str | None = None, cores: int | None = None) -> dict:
    """The CPU a row runs on: ``{"id", "model", "cores", "flags"}``, the flags those of
    :data:`CPU_FLAGS` and ``amx_*`` it has (default: this machine's, :func:`cpu_flags`, and its
    model name and core count as :func:`device_description` reads them); ``id`` names all three,
    so that CPUs of one model name with other features are told apart."""
    flags = cpu_flags() if flags is None else frozenset(flags)
    if model is None or cores is None:
        described, _, count = device_description("cpu").removeprefix("cpu:").rpartition(":")
        model = described if model is None else model
        cores = int(count.rstrip("c")) if cores is None else cores
    kept = [f for f in CPU_FLAGS if f in flags] + sorted(f for f in flags if f.startswith("amx"))
    return {"id": f"{model}, {cores} cores, {' '.join(kept) if kept else 'no AVX2'}", "model": model,
            "cores": cores, "flags": kept}


def _legacy_cpu(meta: dict) -> dict:
    """The CPU record of rows written before rows named their CPU: the machine their meta names,
    its flags not recorded."""
    machine = meta.get("machine", "unknown machine")
    model, _, count = machine.removeprefix("cpu:").rpartition(":")
    cores = int(count[:-1]) if count[:-1].isdigit() and count.endswith("c") else None
    return {"id": f"{machine} (flags not recorded)", "model": model if cores else machine, "cores": cores,
            "flags": None}


def _with_cpus(earlier: dict) -> dict:
    """``earlier`` results with every row marked with its CPU and ``meta["cpus"]`` listing them
    (results written before: their machine, :func:`_legacy_cpu`)."""
    meta = dict(earlier.get("meta", {}))
    cpus = dict(meta.get("cpus", {}))
    rows = []
    for row in earlier.get("rows", []):
        row = dict(row, budget=row.get("budget") or meta.get("budget"), precision=row.get("precision") or PRECISION)
        if "cpu" not in row:
            legacy = _legacy_cpu(meta)
            cpus.setdefault(legacy["id"], dict(legacy, date=meta.get("date"), onnxruntime=meta.get("onnxruntime"),
                                               commands=list(meta.get("commands", []))))
            row["cpu"] = legacy["id"]
        rows.append(row)
    return {"meta": dict(meta, cpus=cpus), "rows": rows}


def row_key(row: dict) -> tuple:
    """What a row measures: a later row with the same key replaces it (model, budget, precision, CPU)."""
    return row["model"], row["budget"], row.get("precision") or PRECISION, row["cpu"]


def _order(row: dict, cpus: list[str], known: list[str]) -> tuple:
    return (cpus.index(row["cpu"]) if row["cpu"] in cpus else len(cpus),
            known.index(row["model"]) if row["model"] in known else len(known), row["model"], row["budget"],
            row.get("precision") or PRECISION)


def merged(earlier: dict | None, rows: list[dict], cpu: dict, run: dict, order: Sequence[str] = ()) -> dict:
    """``results.json``'s content after a run on ``cpu`` (:func:`cpu_record`) that measured
    ``rows`` (each marked with ``cpu["id"]``) with ``run`` (``date``, ``machine``, ``onnxruntime``,
    ``command``): the earlier rows kept unless a new one has their :func:`row_key` (so every row
    of another CPU is kept), in the order of the CPUs, then of the models in ``order`` (the others
    after, by name), then of the budgets; ``meta["cpus"]`` has each CPU's record, its last run's
    date and versions and its commands; ``meta["cpu"]`` names the CPU of this run and
    ``meta["commands"]`` lists every command."""
    base = _with_cpus(earlier or {})
    meta, new = base["meta"], {row_key(r) for r in rows}
    cpus = dict(meta["cpus"])
    mine = cpus.get(cpu["id"], {})
    cpus[cpu["id"]] = dict(cpu, date=run["date"], machine=run["machine"], onnxruntime=run["onnxruntime"],
                           commands=list(mine.get("commands", [])) + [run["command"]])
    kept = [r for r in base["rows"] if row_key(r) not in new] + rows
    kept.sort(key=lambda r: _order(r, list(cpus), list(order)))
    meta = {"date": run["date"], "machine": run["machine"], "cpu": cpu["id"], "onnxruntime": run["onnxruntime"],
            "commands": list(meta.get("commands", [])) + [run["command"]], "cpus": cpus}
    return {"meta": meta, "rows": kept}


def _cell(row: dict, label: str) -> str:
    """A contender's speedup and whether it holds the budget; n/a where it was not measured."""
    if label not in row["timings_ms"]:
        return "n/a"
    ok = "ok" if row["errors"][label]["holds"] else "BREAKS"
    return f"{row['speedup_over_fp32'][label]:.2f}x {ok}"


def _nncf_cell(row: dict, label: str) -> str:
    """An NNCF contender's speedup and budget at OpenVINO's default precision and at f32, and the
    quantization's wall time (or that it was stopped, or failed); n/a in rows measured without."""
    info = row.get("nncf", {}).get(label)
    if info is None:
        return "failed" if label in row.get("failed", {}) else "n/a"
    if "stopped_after_s" in info:
        return f"stopped after {info['stopped_after_s']:.0f} s"
    default, f32 = (_cell(row, label + suffix) for suffix, _ in HINTS)
    if "seconds" not in info or default == f32 == "n/a":
        return "failed"
    return f"{default} (f32 {f32}), {info['seconds']:.0f} s"


def _fastest_any_error(row: dict) -> str:
    """The fastest reduced build of the whole model with the budget ignored (the ceiling), its kind
    and whether it holds the budget; n/a where the row was measured without them."""
    ceiling = {k: v for k, v in row["speedup_over_fp32"].items() if k.startswith(CEILING)}
    if not ceiling:
        return "n/a"
    label = max(ceiling, key=ceiling.get)
    ok = "ok" if row["errors"][label]["holds"] else "BREAKS"
    return f"{ceiling[label]:.2f}x {ok} ({label[len(CEILING):]})"


def _table_row(r: dict) -> str:
    threads = r.get("chosen_threads") or 0
    pick = r["chosen"] + (f", {threads} thread{'s' if threads > 1 else ''}" if threads else "")
    wall = f"{r['optimize_s']:.0f}" + (f" / {r['time_budget']:g}" if r.get("time_budget") is not None else "")
    cells = [r["model"], r["budget"], r.get("precision") or PRECISION, str(r.get("samples") or SAMPLES),
             f"{r['fp32_best_ms']:.2f}", pick, _cell(r, "gspo"), wall]
    cells += [_cell(r, label) for label in PEERS] + [_nncf_cell(r, label) for label in NNCF_COLUMNS]
    return "| " + " | ".join(cells + [_fastest_any_error(r)]) + " |"


def _row_notes(r: dict, weight_bound: Collection[str]) -> list[str]:
    """The lines under a CPU's table for row ``r``: why an NNCF contender failed, and the
    weight-only kinds gspo's report names (or that it names none, for a model of ``weight_bound``)."""
    return [f"- {r['model']}: {label + suffix}: {r['failed'][label + suffix]}" for label in NNCF_COLUMNS
            for suffix, _ in HINTS if label + suffix in r.get("failed", {})
            and "stopped_after_s" not in r.get("nncf", {}).get(label, {})] + _weight_only(r, weight_bound)


def _weight_only(r: dict, weight_bound: Collection[str]) -> list[str]:
    if r.get("weight_only_kinds"):
        shown = [k["kind"] + (f" (dropped: {k['dropped']})" if k.get("dropped") else
                              f" ({k['median_ms']:.2f} ms)" if k.get("median_ms") else "")
                 for k in r["weight_only_kinds"]]
        return [f"- {r['model']} ({r['budget']}, {r.get('precision') or PRECISION}): weight-only kinds in gspo's "
                f"report: {'; '.join(shown)}"]
    if r["model"] in weight_bound:
        return [f"- {r['model']} ({r['budget']}, {r.get('precision') or PRECISION}): gspo's report names no "
                "weight-only kind"]
    return []


_EXPLAINED = ("Each cell: speedup over the fastest fp32 run of the source (onnxruntime as gspo runs it, as installed, "
              "or OpenVINO f32 at its own, 1 or 2 threads), timed in the same rounds on the same CPU, "
              "and whether the contender holds the model's budget (`--max-error`) on the row's validation samples "
              "(ok / BREAKS). *openvino default (bf16)*: OpenVINO at its own default precision on the CPU (bf16 where "
              "the CPU has it, f32 elsewhere). *precision*: gspo's `--precision`; *samples*: calibration and validation samples "
              "each; *gspo s / budget*: gspo's own wall time of optimize beside `--time-budget`. *nncf quantize*: "
              "`nncf.quantize` on the OpenVINO model (the transformer preset on a transformer), *nncf accuracy "
              "control*: `nncf.quantize_with_accuracy_control` with the budget as its max_drop (stopped after "
              "`--nncf-timeout`); each at OpenVINO's default precision (f32 in brackets) and the quantization's "
              "wall time. *Fastest at any error*: the fastest of the reduced-precision builds gspo makes of the "
              "source for the precisions asked (every kind, every piece reduced, at the backend's default threads "
              "or `@N` threads), the budget ignored, timed in rounds of its own against the fp32 runs timed again: "
              "what a budget lets gspo reach here, short of its rewrites and the timing's noise. gspo's pick runs "
              "at its backend's default threads unless it names a count. Rows of one CPU are not comparable with "
              "another's.")


def _cpu_line(cpu: dict) -> str:
    flags = "flags not recorded" if cpu.get("flags") is None else (" ".join(cpu["flags"]) or "none of " +
                                                                  ", ".join(CPU_FLAGS) + ", amx_*")
    return f"{cpu['model']}" + (f", {cpu['cores']} cores" if cpu.get("cores") else "") + f": {flags}"


def markdown(results: dict, weight_bound: Collection[str] = ()) -> str:
    """RESULTS.md of ``results`` (:func:`merged`'s form): the CPUs and their flags at the top, then
    per CPU its commands, a table of its rows and a line on the weight-only kinds of each row that
    has them or whose model is one of ``weight_bound``."""
    cpus = {cid: cpu for cid, cpu in results["meta"]["cpus"].items() if any(r["cpu"] == cid for r in results["rows"])}
    lines = ["# Reduced precision within an accuracy budget", "", "CPUs (model, cores, the flags that matter: "
             + ", ".join(CPU_FLAGS) + ", amx_*):", ""]
    lines += [f"- {_cpu_line(cpu)}" for cpu in cpus.values()] + ["", _EXPLAINED]
    header = (["model", "budget", "precision", "samples", "fp32 best ms", "gspo pick", "gspo", "gspo s / budget"]
              + list(PEERS) + list(NNCF_COLUMNS) + ["fastest at any error"])
    for cid, cpu in cpus.items():
        rows = [r for r in results["rows"] if r["cpu"] == cid]
        lines += ["", f"## {_cpu_line(cpu)}", "", "; then ".join(f"`{c}`" for c in cpu.get("commands", []))
                  + f" (a later command measured again the rows it names), last on {cpu.get('date')} "
                  f"(onnxruntime {cpu.get('onnxruntime')}).", "",
                  "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += [_table_row(r) for r in rows]
        notes = [line for r in rows for line in _row_notes(r, weight_bound)]
        lines += [""] + notes if notes else []
    return "\n".join(lines) + "\n"


