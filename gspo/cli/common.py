"""The ``gspo`` command group and what its commands share: errors in one form, signals,
the options several commands take, progress display."""

from __future__ import annotations

import functools
import logging
import math
import os
import signal
import sys
from contextlib import contextmanager

import click

from gspo.errors import GspoError
from gspo.ir.checks import MAX_ELEMENTS

__all__ = ["main", "cli", "load_model", "progress_printer"]

EXIT_ERROR = 2
#: ``--jobs`` at most: one search process per core (more would share the cores and overrun the
#: time budget, which is split among the jobs as if each had a core).
MAX_JOBS = os.cpu_count() or 1
#: ``calibrate --evaluate``'s passes over the held-out set: with 4 the cross-run noise floor of a
#: run was 0.9 / 1.0 points (sequential / parallel) higher than with 6 (benchmarks/noise_floor.md,
#: twelve runs); the one run of 20 passes (12 minutes) had the lowest noise in its own mean and a
#: floor like the others' (most of the floor is between runs).
EVALUATION_PASSES = 6
#: Seconds any time option may give at most (one week): a budget far past the search's needs
#: overflowed its arithmetic (``--time-budget 1e308``).
MAX_SECONDS = 7 * 24 * 3600.0
#: ``--seed`` range: what numpy's generators take from the command line (0 .. 2**32 - 1).
SEED = click.IntRange(0, 2**32 - 1)
#: ``--input-shape`` bounds: a dimension must fit onnxruntime's 32-bit sizes, an input at most
#: 2**40 elements (4 TiB of float32), so that every size gspo computes stays an exact integer.
MAX_DIM = 2**31 - 1


class Context:
    """What every command can read: whether to show tracebacks."""
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


def _check_input_shapes(ctx, param, specs: tuple[str, ...]) -> tuple[str, ...]:
    """``--input-shape`` values, refused (a usage error) unless well formed and within bounds."""
    from gspo import ir

    try:
        shapes = ir.parse_input_shapes(specs)
    except GspoError as e:
        raise click.BadParameter(str(e), ctx, param) from None
    for name, shape in shapes.items():
        too_big = [d for d in shape if d > MAX_DIM]
        if too_big:
            raise click.BadParameter(f"{name}: dimension {too_big[0]} is above {MAX_DIM} (2**31 - 1)", ctx, param)
        if math.prod(shape) > MAX_ELEMENTS:
            raise click.BadParameter(f"{name}: {math.prod(shape)} elements, more than gspo handles "
                                     f"in one input ({MAX_ELEMENTS}, 2**40)", ctx, param)
    return specs


def input_shape_option(fn):
    """The ``--input-shape NAME=D1,D2,...`` option (repeatable)."""
    return click.option(
        "--input-shape",
        "input_shapes",
        multiple=True,
        metavar="NAME=D1,D2,...",
        callback=_check_input_shapes,
        help="Pin the shape of a graph input (repeatable). Dynamic dimensions not pinned get "
             "defaults: 1 for a batch (first) dimension, 128 for any other. Each dimension at "
             f"most {MAX_DIM}, each input at most 2**40 elements.",
    )(fn)


def load_model(path: str, input_shapes=(), plain: bool = False):
    """Load a model for a command; say in one line which dynamic dimensions got defaults."""
    from gspo import ir

    graph = ir.load(path, ir.parse_input_shapes(input_shapes), plain=plain, refusal=_load_refusal)
    _say_defaults(path, graph)
    return graph


def _load_refusal(data: bytes) -> str | None:
    """Why onnxruntime refuses a serialized model (imported only when a model needs the check)."""
    from gspo.runtime.session import load_refusal

    return load_refusal(data)


def _say_defaults(path: str, graph) -> None:
    from gspo.ir.pinning import describe_defaults

    if graph.extras.defaulted:
        pins = {v.name: v.shape for v in graph.inputs}
        click.echo(f"gspo: {path}: {describe_defaults(graph.extras.defaulted, pins)}", err=True)


@contextmanager
def explaining(graphs, seed: int | None):
    """When onnxruntime fails to run one of ``graphs`` at the sizes gspo chose for its dynamic
    dimensions (random inputs from ``seed``; None: the user's inputs), say so in one line with
    the flags that fix it (:func:`gspo.runtime.default_sizes.explain_defaults_failure`)."""
    from gspo.runtime import BackendError

    try:
        yield
    except BackendError:
        if seed is not None:
            from gspo.runtime.default_sizes import explain_defaults_failure

            for graph in graphs:
                message = explain_defaults_failure(graph, seed)
                if message:
                    raise GspoError(message) from None
        raise


def inputs_option(fn):
    """The ``--inputs FILE.npz`` option: real inputs instead of random ones."""
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
        """The value as a float, or a usage error naming why it is refused."""
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
        """Run the command line: usage errors in one line, SIGINT and SIGTERM a clean stop."""
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


# ------------------------------------------------------------------- run/bench
def streams_option(fn):
    """The ``--streams N|auto`` option of run and bench."""
    return click.option(
        "--streams", default="auto", show_default=True, metavar="N|auto",
        help="Streams: 'auto' uses the schedule gspo optimize saved in the model, else one stream; "
             "N: Nimble's assignment capped at N streams (1 = one plain session).",
    )(fn)


def parse_streams(text: str | int) -> int | None:
    """``"auto"`` -> ``None``; a positive integer -> itself."""
    if isinstance(text, int) or str(text).strip().lower() != "auto":
        try:
            n = int(text)
        except ValueError:
            raise GspoError(f"--streams takes a positive integer or 'auto' (got {text!r})") from None
        if n < 1:
            raise GspoError(f"--streams must be at least 1 (got {n})")
        return n
    return None


def cuda_runtime_option(fn):
    """The ``--cuda-runtime auto|ort|torch`` option: the command's ``cuda_runtime`` (``None``:
    ``$GSPO_CUDA_RUNTIME``, else auto), which it passes on to what it runs."""
    return click.option(
        "--cuda-runtime", type=click.Choice(["auto", "ort", "torch"]), default=None,
        help="The runtime on --device cuda: onnxruntime-gpu's CUDA provider (ort) or PyTorch on "
             "cuda-python streams (torch) [default: auto, ort where its CUDA provider works, else torch; "
             "or $GSPO_CUDA_RUNTIME].")(fn)


def device_option(fn):
    """The ``--device cpu|cuda`` option, and ``--cuda-runtime``."""
    fn = cuda_runtime_option(fn)
    from gspo.search.options import DeviceOptions, default

    return click.option("--device", type=click.Choice(["cpu", "cuda"]), default=default(DeviceOptions, "name"),
                        show_default=True)(fn)


# ------------------------------------------------------------------ calibrate
def progress_printer(label: str):
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


def main() -> None:
    """The ``gspo`` entry point (a broken pipe ends it quietly)."""
    try:
        cli(prog_name="gspo")
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(141)
