"""The ``gspo`` command line: a thin click layer over the library."""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import signal
import sys
from collections import Counter
from pathlib import Path

import click

from gspo.errors import GspoError
from gspo.outputs import atomic_write, check_outputs, replacing

__all__ = ["main", "cli"]

EXIT_ERROR = 2
#: ``--jobs`` at most: one search process per core (more would share the cores and overrun the
#: time budget, which is split among the jobs as if each had a core).
MAX_JOBS = os.cpu_count() or 1
#: ``calibrate --evaluate``'s passes over the held-out set: with 4 the cross-run noise floor of a
#: run was 0.9 / 1.0 points (sequential / parallel) higher than with 6 (benchmarks/noise_floor.md,
#: twelve runs); the one run of 20 passes (12 minutes) had the lowest noise in its own mean and a
#: floor like the others' (most of the floor is between runs).
EVALUATION_PASSES = 6


class Context:
    def __init__(self, debug: bool):
        self.debug = debug


def _fail(message: str) -> None:
    click.echo(f"gspo: error: {message}", err=True)
    sys.exit(EXIT_ERROR)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so that ``finally`` blocks and pools clean up."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _on_signal(signum, _frame) -> None:
    raise Terminated(signum)


def _stop(e: BaseException) -> None:
    """Stop on an interrupt or SIGTERM: one line, exit 128 + the signal (no traceback)."""
    signum = e.signum if isinstance(e, Terminated) else signal.SIGINT
    click.echo(f"gspo: stopped ({signal.Signals(signum).name}); nothing was written", err=True)
    sys.exit(128 + signum)


