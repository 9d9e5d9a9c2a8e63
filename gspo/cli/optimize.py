"""The optimize command."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING

import click

from gspo.cli.common import (
    MAX_JOBS,
    MAX_SECONDS,
    SEED,
    Number,
    cli,
    device_option,
    handle_errors,
    input_shape_option,
    inputs_option,
    progress_printer,
)
from gspo.errors import GspoError
from gspo.outputs import OutputError, atomic_write, check_outputs
from gspo.search.options import (
    DeviceOptions,
    MaxError,
    OptimizeConfig,
    PrecisionOptions,
    SearchOptions,
    TimingOptions,
    VerifyOptions,
    default,
    precisions_of,
)

if TYPE_CHECKING:
    from gspo.search.report import Report


def _precisions(ctx, param, value: str | None) -> tuple[str, ...]:
    """``--precision``'s list, split as it is read (the names are checked with the other options)."""
    return precisions_of(value) if value is not None else ()


@cli.command(name="optimize")
@click.argument("model", type=click.Path())
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Where to write the optimized model.")
@device_option
@click.option("--profile", help="Cost profile: a name (shipped with gspo or in the user cache) or a path [default: cpu; "
                   "with --device cuda, the newest GPU profile in the user cache].")
@click.option("--foreign-profile", is_flag=True,
              help="Use a profile made on another device or onnxruntime version (with a warning).")
@click.option("--alpha", type=Number(1), default=default(SearchOptions, "alpha"), show_default=True, help="Explore graphs up to alpha x the best cost.")
@click.option("--budget", type=click.IntRange(min=0), default=default(SearchOptions, "max_expansions"), show_default=True, help="Graphs expanded per piece at most.")
@click.option("--time-budget", type=Number(0, MAX_SECONDS, low_open=True), default=default(TimingOptions, "time_budget"),
              show_default=True,
              help="Seconds for the whole optimization, at most a week (anytime: the best so far is verified and written).")
@click.option("-t", "--threshold", type=click.IntRange(min=2), default=None, help="Largest piece in ops [default: 64].")
@click.option("--max-streams", type=click.IntRange(min=1), default=None, help="Stream cap [default: the CPU cores; 4 on cuda].")
@click.option("--jobs", type=click.IntRange(0, MAX_JOBS), default=default(SearchOptions, "jobs"),
              help=f"Processes searching pieces, at most the CPU cores ({MAX_JOBS}) [default: all of them].")
@click.option("--no-streams", is_flag=True, help="Substitutions only (the TASO-like ablation).")
@click.option("--no-rules", is_flag=True, help="Streams only (the Nimble-like ablation).")
@click.option("--seed", type=SEED, default=default(VerifyOptions, "seed"), show_default=True, help="Seed of the random verification inputs.")
@click.option("--select", type=click.Choice(["measured", "estimated"]), default=default(TimingOptions, "select"),
              show_default=True,
              help="Pick verified candidates by measured latency, or by the cost model (the same bytes for "
                   "the same input, seed and profile, as long as the time budget does not cut the search).")
@click.option("--report", type=click.Path(dir_okay=False), help="Write the full report (JSON).")
@inputs_option
@click.option("--backends", metavar="LIST", default=None,
              help="Backends to place the model or its pieces on: ort, openvino, cuda (e.g. 'ort,openvino') "
                   "[default: every one that can run here].")
@click.option("--force", is_flag=True, help="Overwrite OUTPUT and REPORT if they exist.")
@input_shape_option
@click.option("--precision", metavar="LIST", default=None, callback=_precisions,
              help="Also search reduced precision, per piece: bf16 (OpenVINO), int8 (QDQ, dynamic, weight-only), "
                   "int4 (weight-only: MatMul weights, for weight-bound models), e.g. "
                   "'bf16,int8'; on --device cuda --cuda-runtime torch: fp16, bf16, tf32; needs --max-error "
                   "[default: exact fp32 only].")
@click.option("--max-error", metavar="SPEC", default=None,
              help="Accuracy budget per output, measured on the validation data: nmse, rel_l2, maxrel, cosine, "
                   "topK, e.g. 'nmse=1e-3' or 'logits:top1=0.99,cosine=0.999'; an output whose name holds ',' or "
                   "'=' in double quotes: '\"out,1\":nmse=1e-2,nmse=1e-3'.")
