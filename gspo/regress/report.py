"""What a gate run writes for CI: JSON, JUnit XML, a Markdown table, a plot, the terminal table.

Every file goes through :func:`gspo.outputs.atomic_write`; the command checks the paths before
any work (:func:`gspo.outputs.check_outputs`).
"""

from __future__ import annotations

import json
import math
import os
import xml.etree.ElementTree as ET

from gspo.errors import GspoError
from gspo.outputs import atomic_write
from gspo.regress.accuracy import accuracy_line
from gspo.regress.gate import GateRun
from gspo.regress.job import ERROR, Result

__all__ = ["to_json", "write_json", "write_junit", "markdown", "write_markdown", "write_plot", "table"]


def _finite(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def to_json(run: GateRun) -> dict:
    """The whole run as JSON: versions, machine, settings, and per model every round's samples
    and the statistics."""
    return _finite({
        "modelset": str(run.modelset.path), "mode": run.mode, "engine": run.engine, "against": run.against,
        "record": run.record, "versions": run.versions, "machine": run.machine, "seconds": run.seconds,
        "exit_code": run.exit_code, "notes": run.notes,
        "models": [r.to_json() for r in run.results],
    })


def write_json(run: GateRun, path: str | os.PathLike, overwrite: bool = False) -> None:
    """Write :func:`to_json` to ``path``."""
    atomic_write(path, json.dumps(to_json(run), indent=1) + "\n", overwrite=overwrite)


def _ratio(d) -> str:
    return f"x{d.ratio:.3f} [{d.low:.3f}, {d.high:.3f}]" if d is not None else "-"


def _row(r: Result) -> list[str]:
    rounds = r.vs_source.rounds if r.vs_source else 0
    opt = "reused" if r.reused else f"{r.seconds.get('optimize', 0):.1f}"
    return [r.name, r.verdict, _ratio(r.vs_baseline), _ratio(r.vs_source), str(rounds or "-"), opt,
            f"{r.seconds.get('total', 0):.1f}"]


_HEADER = ["model", "verdict", "vs baseline [95% CI]", "vs source [95% CI]", "rounds", "optimize s", "total s"]


def table(run: GateRun) -> str:
    """The terminal table: one line per model, a line per reason, one per model's accuracy
    (reduced-precision entries), and the summary."""
    rows = [_HEADER] + [_row(r) for r in run.results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADER))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    for r in run.results:
        if r.reason and r.verdict not in ("ok", "recorded"):
            lines.append(f"{r.name}: {r.reason}")
    lines += [accuracy_line(r.name, r.accuracy) for r in run.results if r.accuracy is not None]
    lines.append(summary(run))
    return "\n".join(lines)


def summary(run: GateRun) -> str:
    """One line: how many models per verdict, and the exit code's meaning."""
    counts: dict[str, int] = {}
    for r in run.results:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    parts = ", ".join(f"{n} {v}" for v, n in counts.items())
    failed = [r.name for r in run.results if r.failed or r.verdict == ERROR]
    tail = f"; FAILED: {', '.join(failed)}" if failed else ""
    return f"{len(run.results)} models in {run.seconds:.0f} s: {parts}{tail}"


def markdown(run: GateRun) -> str:
    """The table a CI job summary or a pull-request comment shows."""
    head = "| " + " | ".join(_HEADER) + " |\n|" + "---|" * len(_HEADER) + "\n"
    body = "".join("| " + " | ".join(_md_cell(c) for c in _row(r)) + " |\n" for r in run.results)
    reasons = "".join(f"- **{r.name}** ({r.verdict}): {r.reason}\n" for r in run.results
                      if r.reason and r.verdict not in ("ok", "recorded"))
    reasons += "".join(f"- {_md_cell(accuracy_line(r.name, r.accuracy))}\n" for r in run.results
                       if r.accuracy is not None)
    v = run.versions
    versions = f"gspo {v.get('gspo')}, onnxruntime {v.get('onnxruntime')}, OpenVINO {v.get('openvino') or '-'}"
    return (f"### gspo regress: {summary(run)}\n\n{head}{body}\n{reasons}\n"
            f"Ratios are candidate / reference latency over paired interleaved rounds (> 1: slower); "
            f"{versions}; {run.machine.get('device')}.\n")


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def write_markdown(run: GateRun, path: str | os.PathLike, overwrite: bool = False) -> None:
    """Write :func:`markdown` to ``path``."""
    atomic_write(path, markdown(run), overwrite=overwrite)


def write_junit(run: GateRun, path: str | os.PathLike, overwrite: bool = False) -> None:
    """JUnit XML: one test case per model; a failure (REGRESSED, SLOWER THAN SOURCE, NOT
    EQUIVALENT, INACCURATE) or an error (ERROR) with the figures; suspicious models pass with their figures
    in ``system-out``."""
    suite = ET.Element("testsuite", name="gspo regress", tests=str(len(run.results)),
                       failures=str(sum(r.failed for r in run.results)),
                       errors=str(sum(r.verdict == ERROR for r in run.results)), time=f"{run.seconds:.3f}")
    for r in run.results:
        case = ET.SubElement(suite, "testcase", classname="gspo.regress", name=r.name,
                             time=f"{r.seconds.get('total', 0):.3f}")
        figures = f"{r.verdict}: {r.reason}" if r.reason else r.verdict
        if r.failed:
            ET.SubElement(case, "failure", message=r.verdict, type=r.verdict).text = figures
        elif r.verdict == ERROR:
            ET.SubElement(case, "error", message=r.reason[:200], type=ERROR).text = figures
        else:
            ET.SubElement(case, "system-out").text = figures
    atomic_write(path, ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n", overwrite=overwrite)


def write_plot(run: GateRun, path: str | os.PathLike, overwrite: bool = False) -> None:
    """Each model's ratio to its baseline with its 95% interval, and its threshold line."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise GspoError("--plot needs matplotlib: pip install 'gspo[plot]'") from None
    rows = [r for r in run.results if r.vs_baseline is not None]
    if not rows:
        raise GspoError("--plot: no model was timed against a baseline")
    fig, ax = plt.subplots(figsize=(max(4, 0.8 * len(rows) + 2), 3.5))
    for x, r in enumerate(rows):
        d = r.vs_baseline
        color = "tab:red" if r.failed else ("tab:orange" if r.verdict == "suspicious" else "tab:blue")
        ax.errorbar([x], [d.ratio], yerr=[[d.ratio - d.low], [d.high - d.ratio]], fmt="o", color=color, capsize=4)
        ax.hlines(1 + d.threshold, x - 0.4, x + 0.4, colors="tab:red", linestyles="dashed")
    ax.axhline(1.0, color="gray", linewidth=0.8)
    ax.set_xticks(range(len(rows)), [r.name for r in rows], rotation=30, ha="right")
    ax.set_ylabel("candidate / baseline latency")
    ax.set_title("gspo regress (dashed: threshold)")
    fig.tight_layout()
    from gspo.outputs import replacing

    with replacing(path, overwrite=overwrite) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)
