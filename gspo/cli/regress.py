"""The regress command: the CI gate on a model set (measured, or by the cost model's estimate)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import click

from gspo.cli.common import Number, cli, handle_errors, progress_printer
from gspo.errors import GspoError
from gspo.outputs import check_outputs


def _echo_progress(total: int, work: str):
    def show(event: str, k: int, name: str, result) -> None:
        if event == "start":
            click.echo(f"regress [{k + 1}/{total}] {name}: {work}...", err=True)
            return
        d = result.vs_baseline or result.vs_source
        figure = f" x{d.ratio:.3f}" if d is not None else ""
        click.echo(f"regress [{k + 1}/{total}] {name}: {result.verdict}{figure} "
                   f"({result.seconds.get('total', 0):.1f} s{', on ' + result.node if result.node else ''})", err=True)
    return show


def _models(mset) -> list[Path]:
    """The set's model files (their external data is read too: no output may go over it)."""
    return [m.path for m in mset.models if m.path is not None]


def _estimate(modelset, baseline, update, tolerance, json_file, force) -> int:
    from gspo.regress.estimate import (
        check_baseline_output,
        known_baseline,
        run_estimate,
        write_baseline,
    )
    from gspo.regress.modelset import load_modelset

    mset = load_modelset(modelset)
    base_path = Path(baseline) if baseline else Path(modelset).with_suffix(".baseline.json")
    check_outputs({"--json": json_file}, mset.reads() + [base_path], force, models=_models(mset))
    if update:
        check_baseline_output(base_path, mset, force)
    known = None if update else known_baseline(base_path)
    rows = run_estimate(mset, known, tolerance, progress_printer("regress"))
    failed = [r for r in rows if r.status == "NOT EQUIVALENT" or (not update and r.status != "ok")]
    if update:
        write_baseline(base_path, rows)
    if json_file:
        from gspo.outputs import atomic_write

        atomic_write(json_file, json.dumps({"baseline": str(base_path), "rows": [r.to_json() for r in rows]},
                                           indent=1) + "\n", overwrite=force)
    click.echo(f"{'model':<20} {'status':<15} {'est. speedup':>12} {'baseline':>9} {'measured':>9}  substitutions")
    for r in rows:
        est = f"{r.estimated_speedup:.4f}" if r.estimated_speedup else "-"
        ref = f"{r.baseline_speedup:.4f}" if r.baseline_speedup else "-"
        meas = f"{r.measured_speedup:.3f}" if r.measured_speedup else "-"
        subs = ", ".join(f"{k} {v}" for k, v in r.substitutions.items()) or "none"
        status = "updated" if update and r.estimated_speedup is not None else r.status
        click.echo(f"{r.name:<20} {status:<15} {est:>12} {ref:>9} {meas:>9}  {subs}")
        if r.detail and not update:
            click.echo(f"{'':<20} {r.detail}")
    if update:
        click.echo(f"wrote {base_path}")
    if failed:
        click.echo(f"FAILED: {', '.join(r.name for r in failed)}")
        return 1
    return 0


def _warn_random_data(mset) -> None:
    """Once per reduced-precision model whose calibration or validation data are random: say so."""
    from gspo.regress.accuracy import data_warning

    for spec in mset.models:
        warning = data_warning(spec)
        if warning:
            click.echo(f"warning: model {spec.name!r}: {warning}", err=True)


def _measured(opts: SimpleNamespace, outputs: dict[str, str | None]) -> int:
    """The measured gate (``--record`` / ``--against``) with the command's options ``opts``."""
    from gspo.regress import report
    from gspo.regress.gate import Engine, GateSettings, run_gate
    from gspo.regress.modelset import load_modelset
    from gspo.regress.store import INDEX, artifact_paths

    against, record, force = opts.against, opts.record, opts.force
    mset = load_modelset(opts.modelset, opts.threshold, opts.rounds)
    read = mset.reads()
    if against:
        read += [Path(against) / INDEX] + [p for s in mset.models for p in artifact_paths(against, s.name).values()]
    check_outputs(outputs, read, force, models=_models(mset))
    if outputs["--plot"] and not against:
        raise GspoError("--plot shows ratios to a baseline: it needs --against DIR")
    run = run_gate(opts.modelset, against, record, force, not opts.reoptimize, Engine(opts.engine, opts.address),
                   GateSettings(opts.threshold, opts.rounds),
                   _echo_progress(len(mset.models), "optimizing and timing" if against else "optimizing"))
    for note in run.notes:
        click.echo(f"note: {note}")
    _warn_random_data(mset)
    click.echo(report.table(run))
    writers = {"--json": report.write_json, "--junit": report.write_junit, "--markdown": report.write_markdown,
               "--plot": report.write_plot}
    for option, path in outputs.items():
        if path:
            writers[option](run, path, overwrite=force)
            click.echo(f"wrote {path}")
    if record:
        click.echo(f"recorded {sum(r.candidate is not None for r in run.results)} model(s) in {record}")
    return run.exit_code


