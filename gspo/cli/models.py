"""Commands that write, describe and compare models: zoo, info, verify, rules, partition, convert."""

from __future__ import annotations

import json
import sys
from collections import Counter
from types import SimpleNamespace

import click

from gspo.cli.common import (
    SEED,
    Number,
    cli,
    explaining,
    handle_errors,
    input_shape_option,
    inputs_option,
    load_model,
)
from gspo.errors import GspoError
from gspo.outputs import check_outputs


# ------------------------------------------------------------------------ zoo
@cli.command()
@click.argument("name", required=False)
@click.option("--list", "list_", is_flag=True, help="List the models and exit.")
@click.option("--size", type=click.Choice(["tiny", "full"]), default="tiny", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Where to write the model.")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the random weights.")
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
    check_outputs({"-o": output}, (), force, model_outputs=["-o"])
    if size == "full":
        click.echo(f"building {name} ({size}) ...", err=True)
    graph = build(name, size, seed)
    ir.save(graph, output, overwrite=force)
    click.echo(f"wrote {output} ({len(graph.nodes)} nodes)")


# ----------------------------------------------------------------------- info
def _si(x: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(x) >= div:
            return f"{x / div:.3f} {unit}"
    return f"{x:.0f} "


def model_info(graph) -> dict:
    """What ``gspo info`` reports about a graph, as a dict."""
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
    data = model_info(load_model(model, input_shapes, plain=True))
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
def _verify_inputs(ctx, param, value):
    """``--inputs``: an .npz; with ``--max-error`` (read first: it is eager) also a folder of them."""
    if value is None:
        return None
    return click.Path(dir_okay=ctx.params.get("spec") is not None).convert(value, param, ctx)


def _verify_budget(opts: SimpleNamespace) -> None:
    """``verify --max-error``: judge MODEL_B against MODEL_A by the budget; exit 1 when broken
    (``opts``: the command's options)."""
    from gspo import ir
    from gspo.precision.accuracy import ErrorBudget, judge
    from gspo.precision.samples import load_samples, random_data_warning
    from gspo.runtime.inputs import random_input_sets

    ctx = click.get_current_context()
    given = [f"--{n}" for n in ("rtol", "atol", "ntol")
             if ctx.get_parameter_source(n) is not click.core.ParameterSource.DEFAULT]
    if given:
        raise GspoError(f"{', '.join(given)}: the fp32 tolerances do not apply with --max-error (the budget judges)")
    model_a, model_b, input_shapes = opts.model_a, opts.model_b, opts.input_shapes
    seed, inputs_file = opts.seed, opts.inputs_file
    budget = ErrorBudget.parse(opts.spec)
    a, b = load_model(model_a, input_shapes), load_model(model_b, input_shapes)
    budget.check_graph(a)
    if inputs_file:
        samples = load_samples(inputs_file, a, "--inputs")
    else:
        click.echo("warning: " + random_data_warning("the inputs", "your own with --inputs (an .npz, or a folder "
                                                                   "of them, one sample each)"), err=True)
        samples = random_input_sets(a, seed, opts.runs)
    with explaining((a, b), seed if not inputs_file else None):
        accuracy = judge(model_a, model_b, budget, samples, ir.parse_input_shapes(input_shapes) or None)
    for line in accuracy.lines():
        click.echo(line)
    if accuracy.holds:
        click.echo(f"within the budget ({budget}) on {accuracy.samples} sample{'s' if accuracy.samples > 1 else ''}")
        return
    click.echo(f"NOT within the budget ({budget}):")
    for line in accuracy.broken:
        click.echo(f"  {line}")
    sys.exit(1)


@cli.command()
@click.argument("model_a", type=click.Path())
@click.argument("model_b", type=click.Path())
@click.option("--max-error", "spec", metavar="SPEC", is_eager=True,
              help="Judge MODEL_B by this accuracy budget instead of the fp32 tolerances: comma-separated "
                   "[OUTPUT:]METRIC=VALUE, METRIC one of nmse, rel_l2, maxrel (at most), cosine, top1 ... top100 "
                   "(at least). With it, --inputs may be a folder of .npz files, one sample each.")
@click.option("--rtol", type=Number(0), default=1e-3, show_default=True, help="Tolerance relative to each element.")
@click.option("--atol", type=Number(0), default=1e-4, show_default=True, help="Absolute tolerance.")
@click.option("--ntol", type=Number(0), default=1e-5, show_default=True,
              help="Tolerance relative to the output's largest magnitude (rounding grows with scale).")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--runs", type=click.IntRange(min=1), default=3, show_default=True, help="Random input sets.")
@click.option("--inputs", "inputs_file", metavar="FEEDS.npz", callback=_verify_inputs,
              help="Run on these inputs (an .npz with one array per graph input) instead of random ones; "
                   "with --max-error also a folder of such .npz files, one sample each.")
@input_shape_option
@handle_errors
def verify(**options):
    """Check that two models compute the same outputs (exit 0) or not (exit 1).

    Both run as gspo runs them (a saved schedule or placement followed, each piece on its
    backend; without either, onnxruntime) on the same inputs (random ones valid for the model: integer
    inputs stay within the tables they index, masks are 0 or 1). An output matches when every
    element satisfies |b - a| <= atol + rtol * |a| + ntol * max|a|, max|a| being the output's
    largest magnitude; integer and bool outputs must be equal, NaN and infinities at the same
    places. "rel to max" is max|b - a| / max|a|.

    With --max-error SPEC, MODEL_B (reduced precision, say) is judged against MODEL_A by an
    accuracy budget instead: both run with gspo.InferenceSession (as saved: schedule and
    placement followed), each output's metrics over all the samples are printed, and the exit
    code is 0 within the budget, 1 otherwise. nmse is sum|b - a|^2 / sum|a|^2, rel_l2 its
    square root, maxrel max|b - a| / max|a|, cosine the lowest cosine similarity of a sample,
    topK the fraction of rows (all axes but the last) whose reference top class is among
    MODEL_B's top K. A limit without OUTPUT: applies to every floating-point output; integer
    outputs take only top1 (equal elements) and must otherwise be equal.

    \b
    Example:
        gspo verify model.onnx optimized.onnx --runs 5
        gspo verify model.onnx optimized.onnx --inputs feeds.npz
        gspo verify model.onnx int8.onnx --max-error nmse=1e-3,top1=0.99 --inputs samples/
    """
    from gspo.runtime import load_inputs
    from gspo.runtime import verify as run_verify
    from gspo.runtime.verify import Tolerance

    opts = SimpleNamespace(**options)
    if opts.spec is not None:
        _verify_budget(opts)
        return
    rtol, atol, ntol, seed = opts.rtol, opts.atol, opts.ntol, opts.seed
    a, b = load_model(opts.model_a, opts.input_shapes), load_model(opts.model_b, opts.input_shapes)
    feeds = load_inputs(opts.inputs_file, a) if opts.inputs_file else None
    with explaining((a, b), seed if feeds is None else None):
        result = run_verify(a, b, Tolerance(rtol, atol, ntol), seed=seed, runs=opts.runs, inputs=feeds)
    click.echo(f"{'output':<30} {'max abs err':>12} {'max rel err':>12} {'rel to max':>11}  verdict")
    for d in result.outputs:
        click.echo(f"{d.name:<30} {d.max_abs:>12.3g} {d.max_rel:>12.3g} {d.norm_rel:>11.3g}  "
                   f"{'ok' if d.ok else 'DIFFERS: ' + d.reason}")
    for path, how in zip((opts.model_a, opts.model_b), result.ran):
        if how != "on onnxruntime":  # said only where it is not the plain session
            click.echo(f"{path} ran {how}")
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
    graph = load_model(model, input_shapes, plain=True)
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

    graph = load_model(model, input_shapes, plain=True)
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


@cli.command()
@click.argument("model", type=click.Path())
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False))
@input_shape_option
@inputs_option
@click.option("--force", is_flag=True, help="Overwrite OUTPUT if it exists.")
@handle_errors
def convert(model, output, input_shapes, inputs_file, force):
    """Rewrite a model through gspo's IR: pin input shapes, stamp an IR version onnxruntime reads.

    What is written is checked as optimize checks its output: onnxruntime must load it and, on
    valid random inputs (or --inputs), compute what MODEL computes; otherwise nothing is written
    and the exit code is 1. A model with control flow that onnxruntime refuses once pinned (it
    checks the shapes in every branch, the ones the inputs never take too) keeps the input
    shapes it declares, with a note.

    \b
    Example:
        gspo convert dynamic.onnx -o static.onnx --input-shape input=1,3,224,224
    """
    from gspo import ir
    from gspo.runtime import load_inputs

    check_outputs({"-o": output}, (model, inputs_file), force, models=[model], model_outputs=["-o"])
    graph = load_model(model, input_shapes)
    feeds = load_inputs(inputs_file, graph) if inputs_file else None
    # weights kept in external data stay there: onnxruntime reads them from their files (a
    # tensor past protobuf's 2 GB cannot be held in a model in memory)
    data = graph if ir.onnx_io.uses_external_data(graph) else ir.serialize(graph)
    problem = _converted_problem(model, graph, data, feeds)
    if problem:
        click.echo(f"gspo: error: {problem}; nothing written", err=True)
        sys.exit(1)
    if graph.extras.static_refused:
        click.echo("note: inputs and outputs kept as the model declares them; with them pinned: "
                   f"{graph.extras.static_refused}")
    ir.save(graph, output, overwrite=force)
    click.echo(f"wrote {output}")


