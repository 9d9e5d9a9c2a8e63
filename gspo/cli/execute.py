"""Commands that run models: run (multi-stream runtime) and bench (A/B timing)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import click

from gspo.cli.common import (
    MAX_JOBS,
    SEED,
    cli,
    device_option,
    explaining,
    handle_errors,
    input_shape_option,
    inputs_option,
    load_model,
    parse_streams,
    streams_option,
)
from gspo.errors import GspoError
from gspo.outputs import check_outputs, replacing


@cli.command(name="run")
@click.argument("model", type=click.Path())
@streams_option
@device_option
@inputs_option
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of random inputs.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the outputs here (.npz).")
@click.option("--timeline", type=click.Path(dir_okay=False), help="Plot when each segment ran (PNG, needs gspo[plot]).")
@click.option("--force", is_flag=True, help="Overwrite OUTPUT / TIMELINE.")
@input_shape_option
@handle_errors
def run_cmd(**options):
    """Run MODEL with the multi-stream runtime and print (or save) its outputs.

    \b
    Example:
        gspo run optimized.onnx --inputs in.npz -o out.npz
        gspo run nasnet.onnx --streams 2 --timeline timeline.png
    """
    import time

    from gspo.runtime import load_inputs, make_executor, random_inputs

    opts = SimpleNamespace(**options)
    model, device, inputs_file, seed = opts.model, opts.device, opts.inputs_file, opts.seed
    output, timeline, force = opts.output, opts.timeline, opts.force
    n = parse_streams(opts.streams)
    check_outputs({"-o": output, "--timeline": timeline}, (model, inputs_file), force, models=[model])
    graph = load_model(model, opts.input_shapes)
    others = [v.name for v in graph.outputs if v.type_proto]
    if output and others:
        raise GspoError(f"output {others[0]!r} is not a tensor (a sequence, map or optional) and an .npz "
                        "holds tensors only; run without -o to see it")
    feeds = load_inputs(inputs_file, graph) if inputs_file else random_inputs(graph, seed)
    executor = make_executor(graph, n, device, runtime=opts.cuda_runtime)
    if timeline and executor.num_streams == 1:
        executor.close()
        raise GspoError("--timeline needs more than one stream (there is nothing to overlap)")
    try:
        trace: list = []
        start = time.perf_counter()
        with explaining((graph,), None if inputs_file else seed):
            outputs = executor.run(feeds, trace=trace) if device == "cpu" else executor.run(feeds)
        seconds = time.perf_counter() - start
    finally:
        executor.close()
    placement = getattr(executor, "placement", None)
    where = ", ".join(f"{n} ops on {b}" for b, n in placement.counts(graph).items()) if placement else device
    click.echo(f"ran {graph.name} on {executor.num_streams} stream(s), {where}: {seconds * 1e3:.2f} ms "
               "(one cold run; use gspo bench to time)")
    for name, arr in outputs.items():
        click.echo(f"  {name}: {_describe(arr)}")
    if output:
        _write_outputs(output, outputs, force)
    if timeline:
        _plot_timeline(trace, executor, timeline, force)
        click.echo(f"wrote {timeline}")


def _write_outputs(path, outputs: dict, force: bool) -> None:
    """``gspo run -o``: the outputs as an .npz, each under a safe entry name (said when it differs)."""
    from gspo.runtime.npz import write_npz

    with replacing(path, force) as tmp, open(tmp, "wb") as f:  # a file object: savez adds no ".npz"
        renamed = write_npz(f, outputs)
    for name, entry in renamed.items():
        click.echo(f"note: output {name!r} is saved as {entry!r} in {path} (an archive entry holds no '/', "
                   "'\\' or '..': they are percent-encoded; urllib.parse.unquote gives the name back)")
    click.echo(f"wrote {path}")


def _describe(value) -> str:
    """One line about an output: a tensor's type, shape and mean; what another value holds."""
    import numpy as np

    if isinstance(value, np.ndarray):
        mean = f" mean {float(np.mean(value)):.6g}" if value.dtype.kind in "biuf" and value.size else ""
        return f"{value.dtype}{list(value.shape)}{mean}"
    if value is None:
        return "none (an empty optional)"
    if isinstance(value, dict):
        return f"map of {len(value)} entries"
    kinds = sorted({"map" if isinstance(v, dict) else type(v).__name__ for v in value})
    return f"sequence of {len(value)} ({', '.join(kinds) or 'empty'})"