@cli.command()
@click.argument("modelset", type=click.Path())
@click.option("--against", type=click.Path(file_okay=False), metavar="DIR",
              help="Time every model against the baseline artifacts in DIR (made by --record).")
@click.option("--record", type=click.Path(file_okay=False), metavar="DIR",
              help="Store every model's optimized result (model, report, sha256, versions, machine) in DIR.")
@click.option("--estimate", is_flag=True, help="The deterministic check by the cost model's estimate (no timing).")
@click.option("--threshold", type=Number(0, 1, low_open=True), default=None,
              help="Slowdown allowed before a model fails, for models that set none [default: the set's, else 0.05].")
@click.option("--rounds", type=click.IntRange(min=6), default=None,
              help="Interleaved rounds per model before the one extension [default: the set's, else 30].")
@click.option("--reoptimize", is_flag=True, help="Optimize every model again even when a stored result is still valid.")
@click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="Run the models here, or one job per model on a Ray cluster (pip install 'gspo[ray]').")
@click.option("--address", metavar="ADDR", help="The Ray cluster's address (with --engine ray), e.g. auto.")
@click.option("--json", "json_file", type=click.Path(dir_okay=False), help="Write every round's samples, the statistics and the versions.")
@click.option("--junit", type=click.Path(dir_okay=False), help="Write JUnit XML (one test case per model).")
@click.option("--markdown", type=click.Path(dir_okay=False), help="Write the table as Markdown (a job summary, a PR comment).")
@click.option("--plot", type=click.Path(dir_okay=False), help="Write a PNG of each model's ratio to its baseline (pip install 'gspo[plot]').")
@click.option("--baseline", type=click.Path(dir_okay=False), help="With --estimate: the baseline file [default: MODELSET's name + .baseline.json].")
@click.option("--update", is_flag=True, help="With --estimate: write the results as the new baseline.")
@click.option("--tolerance", type=Number(0), default=0.02, show_default=True, help="With --estimate: allowed drop of estimated speedup.")
@click.option("--force", is_flag=True, help="Replace existing artifacts and output files.")
@handle_errors
def regress(**options):
    """Guard a model set's latency: exit 1 when a model got slower than its baseline, slower than
    its source, or not equivalent (or, for an entry with "precision", outside its "max_error"
    accuracy budget on its validation data: INACCURATE); 2 when one could not be optimized or timed.

    --record DIR stores each model's optimized result. --against DIR optimizes every model again
    (or reuses the stored result when the model, the options and the versions are unchanged) and
    times, interleaved in one process, the source, the baseline artifact and the candidate; a
    model REGRESSED when its median ratio to the baseline is past the threshold and a sign test
    over the rounds says so at 1%. --estimate is the deterministic check by the cost model.

    \b
    Example:
        gspo regress models.json --record baseline/
        gspo regress models.json --against baseline/ --junit junit.xml --markdown summary.md
        gspo regress models.json --against baseline/ --engine ray --address auto
        gspo regress data/modelset.json --estimate
    """
    opts = SimpleNamespace(**options)
    if opts.estimate:
        measured = (opts.against, opts.record, opts.reoptimize, opts.junit, opts.markdown, opts.plot)
        if any(measured) or opts.engine != "local":
            raise GspoError("--estimate takes only --baseline, --update, --tolerance, --json and --force")
        sys.exit(_estimate(opts.modelset, opts.baseline, opts.update, opts.tolerance, opts.json_file, opts.force))
    if opts.baseline or opts.update:
        raise GspoError("--baseline and --update belong to --estimate (the measured gate uses --record DIR)")
    if opts.engine == "ray" and not opts.address:
        raise GspoError("--engine ray needs --address (e.g. auto, or ray://HOST:10001)")
    if opts.record and opts.against and Path(opts.record).resolve() == Path(opts.against).resolve():
        raise GspoError(f"{opts.record}: --record and --against name the same folder; record into another one")
    outputs = {"--json": opts.json_file, "--junit": opts.junit, "--markdown": opts.markdown, "--plot": opts.plot}
    sys.exit(_measured(opts, outputs))