def _converted_problem(model: str, graph, data, feeds) -> str | None:
    """Why the converted model ``data`` (serialized, or ``graph`` itself when its weights are
    in external data) may not be written: onnxruntime refuses it, or on ``feeds`` (random valid
    inputs when ``None``) it fails or computes something else than the model as given.

    Raises:
        GspoError: the model as given does not run on the inputs, so nothing can be compared.
    """
    from pathlib import Path

    from gspo import ir
    from gspo.runtime import compare_outputs, make_session, random_inputs, run

    given = "--inputs" if feeds is not None else "random inputs"
    feeds = feeds if feeds is not None else random_inputs(graph, 0)
    # the model as given, with weights kept beside it read from their files through gspo (nothing else changed)
    external = ir.onnx_io.uses_external_data(graph)
    reference = ir.load(model) if external else Path(model).read_bytes()
    try:
        session = make_session(reference)
    except GspoError as e:
        raise GspoError(f"{model}: cannot check the converted model: {e}") from None
    try:
        want = run(session, feeds)
    except GspoError as e:
        raise GspoError(f"{model}: cannot check the converted model: the model as given fails on {given} ({e}); "
                        "give inputs it runs on with --inputs FEEDS.npz") from None
    try:
        got = run(make_session(data), feeds)
    except GspoError as e:
        return f"the converted model does not run where the model as given does: {e}"
    result = compare_outputs(want, got)
    if not result.equivalent:
        return f"the converted model differs from the model as given: output {result.worst.name}: {result.worst.reason}"
    return None