def _plot_timeline(trace, executor, path, force: bool) -> None:

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise GspoError("--timeline needs matplotlib: pip install 'gspo[plot]'") from None
    t0 = min(t.wait_start for t in trace)
    fig, ax = plt.subplots(figsize=(10, 1 + 0.5 * executor.num_streams))
    for t in trace:
        ax.barh(t.stream, (t.start - t.wait_start) * 1e3, left=(t.wait_start - t0) * 1e3, color="#dddddd")
        ax.barh(t.stream, (t.end - t.start) * 1e3, left=(t.start - t0) * 1e3, color="#4477aa", edgecolor="white")
    ax.set_xlabel("ms (grey: waiting for another stream)")
    ax.set_yticks(range(executor.num_streams))
    ax.set_ylabel("stream")
    ax.invert_yaxis()
    fig.tight_layout()
    with replacing(path, force) as tmp, open(tmp, "wb") as f:
        fig.savefig(f, dpi=120, format=Path(path).suffix[1:].lower() or "png")
    plt.close(fig)


@cli.command(name="bench")
@click.argument("models", nargs=-1, required=True, type=click.Path())
@click.option("--streams", "streams_list", default="1", show_default=True, metavar="LIST",
              help="Comma-separated stream settings to time each model with, e.g. '1,auto,2'.")
@device_option
@click.option("--runs", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--warmup", type=click.IntRange(min=0), default=3, show_default=True)
@click.option("--threads", type=click.IntRange(0, MAX_JOBS), default=0, show_default=True,
              help=f"Intra-op threads per session, at most the CPU cores ({MAX_JOBS}) "
                   "(0: the setting gspo optimize saved in the model, else onnxruntime's default).")
@click.option("--seed", type=SEED, default=0, show_default=True)
@inputs_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@input_shape_option
@handle_errors
def bench_cmd(**options):
    """Time models against each other, interleaved in one process (A B B A ...).

    Prints the median and minimum latency of each (model, streams) pair and its speed ratio
    against the first row (above 1 = faster). Idle onnxruntime threads do not spin.

    \b
    Example:
        gspo bench model.onnx optimized.onnx --streams 1,auto --runs 50
        gspo bench bert.onnx bert_gspo.onnx --inputs feeds.npz
    """
    from gspo.runtime import (
        SessionConfig,
        interleaved,
        load_inputs,
        make_executor,
        random_inputs,
        timed_runner,
    )

    opts = SimpleNamespace(**options)
    device, runs, warmup, seed, inputs_file = opts.device, opts.runs, opts.warmup, opts.seed, opts.inputs_file
    settings = [parse_streams(x) for x in opts.streams_list.split(",") if x.strip()]
    if not settings:
        raise GspoError("--streams needs at least one setting")
    graphs = [(m, load_model(m, opts.input_shapes)) for m in opts.models]
    first_inputs = {(v.name, v.dtype, v.shape) for v in graphs[0][1].inputs}
    for m, g in graphs[1:]:
        if {(v.name, v.dtype, v.shape) for v in g.inputs} != first_inputs:
            raise GspoError(f"{m}: its inputs differ from {graphs[0][0]}'s; bench compares models with the same inputs")
    feeds = load_inputs(inputs_file, graphs[0][1]) if inputs_file else random_inputs(graphs[0][1], seed)
    config = SessionConfig(intra_op_threads=opts.threads)
    executors, runners = [], []
    try:
        for m, g in graphs:
            for n in settings:
                ex = make_executor(g, n, device, config, runtime=opts.cuda_runtime)
                executors.append(ex)
                label = f"{m} [streams={ex.num_streams}{'' if n else ', auto'}]"
                runners.append((label, timed_runner(ex, feeds)))  # on CUDA: device time, inputs uploaded once
        click.echo(f"timing {len(runners)} configurations x {runs} runs ...", err=True)
        with explaining([g for _, g in graphs], None if inputs_file else seed):
            timings = interleaved(runners, runs, warmup)
    finally:
        for ex in executors:
            ex.close()
    rows = [{"config": t.label, "median_ms": t.median * 1e3, "min_ms": t.min * 1e3,
             "ratio": t.ratio_to(timings[0])} for t in timings]
    if opts.as_json:
        click.echo(json.dumps({"runs": runs, "warmup": warmup, "device": device, "rows": rows}, indent=2))
        return
    width = max(len(r["config"]) for r in rows)
    click.echo(f"{'configuration':<{width}} {'median ms':>10} {'min ms':>9} {'vs first':>9}")
    for r in rows:
        click.echo(f"{r['config']:<{width}} {r['median_ms']:>10.3f} {r['min_ms']:>9.3f} {r['ratio']:>8.3f}x")


# ------------------------------------------------------------------- optimize