@click.option("--calibration", type=click.Path(exists=True), default=None,
              help="Calibration samples: an .npz (one array per input) or a folder of them (at most 256 and "
                   "512 MiB are used, the first by file name, with a warning) [default: random, with a warning].")
@click.option("--validation", type=click.Path(exists=True), default=None,
              help="Validation samples the budget is judged on, never the calibration data (.npz or folder; "
                   "at most 256 and 512 MiB) [default: random, with a warning].")
@handle_errors
def optimize_cmd(model, output, **options):
    """Make MODEL faster: joint substitutions and streams, verified, never slower.

    Folds the exporter's constants and shape arithmetic, partitions the model, searches each
    piece (rules and streams ranked by the cost profile), verifies the best candidates by
    running them on the values that reach each piece (rejecting, with the reason, any that
    onnxruntime refuses or that compute something else), merges, checks the whole model against
    the original and writes OUTPUT (a mismatch writes nothing and exits 1). Dynamic input
    dimensions get defaults (1 for a batch, 128 otherwise) unless pinned with --input-shape; the
    output keeps them dynamic when it computes the same at another size.

    With OpenVINO installed (pip install 'gspo[openvino]'), or onnxruntime-gpu and an NVIDIA GPU
    (pip install 'gspo[gpu]'), the whole model and each piece are also timed there; when a
    placement off onnxruntime's CPU provider wins, it is saved in the model and gspo run /
    gspo bench follow it.

    \b
    Example:
        gspo optimize model.onnx -o fast.onnx --report report.json
        gspo optimize nasrnn.onnx -o fast.onnx --no-streams --time-budget 60
        gspo optimize resnet50.onnx -o fast.onnx --backends ort,openvino
        gspo optimize bert.onnx -o fast.onnx --input-shape input_ids=1,64 --inputs feeds.npz
        gspo optimize nasnet.onnx -o fast.onnx --device cuda --profile a100
        gspo optimize m.onnx -o fast.onnx --precision bf16,int8 --max-error top1=0.99 --validation val/
    """
    began = time.perf_counter()  # the time budget counts from here: the imports below took 0.5-0.7 s
    from gspo import ir
    from gspo.runtime.inputs import read_npz
    from gspo.search import OptimizeError, optimize
    from gspo.search.dynamic import DECLARED

    o = options
    report, force, inputs_file = o["report"], o["force"], o["inputs_file"]
    check_outputs({"-o": output, "--report": report}, {"MODEL": model, "--inputs": inputs_file,
                  "--calibration": o["calibration"], "--validation": o["validation"]}, force,
                  models=[model], model_outputs=["-o"])
    if o["no_streams"] and o["no_rules"]:
        raise GspoError("--no-streams and --no-rules together leave nothing to optimize")
    shapes = ir.parse_input_shapes(o["input_shapes"])
    feeds = read_npz(inputs_file) if inputs_file else None
    config = _config(o, _backends(o["backends"]))
    bar = progress_printer("optimizing")
    try:
        result = optimize(model, config, progress=lambda phase, d, t: bar(d, t, phase), input_shapes=shapes,
                          inputs=feeds, started=began)
    except OptimizeError as e:
        click.echo(f"gspo: error: {e}", err=True)
        sys.exit(1)
    result.save(output, overwrite=force)
    r = result.report
    if report:
        _write_report(report, r, output, force)
    for note in r.notes:
        click.echo(f"note: {note}")
    _echo_outcome(r, pinned=bool(shapes) and r.dynamic_dims != DECLARED)
    click.echo(f"wrote {output}")


def _config(o: dict, backends: tuple[str, ...] | None) -> OptimizeConfig:
    """The command's options as ``optimize``'s settings (those it has no option for keep the
    records' defaults: :mod:`gspo.search.options`); ``--max-error`` parsed here, once.

    Raises:
        GspoError: a ``--max-error`` that states no budget (one line).
    """
    threshold = {"threshold": o["threshold"]} if o["threshold"] else {}
    max_error = MaxError.parse(o["max_error"]) if o["max_error"] is not None else None
    return OptimizeConfig(
        device=DeviceOptions(name=o["device"], profile=o["profile"], force_profile=o["foreign_profile"],
                             backends=backends, cuda_runtime=o["cuda_runtime"] or None),
        search=SearchOptions(alpha=o["alpha"], max_expansions=o["budget"], max_streams=o["max_streams"],
                             jobs=o["jobs"], use_rules=not o["no_rules"], use_streams=not o["no_streams"],
                             **threshold),
        verify=VerifyOptions(seed=o["seed"]),
        timing=TimingOptions(time_budget=o["time_budget"], select=o["select"]),
        precision=PrecisionOptions(precisions=o["precision"], max_error=max_error, calibration=o["calibration"],
                                   validation=o["validation"]))


