"""What ``gspo optimize --precision`` prints: the data used, each kind's fit, the choice and its
error per output on the validation data."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from gspo.precision.report import PrecisionReport

__all__ = ["echo_precision", "metrics_line"]


def metrics_line(metrics: dict) -> str:
    """An output's metrics in one line (``nmse 1.2e-04  cosine 0.99994 ...``)."""
    from gspo.precision.accuracy import shown

    return "  ".join(f"{name} {shown(name, value)}" for name, value in metrics.items())


def echo_precision(block: PrecisionReport) -> None:
    """The report's ``precision`` block as lines."""
    for warning in block.warnings:
        click.echo(f"warning: {warning}", err=True)
    for note in block.notes:
        click.echo(f"precision: {note}")
    for k in block.kinds:
        if k.dropped:
            click.echo(f"precision: {k.kind}: {k.dropped}")
            continue
        reduced = len(k.pieces_reduced)
        speed = f", x{k.speedup_over_fp32:.2f} over the best fp32" if k.speedup_over_fp32 else ""
        threads = f" at {k.threads} thread{'s' if k.threads > 1 else ''}" if k.threads else ""
        timed = f"{k.median_ms:.3f} ms{threads}{speed}" if k.median_ms is not None else "not timed"
        click.echo(f"precision: {k.kind}: {reduced} of {block.pieces} pieces reduced, {timed}")
    chosen = block.chosen
    if chosen == "fp32":
        click.echo(f"precision: kept fp32 (exact): no reduced precision was both within {block.max_error} and "
                   "measurably faster")
        return
    click.echo(f"precision: chose {chosen}, x{block.speedup_over_fp32:.2f} over the best fp32 model; "
               f"error on the validation data ({block.data['validation']}), budget {block.max_error}:")
    for name, metrics in block.validation.to_json()["outputs"].items():
        click.echo(f"  {name}  {metrics_line(metrics)}")
    if "the rest at bf16" in chosen:
        click.echo("precision: a standard QDQ int8 model whose placement on OpenVINO at bf16 is saved in its "
                   "metadata: gspo run, gspo bench and gspo.InferenceSession follow it (plain onnxruntime runs "
                   "the QDQ model without bf16)")
    elif "bf16" in chosen:
        click.echo("precision: the bf16 placement is saved in the model's metadata: run it with gspo run, "
                   "gspo bench or gspo.InferenceSession (plain onnxruntime runs it at fp32)")
    elif "openvino" in chosen:
        click.echo("precision: a standard QDQ int8 model, fast on OpenVINO (its placement is saved; gspo run and "
                   "gspo.InferenceSession follow it)")
    else:
        click.echo("precision: a standard int8 ONNX model: plain onnxruntime runs it as fast")