def handle_errors(fn):
    """Turn :class:`GspoError` (bad input) into one line on stderr and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except GspoError as e:
            _fail(str(e))
        except BrokenPipeError:
            raise
        except KeyboardInterrupt as e:
            _stop(e)
        except MemoryError:
            _fail("out of memory")
        except Exception as e:  # a bug in gspo: one line, the traceback only with --debug
            ctx = click.get_current_context(silent=True)
            if ctx is not None and ctx.find_object(Context) and ctx.find_object(Context).debug:
                raise
            _fail(f"internal error ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
                  "rerun with --debug for the traceback and please report it")

    return wrapper


def input_shape_option(fn):
    return click.option(
        "--input-shape",
        "input_shapes",
        multiple=True,
        metavar="NAME=D1,D2,...",
        help="Pin the shape of a graph input (repeatable). Dynamic dimensions not pinned get "
             "defaults: 1 for a batch (first) dimension, 128 for any other.",
    )(fn)


def _load(path: str, input_shapes=(), plain: bool = False):
    """Load a model for a command; say in one line which dynamic dimensions got defaults."""
    from gspo import ir

    graph = ir.load(path, ir.parse_input_shapes(input_shapes), plain=plain)
    _say_defaults(path, graph)
    return graph


def _say_defaults(path: str, graph) -> None:
    from gspo.ir.frontend import describe_defaults

    if graph.extras.defaulted:
        pins = {v.name: v.shape for v in graph.inputs}
        click.echo(f"gspo: {path}: {describe_defaults(graph.extras.defaulted, pins)}", err=True)


def inputs_option(fn):
    return click.option(
        "--inputs", "inputs_file", type=click.Path(dir_okay=False), metavar="FEEDS.npz",
        help="Run on these inputs (an .npz with one array per graph input) instead of random ones.",
    )(fn)


class Number(click.ParamType):
    """A finite number within bounds (click's FloatRange lets NaN and infinity through)."""

    name = "number"

    def __init__(self, low: float | None = None, high: float | None = None, low_open: bool = False):
        self.low, self.high, self.low_open = low, high, low_open

    def convert(self, value, param, ctx):
        try:
            x = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(x):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        too_low = self.low is not None and (x <= self.low if self.low_open else x < self.low)
        if too_low or (self.high is not None and x > self.high):
            self.fail(f"{value!r} is not in {self._range()}", param, ctx)
        return x

    def _range(self) -> str:
        low = "(-inf" if self.low is None else f"{'(' if self.low_open else '['}{self.low:g}"
        high = "inf)" if self.high is None else f"{self.high:g}]"
        return f"{low}, {high}"


class GspoGroup(click.Group):
    """click's usage errors in gspo's form (``gspo: error: ...``, exit 2); SIGTERM stops cleanly."""

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        previous = signal.signal(signal.SIGTERM, _on_signal)
        try:
            rv = super().main(*args, standalone_mode=False, **kwargs)
        except click.exceptions.Abort:
            click.echo("gspo: stopped (SIGINT); nothing was written", err=True)
            sys.exit(128 + signal.SIGINT)
        except click.ClickException as e:
            _usage_error(e)
        except KeyboardInterrupt as e:
            _stop(e)
        finally:
            signal.signal(signal.SIGTERM, previous)
        sys.exit(rv if isinstance(rv, int) else 0)


def _usage_error(e: click.ClickException) -> None:
    message = " ".join(e.format_message().split())
    ctx = getattr(e, "ctx", None)
    hint = f" (see {ctx.command_path} --help)" if isinstance(e, click.UsageError) and ctx is not None else ""
    click.echo(f"gspo: error: {message}{hint}", err=True)
    sys.exit(e.exit_code)


@click.group(name="gspo", cls=GspoGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks of internal errors.")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
@click.version_option(package_name="gspo")
@click.pass_context
def cli(ctx: click.Context, debug: bool, verbose: int) -> None:
    """gspo: faster, equivalent ONNX models by joint graph substitution and parallelism.

    \b
    Example:
        gspo zoo resnet50 --size tiny -o r50.onnx
        gspo info r50.onnx
    """
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="gspo: %(levelname)s: %(message)s")
    ctx.obj = Context(debug)


# ------------------------------------------------------------------------ zoo
@cli.command()
@click.argument("name", required=False)
@click.option("--list", "list_", is_flag=True, help="List the models and exit.")
@click.option("--size", type=click.Choice(["tiny", "full"]), default="tiny", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Where to write the model.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random weights.")
@click.option("--force", is_flag=True, help="Overwrite OUTPUT if it exists.")
@handle_errors
def zoo(name, list_, size, output, seed, force):
    """Write a model of the GSPO paper's set (random weights, batch 1).

    \b
    Example:
        gspo zoo --list
        gspo zoo nasnet_mobile --size full -o nasnet_mobile.onnx
    """
    from gspo import ir
    from gspo.zoo import MODELS, build

    if list_ or not name:
        if not list_:
            raise GspoError("name a model (gspo zoo --list shows them)")
        for m in MODELS.values():
            click.echo(f"{m.name:<14} {m.description}")
        return
    if not output:
        raise GspoError("give the output file with -o FILE")
    check_outputs({"-o": output}, (), force)
    if size == "full":
        click.echo(f"building {name} ({size}) ...", err=True)
    graph = build(name, size, seed)
    ir.save(graph, output, overwrite=True)
    click.echo(f"wrote {output} ({len(graph.nodes)} nodes)")


# ----------------------------------------------------------------------- info
def _si(x: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(x) >= div:
            return f"{x / div:.3f} {unit}"
    return f"{x:.0f} "


def model_info(graph) -> dict:
    from gspo.ir import dag, graph_features, node_features

    feats = graph_features(graph)
    compute = {n.key for n in graph.nodes if node_features(graph, n).flops > 0}
    is_compute = lambda n: n.key in compute  # noqa: E731
    return {
        "name": graph.name,
        "opset": graph.opset,
        "inputs": {v.name: list(v.shape) if v.shape is not None else None for v in graph.inputs},
        "outputs": {v.name: list(v.shape) if v.shape is not None else None for v in graph.outputs},
        "nodes": len(graph.nodes),
        "ops": dict(sorted(Counter(n.op_type for n in graph.nodes).items(), key=lambda kv: (-kv[1], kv[0]))),
        "params": feats.params,
        "param_bytes": feats.param_bytes,
        "macs": feats.macs,
        "flops": feats.flops,
        "bytes_read": feats.bytes_read,
        "bytes_written": feats.bytes_written,
        "depth": dag.depth(graph, is_compute),
        "max_parallel_ops": dag.max_antichain_width(graph, is_compute),
        "opaque_ops": sorted({f"{n.domain + '::' if n.domain else ''}{n.op_type}" for n in graph.nodes if n.is_opaque}),
    }


@cli.command()
@click.argument("model", type=click.Path(dir_okay=True))
@input_shape_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def info(model, input_shapes, as_json):
    """Describe a model: ops, parameters, FLOPs, bytes, depth, parallelism.

    The model is described as gspo sees it, after constant folding (exporters' shape arithmetic
    and Constant nodes folded). FLOPs count a multiply-accumulate as 2; depth and the maximum
    number of independent ops count compute ops only (not reshapes, concats and other data
    movement).

    \b
    Example:
        gspo info model.onnx --input-shape input=1,3,224,224
    """
    data = model_info(_load(model, input_shapes, plain=True))
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    rows = [
        ("model", f"{data['name']} (opset {data['opset']})"),
        ("inputs", ", ".join(f"{k}{v}" for k, v in data["inputs"].items())),
        ("outputs", ", ".join(f"{k}{v}" for k, v in data["outputs"].items())),
        ("nodes", str(data["nodes"])),
        ("parameters", f"{_si(data['params'])}({_si(data['param_bytes'])}B)"),
        ("MACs", _si(data["macs"])),
        ("FLOPs", _si(data["flops"])),
        ("bytes read / written", f"{_si(data['bytes_read'])}B / {_si(data['bytes_written'])}B"),
        ("depth (compute ops)", str(data["depth"])),
        ("max independent ops", str(data["max_parallel_ops"])),
        ("opaque ops", ", ".join(data["opaque_ops"]) or "none"),
    ]
    for k, v in rows:
        click.echo(f"{k:<22} {v}")
    click.echo("op histogram:")
    for op, count in data["ops"].items():
        click.echo(f"  {op:<24} {count}")


# --------------------------------------------------------------------- verify
@cli.command()
@click.argument("model_a", type=click.Path())
@click.argument("model_b", type=click.Path())
@click.option("--rtol", type=Number(0), default=1e-3, show_default=True, help="Tolerance relative to each element.")
@click.option("--atol", type=Number(0), default=1e-4, show_default=True, help="Absolute tolerance.")
@click.option("--ntol", type=Number(0), default=1e-5, show_default=True,
              help="Tolerance relative to the output's largest magnitude (rounding grows with scale).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--runs", type=click.IntRange(min=1), default=3, show_default=True, help="Random input sets.")
@inputs_option
@input_shape_option
@handle_errors
def verify(model_a, model_b, rtol, atol, ntol, seed, runs, inputs_file, input_shapes):
    """Check that two models compute the same outputs (exit 0) or not (exit 1).

    Both run with onnxruntime on the same inputs (random ones valid for the model: integer
    inputs stay within the tables they index, masks are 0 or 1). An output matches when every
    element satisfies |b - a| <= atol + rtol * |a| + ntol * max|a|, max|a| being the output's
    largest magnitude; integer and bool outputs must be equal, NaN and infinities at the same
    places. "rel to max" is max|b - a| / max|a|.

    \b
    Example:
        gspo verify model.onnx optimized.onnx --runs 5
        gspo verify model.onnx optimized.onnx --inputs feeds.npz
    """
    from gspo.runtime import load_inputs
    from gspo.runtime import verify as run_verify

    a, b = _load(model_a, input_shapes), _load(model_b, input_shapes)
    feeds = load_inputs(inputs_file, a) if inputs_file else None
    result = run_verify(a, b, rtol=rtol, atol=atol, seed=seed, runs=runs, inputs=feeds, ntol=ntol)
    click.echo(f"{'output':<30} {'max abs err':>12} {'max rel err':>12} {'rel to max':>11}  verdict")
    for d in result.outputs:
        click.echo(f"{d.name:<30} {d.max_abs:>12.3g} {d.max_rel:>12.3g} {d.norm_rel:>11.3g}  "
                   f"{'ok' if d.ok else 'DIFFERS: ' + d.reason}")
    tol = f"rtol={rtol:g}, atol={atol:g}, ntol={ntol:g}"
    if result.equivalent:
        click.echo(f"equivalent ({tol})")
        return
    click.echo(f"NOT equivalent: {result.worst.name} differs beyond {tol}")
    sys.exit(1)


# ---------------------------------------------------------------------- rules
@cli.command()
@click.argument("model", required=False, type=click.Path())
@click.option("--list", "list_", is_flag=True, help="List the rules and exit.")
@click.option("--why", is_flag=True, help="Also count why sites did not match, per rule.")
@input_shape_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def rules(model, list_, why, input_shapes, as_json):
    """List the rewrite rules, or count where each one matches in MODEL.

    \b
    Example:
        gspo rules --list
        gspo rules inception_v3.onnx --why
    """
    from collections import Counter as _Counter

    from gspo.rules import DEFAULT_RULES, Fail

    if list_ or not model:
        rows = [{"rule": r.name, "merges": r.merges, "pattern": list(r.pattern), "description": r.description}
                for r in DEFAULT_RULES]
        if as_json:
            click.echo(json.dumps(rows, indent=2))
            return
        for r in rows:
            click.echo(f"{r['rule']:<22} {r['description']}")
        return
    graph = _load(model, input_shapes, plain=True)
    out = []
    for r in DEFAULT_RULES:
        results = list(r.match(graph, explain=why))
        fails = _Counter(f.reason for f in results if isinstance(f, Fail))
        out.append({"rule": r.name, "merges": r.merges, "sites": sum(1 for m in results if not isinstance(m, Fail)),
                    "not_matched": dict(fails.most_common())})
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    click.echo(f"{'rule':<22} {'sites':>6}")
    for row in out:
        click.echo(f"{row['rule']:<22} {row['sites']:>6}{'  (merge)' if row['merges'] else ''}")
        for reason, n in list(row["not_matched"].items())[:5]:
            click.echo(f"    {n:>5} x {reason}")
    merges = sum(row["sites"] for row in out if row["merges"])
    click.echo(f"merge sites: {merges}")


# ------------------------------------------------------------------ partition
@cli.command(name="partition")
@click.argument("model", type=click.Path())
@click.option("-t", "--threshold", type=click.IntRange(min=2), default=None, help="Largest piece, in ops [default: 64].")
@click.option("--balance", type=Number(0, 0.5, low_open=True), default=0.25, show_default=True,
              help="Each cut leaves at least this fraction of the ops on either side.")
@input_shape_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def partition_cmd(model, threshold, balance, input_shapes, as_json):
    """Cut MODEL into pieces of at most T ops, where the fewest rule matches are lost.

    Ops weigh the number of rule patterns they can take part in; each cut is a balanced
    minimum vertex cut (Boykov-Kolmogorov), repeated until every piece is small enough.

    \b
    Example:
        gspo partition nasnet_large.onnx --threshold 64
    """
    import time

    from gspo.partition import DEFAULT_THRESHOLD, partition

    graph = _load(model, input_shapes, plain=True)
    start = time.perf_counter()
    p = partition(graph, DEFAULT_THRESHOLD if threshold is None else threshold, balance)
    seconds = time.perf_counter() - start
    names = [n.name or n.op_type for n in graph.nodes]
    data = {
        "model": graph.name,
        "ops": len(graph.nodes),
        "threshold": p.threshold,
        "pieces": [
            {"index": i, "ops": piece.size, "virtual_inputs": list(piece.virtual_inputs),
             "outputs": [v.name for v in piece.graph.outputs]}
            for i, piece in enumerate(p.pieces)
        ],
        "cuts": [{"weight": c.value, "ops": [names[v] for v in c.cut],
                  "sides": [len(c.before), len(c.after)]} for c in p.cuts],
        "cut_weight": p.cut_weight,
        "total_weight": p.total_weight,
        "seconds": seconds,
    }
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(f"{len(p.pieces)} pieces of at most {p.threshold} ops ({len(graph.nodes)} ops, {seconds:.2f} s)")
    click.echo(f"{'piece':>5} {'ops':>5} {'virtual inputs':>15} {'outputs':>8}")
    for row in data["pieces"]:
        click.echo(f"{row['index']:>5} {row['ops']:>5} {len(row['virtual_inputs']):>15} {len(row['outputs']):>8}")
    for c in data["cuts"]:
        click.echo(f"cut {c['sides'][0]}|{c['sides'][1]} ops: weight {c['weight']:g} at {', '.join(c['ops'][:4])}"
                   + (" ..." if len(c["ops"]) > 4 else ""))
    share = 100 * p.cut_weight / p.total_weight if p.total_weight else 0.0
    click.echo(f"weight lost: {p.cut_weight:g} of {p.total_weight:g} ({share:.2f}%)")


# ------------------------------------------------------------------- run/bench
def streams_option(fn):
    return click.option(
        "--streams", default="auto", show_default=True, metavar="N|auto",
        help="Streams: 'auto' uses the schedule gspo optimize saved in the model, else one stream; "
             "N: Nimble's assignment capped at N streams (1 = one plain session).",
    )(fn)


def device_option(fn):
    return click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)(fn)


@cli.command(name="run")
@click.argument("model", type=click.Path())
@streams_option
@device_option
@inputs_option
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of random inputs.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the outputs here (.npz).")
@click.option("--timeline", type=click.Path(dir_okay=False), help="Plot when each segment ran (PNG, needs gspo[plot]).")
@click.option("--force", is_flag=True, help="Overwrite OUTPUT / TIMELINE.")
@input_shape_option
@handle_errors
def run_cmd(model, streams, device, inputs_file, seed, output, timeline, force, input_shapes):
    """Run MODEL with the multi-stream runtime and print (or save) its outputs.

    \b
    Example:
        gspo run optimized.onnx --inputs in.npz -o out.npz
        gspo run nasnet.onnx --streams 2 --timeline timeline.png
    """
    import time

    import numpy as np

    from gspo.runtime import load_inputs, make_executor, parse_streams, random_inputs

    n = parse_streams(streams)
    check_outputs({"-o": output, "--timeline": timeline}, (model, inputs_file), force)
    graph = _load(model, input_shapes)
    feeds = load_inputs(inputs_file, graph) if inputs_file else random_inputs(graph, seed)
    executor = make_executor(graph, n, device)
    if timeline and executor.num_streams == 1:
        executor.close()
        raise GspoError("--timeline needs more than one stream (there is nothing to overlap)")
    try:
        trace: list = []
        start = time.perf_counter()
        outputs = executor.run(feeds, trace=trace) if device == "cpu" else executor.run(feeds)
        seconds = time.perf_counter() - start
    finally:
        executor.close()
    placement = getattr(executor, "placement", None)
    where = ", ".join(f"{n} ops on {b}" for b, n in placement.counts(graph).items()) if placement else device
    click.echo(f"ran {graph.name} on {executor.num_streams} stream(s), {where}: {seconds * 1e3:.2f} ms "
               "(one cold run; use gspo bench to time)")
    for name, arr in outputs.items():
        click.echo(f"  {name}: {arr.dtype}{list(arr.shape)} mean {float(np.mean(arr)):.6g}")
    if output:
        with replacing(output) as tmp, open(tmp, "wb") as f:  # a file object: savez adds no ".npz"
            np.savez(f, **outputs)
        click.echo(f"wrote {output}")
    if timeline:
        _plot_timeline(trace, executor, timeline)
        click.echo(f"wrote {timeline}")


def _plot_timeline(trace, executor, path) -> None:
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
    with replacing(path) as tmp, open(tmp, "wb") as f:
        fig.savefig(f, dpi=120, format=Path(path).suffix[1:].lower() or "png")
    plt.close(fig)


@cli.command(name="bench")
@click.argument("models", nargs=-1, required=True, type=click.Path())
@click.option("--streams", "streams_list", default="1", show_default=True, metavar="LIST",
              help="Comma-separated stream settings to time each model with, e.g. '1,auto,2'.")
@device_option
@click.option("--runs", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--warmup", type=click.IntRange(min=0), default=3, show_default=True)
@click.option("--threads", type=click.IntRange(min=0), default=0, show_default=True,
              help="Intra-op threads per session (0: onnxruntime's default, divided among streams).")
@click.option("--seed", type=int, default=0, show_default=True)
@inputs_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@input_shape_option
@handle_errors
def bench_cmd(models, streams_list, device, runs, warmup, threads, seed, inputs_file, as_json, input_shapes):
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
        parse_streams,
        random_inputs,
        timed_runner,
    )

    settings = [parse_streams(x) for x in streams_list.split(",") if x.strip()]
    if not settings:
        raise GspoError("--streams needs at least one setting")
    graphs = [(m, _load(m, input_shapes)) for m in models]
    first_inputs = {(v.name, v.dtype, v.shape) for v in graphs[0][1].inputs}
    for m, g in graphs[1:]:
        if {(v.name, v.dtype, v.shape) for v in g.inputs} != first_inputs:
            raise GspoError(f"{m}: its inputs differ from {graphs[0][0]}'s; bench compares models with the same inputs")
    feeds = load_inputs(inputs_file, graphs[0][1]) if inputs_file else random_inputs(graphs[0][1], seed)
    config = SessionConfig(intra_op_threads=threads)
    executors, runners = [], []
    try:
        for m, g in graphs:
            for n in settings:
                ex = make_executor(g, n, device, config)
                executors.append(ex)
                label = f"{m} [streams={ex.num_streams}{'' if n else ', auto'}]"
                runners.append((label, timed_runner(ex, feeds)))  # on CUDA: device time, inputs uploaded once
        click.echo(f"timing {len(runners)} configurations x {runs} runs ...", err=True)
        timings = interleaved(runners, runs, warmup)
    finally:
        for ex in executors:
            ex.close()
    rows = [{"config": t.label, "median_ms": t.median * 1e3, "min_ms": t.min * 1e3,
             "ratio": t.ratio_to(timings[0])} for t in timings]
    if as_json:
        click.echo(json.dumps({"runs": runs, "warmup": warmup, "device": device, "rows": rows}, indent=2))
        return
    width = max(len(r["config"]) for r in rows)
    click.echo(f"{'configuration':<{width}} {'median ms':>10} {'min ms':>9} {'vs first':>9}")
    for r in rows:
        click.echo(f"{r['config']:<{width}} {r['median_ms']:>10.3f} {r['min_ms']:>9.3f} {r['ratio']:>8.3f}x")


# ------------------------------------------------------------------- optimize
@cli.command(name="optimize")
@click.argument("model", type=click.Path())
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Where to write the optimized model.")
@device_option
@click.option("--profile", help="Cost profile: a name (shipped with gspo or in the user cache) or a path [default: cpu].")
@click.option("--foreign-profile", is_flag=True,
              help="Use a profile made on another device or onnxruntime version (with a warning).")
@click.option("--alpha", type=Number(1), default=1.05, show_default=True, help="Explore graphs up to alpha x the best cost.")
@click.option("--budget", type=click.IntRange(min=0), default=40, show_default=True, help="Graphs expanded per piece at most.")
@click.option("--time-budget", type=Number(0, low_open=True), default=90.0, show_default=True,
              help="Seconds for the whole optimization (anytime: the best so far is verified and written).")
@click.option("-t", "--threshold", type=click.IntRange(min=2), default=None, help="Largest piece in ops [default: 64].")
@click.option("--max-streams", type=click.IntRange(min=1), default=None, help="Stream cap [default: the CPU cores].")
@click.option("--jobs", type=click.IntRange(0, MAX_JOBS), default=0,
              help=f"Processes searching pieces, at most the CPU cores ({MAX_JOBS}) [default: all of them].")
@click.option("--no-streams", is_flag=True, help="Substitutions only (the TASO-like ablation).")
@click.option("--no-rules", is_flag=True, help="Streams only (the Nimble-like ablation).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random verification inputs.")
@click.option("--select", type=click.Choice(["measured", "estimated"]), default="measured", show_default=True,
              help="Pick verified candidates by measured latency, or by the cost model (the same bytes for "
                   "the same input, seed and profile, as long as the time budget does not cut the search).")
@click.option("--report", type=click.Path(dir_okay=False), help="Write the full report (JSON).")
@inputs_option
@click.option("--backends", metavar="LIST", default=None,
              help="Backends to place the model or its pieces on, e.g. 'ort,openvino' [default: every one installed].")
@click.option("--force", is_flag=True, help="Overwrite OUTPUT and REPORT if they exist.")
@input_shape_option
@handle_errors
def optimize_cmd(model, output, device, profile, foreign_profile, alpha, budget, time_budget, threshold, max_streams, jobs,
                 no_streams, no_rules, seed, select, report, inputs_file, backends, force, input_shapes):
    """Make MODEL faster: joint substitutions and streams, verified, never slower.

    Folds the exporter's constants and shape arithmetic, partitions the model, searches each
    piece (rules and streams ranked by the cost profile), verifies the best candidates by
    running them on the values that reach each piece (rejecting, with the reason, any that
    onnxruntime refuses or that compute something else), merges, checks the whole model against
    the original and writes OUTPUT (a mismatch writes nothing and exits 1). Dynamic input
    dimensions get defaults (1 for a batch, 128 otherwise) unless pinned with --input-shape; the
    output keeps them dynamic when it computes the same at another size.

    With OpenVINO installed (pip install 'gspo[openvino]'), the whole model and each piece are
    also timed on it; when a placement off onnxruntime wins, it is saved in the model and
    gspo run / gspo bench follow it.

    \b
    Example:
        gspo optimize model.onnx -o fast.onnx --report report.json
        gspo optimize nasrnn.onnx -o fast.onnx --no-streams --time-budget 60
        gspo optimize resnet50.onnx -o fast.onnx --backends ort,openvino
        gspo optimize bert.onnx -o fast.onnx --input-shape input_ids=1,64 --inputs feeds.npz
    """
    from gspo import ir
    from gspo.partition import DEFAULT_THRESHOLD
    from gspo.runtime.inputs import read_npz
    from gspo.search import OptimizeError, optimize

    check_outputs({"-o": output, "--report": report}, (model, inputs_file), force)
    if no_streams and no_rules:
        raise GspoError("--no-streams and --no-rules together leave nothing to optimize")
    shapes = ir.parse_input_shapes(input_shapes)
    feeds = read_npz(inputs_file) if inputs_file else None
    chosen_backends = None
    if backends is not None:
        from gspo.runtime.backends import check_backends

        chosen_backends = check_backends(backends.split(","))
    bar = _progress_printer("optimizing")
    try:
        result = optimize(
            model, progress=lambda phase, d, t: bar(d, t, phase), input_shapes=shapes, inputs=feeds, device=device,
            profile=profile, force_profile=foreign_profile, alpha=alpha, budget=budget, time_budget=time_budget,
            threshold=threshold or DEFAULT_THRESHOLD, max_streams=max_streams, jobs=jobs,
            use_streams=not no_streams, use_rules=not no_rules, seed=seed, select=select, backends=chosen_backends,
        )
    except OptimizeError as e:
        click.echo(f"gspo: error: {e}", err=True)
        sys.exit(1)
    result.save(output, overwrite=True)
    r = result.report
    if report:
        atomic_write(report, json.dumps(r, indent=1, default=str) + "\n")
    for note in r["notes"]:
        click.echo(f"note: {note}")
    _echo_outcome(r, pinned=bool(shapes))
    click.echo(f"wrote {output}")


def _echo_outcome(r: dict, pinned: bool) -> None:
    """The summary ``gspo optimize`` prints: latency, verdict, what changed, what was rejected."""
    click.echo(f"latency  {r['latency_before_ms']:.3f} ms -> {r['latency_after_ms']:.3f} ms  (x{r['speedup']:.3f}, "
               f"measured; spread {100 * r['timing_spread']:.1f}%)")
    click.echo(f"estimate {r['estimated_before_ms']:.3f} ms -> {r['estimated_after_ms']:.3f} ms (cost model)")
    if r["unchanged"]:
        pins = " with its input shapes pinned" if pinned else ""
        click.echo(f"nothing beat the input as measured: the output is the input{pins}")
    elif r["verdict"] != "faster":
        click.echo("no measurable change: the speedup is within the timings' spread")
    subs = ", ".join(f"{k} x{v}" for k, v in r["substitutions"].items()) or "none"
    click.echo(f"substitutions: {subs}")
    click.echo(f"streams: {r['streams']}, syncs: {r['syncs']}; pieces: {r['pieces']}; "
               f"search {r['search_seconds']:.1f} s, total {r['total_seconds']:.1f} s")
    if not r["unchanged"]:
        click.echo(f"equivalent to the input: largest difference {r['max_rel_err']:.2g} of an output's magnitude")
    if r["dynamic_dims"]:
        click.echo(f"dynamic dimensions: {r['dynamic_dims']}")
    placed = {b: n for b, n in r["placement"]["chosen"].items() if b != "ort"}
    if placed:
        ops = ", ".join(f"{n} ops on {b}" for b, n in placed.items())
        click.echo(f"placement: {ops} (saved in the model; run it with gspo run or the Python API)")
    if r["candidates_rejected_by_verification"]:
        click.echo(f"verification rejected {r['candidates_rejected_by_verification']} candidate(s) "
                   "(onnxruntime refused them or their outputs differed; reasons in --report)")


# -------------------------------------------------------------------- regress
@cli.command()
@click.argument("modelset", type=click.Path())
@click.option("--baseline", type=click.Path(dir_okay=False), help="Baseline file [default: MODELSET's name + .baseline.json].")
@click.option("--update", is_flag=True, help="Write the results as the new baseline (exit 0 unless a model is not equivalent).")
@click.option("--tolerance", type=Number(0), default=0.02, show_default=True, help="Allowed drop of estimated speedup.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def regress(modelset, baseline, update, tolerance, as_json):
    """Guard a model set: fail (exit 1) when a model gets slower by estimate or stops being equivalent.

    Every model is optimized with a fixed seed and budget and chosen by the cost model, so the
    estimated speedup is reproducible; measured speedups are reported but never gate.

    \b
    Example:
        gspo regress data/modelset.json
        gspo regress my_models.json --update
    """
    from gspo.regress import read_baseline, run_regress, write_baseline

    base_path = Path(baseline) if baseline else Path(modelset).with_suffix(".baseline.json")
    known = None if update else (read_baseline(base_path) if base_path.exists() else {"models": {}})
    rows = run_regress(modelset, known, tolerance, _progress_printer("regress"))
    failed = [r for r in rows if r.status != "ok" and not (update and r.status in ("NO BASELINE", "REGRESSED", "ok"))]
    if update:
        write_baseline(base_path, rows)
    if as_json:
        click.echo(json.dumps({"baseline": str(base_path), "rows": [r.to_json() for r in rows]}, indent=2))
    else:
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
        if not as_json:
            click.echo(f"FAILED: {', '.join(r.name for r in failed)}")
        sys.exit(1)


# ------------------------------------------------------------------ calibrate
def _progress_printer(label: str):
    """A one-line progress display on a terminal; in a pipe or a CI log, a line at every tenth."""
    tty = sys.stderr.isatty()
    state = {"total": None, "done": -1, "tenth": -1}  # a new count (another phase) starts over

    def show(done: int, total: int, what: str = "") -> None:
        if tty:
            width = 30
            filled = int(width * done / max(total, 1))
            click.echo(f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} {what:<12}", err=True, nl=False)
            if done >= total:
                click.echo("", err=True)
            return
        if total != state["total"] or done < state["done"]:
            state.update(total=total, tenth=-1)
        state["done"] = done
        tenth = 10 * done // max(total, 1)
        if tenth > state["tenth"]:
            state["tenth"] = tenth
            click.echo(f"{label}: {done}/{total} ({10 * tenth}%) {what}".rstrip(), err=True)

    return show


@cli.command()
@click.option("--device", type=click.Choice(["cpu"]), default=None, help="Calibrate on the CPU.")
@click.option("--gpu", "gpu_name", metavar="NAME", help="Calibrate on the CUDA device; save the profile as NAME.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Profile file [default: the user cache].")
@click.option("--budget", type=Number(0, low_open=True), default=15.0, show_default=True, help="Minutes to spend measuring at most.")
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
def calibrate(device, gpu_name, output, budget, db_path, evaluate_profile, count, report, passes, force,
              foreign_profile, as_json):
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
    from gspo.costmodel import device_description, load_profile, save_profile
    from gspo.costmodel.profile import PROFILE_DIRS
    from gspo.runtime import runtime_version

    runtime = runtime_version()
    if evaluate_profile:
        from gspo.costmodel.evaluate import evaluate

        passes = EVALUATION_PASSES if passes is None else passes
        if passes < 2:
            raise GspoError("--passes must be at least 2 with --evaluate (the noise is pass 2 against pass 1)")
        check_outputs({"--report": report}, (evaluate_profile,), force)
        profile = load_profile(evaluate_profile, device_description("cpu"), runtime, foreign_profile)
        results = evaluate(profile, count, _progress_printer("measuring held-out subgraphs"), passes=passes)
        # reference_s: the unit of every measured time in the report (the profile's speed reference).
        data = {"profile": evaluate_profile, "device": profile.device, "reference_s": profile.reference_s,
                "results": [r.to_json() for r in results]}
        if report:
            atomic_write(report, json.dumps(data, indent=1) + "\n")
        if as_json:
            click.echo(json.dumps({**data, "results": [{k: v for k, v in r.items() if k != "rows"} for r in data["results"]]}, indent=2))
            return
        for r in results:
            noise = (f"; test-retest noise {100 * r.noise:.2f}%, left in the mean of {passes} passes"
                     f" {100 * r.noise_of_mean:.2f}%") if r.noise is not None else ""
            click.echo(f"{r.kind:<10} {len(r.measured):>4} subgraphs  mean error {100 * r.mape:6.2f}%  Spearman {r.spearman:.3f}"
                       f"  (raw timings, drift not cancelled: {100 * r.mape_raw:.2f}%{noise})")
        return
    if gpu_name:
        from gspo.runtime.cuda import require_gpu

        require_gpu(option="--gpu")
    elif device is None:
        raise GspoError("say what to calibrate: --device cpu, --gpu NAME, or --evaluate PROFILE")
    from gspo.costmodel.calibrate import DEFAULT_CALIBRATION_PASSES, CalibrationConfig
    from gspo.costmodel.calibrate import calibrate as run_calibration

    backend = "cuda" if gpu_name else "cpu"
    desc = f"cuda:{gpu_name}" if gpu_name else device_description("cpu")
    out = Path(output) if output else PROFILE_DIRS[1] / f"{gpu_name or 'cpu'}.json"
    db = db_path or str(PROFILE_DIRS[1].parent / "calibration.sqlite")
    check_outputs({"-o": out}, (db,), force or not output)
    cfg = CalibrationConfig(device=desc, runtime=runtime, db_path=db, budget_s=budget * 60, backend=backend,
                            passes=DEFAULT_CALIBRATION_PASSES if passes is None else passes)
    import time as _time

    start = _time.perf_counter()
    profile = run_calibration(cfg, _progress_printer("calibrating"))
    with replacing(out) as tmp:
        save_profile(profile, tmp)
    click.echo(f"wrote {out} ({profile.meta['ops']} ops, {profile.meta['branches']} multi-branch subgraphs, "
               f"{_time.perf_counter() - start:.0f} s; database {db})")


# -------------------------------------------------------------------- convert
@cli.command()
@click.argument("model", type=click.Path())
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False))
@input_shape_option
@click.option("--force", is_flag=True, help="Overwrite OUTPUT if it exists.")
@handle_errors
def convert(model, output, input_shapes, force):
    """Rewrite a model through gspo's IR: pin input shapes, stamp an IR version onnxruntime reads.

    \b
    Example:
        gspo convert dynamic.onnx -o static.onnx --input-shape input=1,3,224,224
    """
    from gspo import ir

    check_outputs({"-o": output}, (model,), force)
    graph = _load(model, input_shapes)
    ir.save(graph, output, overwrite=True)
    click.echo(f"wrote {output}")


def main() -> None:
    try:
        cli(prog_name="gspo")
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(141)
