"""The calibrate command: microbenchmarks into a cost profile, and its evaluation."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import click

from gspo.cli.common import (
    EVALUATION_PASSES,
    MAX_SECONDS,
    Number,
    cli,
    cuda_runtime_option,
    handle_errors,
    progress_printer,
)
from gspo.errors import GspoError
from gspo.outputs import atomic_write, check_outputs


def _evaluate(opts: SimpleNamespace, runtime: str) -> None:
    """``calibrate --evaluate``: a profile's error and rank correlation on held-out subgraphs
    (``opts``: the command's options)."""
    from gspo.costmodel import device_description, load_profile
    from gspo.costmodel.evaluate import evaluate

    evaluate_profile, report, force = opts.evaluate_profile, opts.report, opts.force
    passes = EVALUATION_PASSES if opts.passes is None else opts.passes
    if passes < 2:
        raise GspoError("--passes must be at least 2 with --evaluate (the noise is pass 2 against pass 1)")
    check_outputs({"--report": report}, (evaluate_profile,), force)
    profile = load_profile(evaluate_profile, device_description("cpu"), runtime, opts.foreign_profile)
    results = evaluate(profile, opts.count, progress_printer("measuring held-out subgraphs"), passes=passes)
    # reference_s: the unit of every measured time in the report (the profile's speed reference).
    data = {"profile": evaluate_profile, "device": profile.device, "reference_s": profile.reference_s,
            "results": [r.to_json() for r in results]}
    if report:
        atomic_write(report, json.dumps(data, indent=1) + "\n", overwrite=force)
    if opts.as_json:
        click.echo(json.dumps({**data, "results": [{k: v for k, v in r.items() if k != "rows"} for r in data["results"]]}, indent=2))
        return
    for r in results:
        noise = (f"; test-retest noise {100 * r.noise:.2f}%, left in the mean of {passes} passes"
                 f" {100 * r.noise_of_mean:.2f}%") if r.noise is not None else ""
        click.echo(f"{r.kind:<10} {len(r.measured):>4} subgraphs  mean error {100 * r.mape:6.2f}%  Spearman {r.spearman:.3f}"
                   f"  (raw timings, drift not cancelled: {100 * r.mape_raw:.2f}%{noise})")


@cli.command()
@click.option("--device", type=click.Choice(["cpu"]), default=None, help="Calibrate on the CPU.")
@click.option("--gpu", "gpu_name", metavar="NAME", help="Calibrate on the CUDA device; save the profile as NAME.")
@cuda_runtime_option
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Profile file [default: the user cache].")
@click.option("--budget", type=Number(0, MAX_SECONDS / 60, low_open=True), default=15.0, show_default=True,
              help="Minutes to spend measuring at most (at most a week).")
@click.option("--db", "db_path", type=click.Path(dir_okay=False), help="Calibration database (SQLite) [default: user cache].")
@click.option("--evaluate", "evaluate_profile", metavar="PROFILE", help="Measure held-out subgraphs and report accuracy.")
@click.option("--count", type=click.IntRange(min=5), default=100, show_default=True, help="Held-out subgraphs of each kind.")
@click.option("--report", type=click.Path(dir_okay=False), help="With --evaluate: write the full report (JSON).")
@click.option("--passes", type=click.IntRange(min=1), default=None,
              help="Separate measuring passes: over the suite when calibrating (each benchmark's median is fitted) "
                   "[default: 3]; with --evaluate over the held-out set (their mean is the measured time; at least 2) "
                   f"[default: {EVALUATION_PASSES}].")
@click.option("--force", is_flag=True, help="Overwrite OUTPUT or REPORT if they exist.")
@click.option("--foreign-profile", is_flag=True,
              help="With --evaluate: use a profile made on another device or onnxruntime version.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def calibrate(**options):
    """Measure microbenchmarks on the device and fit a cost profile (resumable).

    Measurements are cached in a SQLite database: an interrupted calibration resumes, and a
    re-run measures only what is new. Every benchmark is measured in --passes separate passes
    over the suite (minutes apart on a drifting machine) and the fit takes each one's median. --evaluate reports the mean absolute percentage error and
    Spearman rank correlation of a profile on held-out subgraphs cut from the zoo models.

    \b
    Example:
        gspo calibrate --device cpu -o cpu.json --budget 10
        gspo calibrate --device cpu -o quick.json --passes 1
        gspo calibrate --evaluate cpu.json --json
    """
    from gspo.cache import calibration_db_path, user_profiles_dir
    from gspo.costmodel import device_description, save_profile
    from gspo.runtime import runtime_version

    opts = SimpleNamespace(**options)
    runtime = runtime_version()
    if opts.evaluate_profile:
        _evaluate(opts, runtime)
        return
    gpu_name, output, force, cuda_runtime = opts.gpu_name, opts.output, opts.force, None
    if gpu_name:
        from gspo.runtime.cuda.choice import require_cuda, runtime_key

        cuda_runtime = require_cuda(opts.cuda_runtime, option="--gpu")
        runtime = runtime_key(cuda_runtime)  # the GPU profile is keyed by the runtime that measured it
    elif opts.device is None:
        raise GspoError("say what to calibrate: --device cpu, --gpu NAME, or --evaluate PROFILE")
    from gspo.costmodel.calibrate import DEFAULT_CALIBRATION_PASSES, CalibrationConfig
    from gspo.costmodel.calibrate import calibrate as run_calibration

    backend = "cuda" if gpu_name else "cpu"
    desc = f"cuda:{gpu_name}" if gpu_name else device_description("cpu")
    out = Path(output) if output else user_profiles_dir() / f"{gpu_name or 'cpu'}.json"
    db = opts.db_path or str(calibration_db_path())
    check_outputs({"-o": out}, (db,), force or not output)
    cfg = CalibrationConfig(device=desc, runtime=runtime, db_path=db, budget_s=opts.budget * 60, backend=backend,
                            cuda_runtime=cuda_runtime,
                            passes=DEFAULT_CALIBRATION_PASSES if opts.passes is None else opts.passes)
    import time as _time

    start = _time.perf_counter()
    profile = run_calibration(cfg, progress_printer("calibrating"))
    save_profile(profile, out, overwrite=force or not output)
    click.echo(f"wrote {out} ({profile.meta['ops']} ops, {profile.meta['branches']} multi-branch subgraphs, "
               f"{_time.perf_counter() - start:.0f} s; database {db})")
    if not gpu_name and out.resolve() == (user_profiles_dir() / "cpu.json").resolve():
        click.echo("gspo optimize ranks with it by default on this machine (before the profile shipped with gspo)")


# -------------------------------------------------------------------- convert