def _backends(text: str | None) -> tuple[str, ...] | None:
    """``--backends`` checked (``None``: every one that can run here)."""
    if text is None:
        return None
    from gspo.runtime.backends import check_backends

    return check_backends(text.split(","))


def _write_report(path, r: Report, output, force: bool) -> None:
    """The JSON report at ``path``, under the output rules; an error says the model was written."""
    try:
        atomic_write(path, json.dumps(r.to_json(), indent=1, default=str) + "\n", overwrite=force)
    except OutputError as e:
        raise OutputError(f"{e}; the model was written to {output}") from None


def _echo_outcome(r: Report, pinned: bool) -> None:
    """The summary ``gspo optimize`` prints: latency, verdict, what changed, what was rejected."""
    rounds = f"; faster in {r.rounds_faster[0]} of {r.rounds_faster[1]} rounds" if r.rounds_faster else ""
    if r.latency_before_ms is None:
        click.echo("latency  not measured: the time budget was spent before the comparison")
    else:
        click.echo(f"latency  {r.latency_before_ms:.3f} ms -> {r.latency_after_ms:.3f} ms  (x{r.speedup:.3f}, "
                   f"measured; spread {100 * r.timing_spread:.1f}%{rounds})")
    click.echo(f"estimate {r.estimated_before_ms:.3f} ms -> {r.estimated_after_ms:.3f} ms (cost model)")
    if r.device.device == "cuda":
        entries = r.device.entries
        runtime = {"torch": "PyTorch", "ort": "onnxruntime-gpu"}.get(entries.get("runtime"), "CUDA")
        click.echo(f"measured on {entries.get('name', 'the CUDA device')} with {runtime} (CUDA events, TF32 off)")
        for f in r.device.cpu_fallback or []:
            click.echo(f"on the CPU (onnxruntime), not on the GPU: {f.op} {f.node!r}: {f.reason}")
    if r.unchanged:
        pins = " with its input shapes pinned" if pinned else ""
        how = "as measured" if r.latency_before_ms is not None else "in the time budget"
        click.echo(f"nothing beat the input {how}: the output is the input{pins}")
    elif r.verdict != "faster":
        click.echo("no measurable change: the speedup is within the timings' noise")
    subs = ", ".join(f"{k} x{v}" for k, v in r.substitutions.items()) or "none"
    click.echo(f"substitutions: {subs}")
    click.echo(f"streams: {r.streams}, syncs: {r.syncs}; pieces: {r.pieces}; "
               f"search {r.search_seconds:.1f} s, total {r.total_seconds:.1f} s")
    if not r.unchanged:
        click.echo(f"equivalent to the input: largest difference {r.max_rel_err:.2g} of an output's magnitude")
    if r.dynamic_dims:
        click.echo(f"dynamic dimensions: {r.dynamic_dims}")
    placed = {b: n for b, n in (r.placement.chosen or {}).items() if b != "ort"}
    if placed:
        ops = ", ".join(f"{n} ops on {b}" for b, n in placed.items())
        click.echo(f"placement: {ops} (saved in the model; run it with gspo run or the Python API)")
    if r.precision is not None:
        from gspo.cli.precision import echo_precision

        echo_precision(r.precision)
    if r.settings.advice:
        click.echo(f"settings: {r.settings.advice} (saved in the model; gspo run and gspo bench apply them)")
    if r.skipped:
        click.echo("skipped to hold the time budget: " + "; ".join(f"{x.stage}: {x.what}" for x in r.skipped)
                   + " (reasons in --report)")
    if r.candidates_rejected_by_verification:
        click.echo(f"verification rejected {r.candidates_rejected_by_verification} candidate(s) "
                   "(onnxruntime refused them or their outputs differed; reasons in --report)")
