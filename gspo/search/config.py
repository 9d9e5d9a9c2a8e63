"""optimize's settings, its result, and its error."""

from __future__ import annotations

import logging
import math
import numbers
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gspo.errors import GspoError
from gspo.ir import Graph, save
from gspo.ir.onnx_io import save_bytes
from gspo.partition import DEFAULT_THRESHOLD
from gspo.rules import DEFAULT_RULES, Rule
from gspo.runtime.verify import (
    DEFAULT_ATOL,
    DEFAULT_NTOL,
    DEFAULT_RTOL,
    Tolerance,
    check_has_outputs,
)
from gspo.streams import Placement, Schedule

if TYPE_CHECKING:
    from gspo.search.report import Report

log = logging.getLogger(__name__)


class OptimizeError(GspoError):
    """The optimized model differs from the original; nothing was written."""


#: The bounds the command line puts on its options (``MAX_SECONDS`` and ``SEED`` of
#: ``gspo.cli.common``), which every value reaching the API or a model set is held to as well
#: (``jobs`` beyond the cores, which the command line refuses, the API caps at the cores).
MAX_SECONDS = 7 * 24 * 3600.0
MAX_SEED = 2**32 - 1
#: The fewest timing rounds (``MIN_ROUNDS`` of :mod:`gspo.search.trial`).
MIN_TIMING_RUNS = 5


def _integer(low: int, high: int | None = None, null: bool = False):
    def check(v):
        if v is None and null:
            return None
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            return "must be an integer" + (" or None" if null else "")
        if v < low or (high is not None and v > high):
            return f"must be an integer in [{low}, {'inf' if high is None else high}]"
        return None
    return check


def _real(low: float, high: float | None = None, low_open: bool = False, high_open: bool = False,
          null: bool = False):
    def check(v):
        if v is None and null:
            return None
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
            return "must be a finite number" + (" or None" if null else "")
        if v < low or (low_open and v == low) or (high is not None and (v > high or (high_open and v == high))):
            lo, hi = "(" if low_open else "[", ")" if high_open or high is None else "]"
            return f"must be in {lo}{low:g}, {'inf' if high is None else f'{high:g}'}{hi}"
        return None
    return check


def _seed(v):
    """The seed's check: what numpy's generators take, within the command line's ``--seed`` range."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0:
        return "must be a non-negative integer"
    return f"must be an integer in [0, {MAX_SEED}]" if v > MAX_SEED else None


def _flag(v):
    return None if isinstance(v, bool) else "must be True or False"


def _one_of(*values):
    return lambda v: None if isinstance(v, (str, type(None))) and v in values else \
        "must be one of " + ", ".join(repr(x) for x in values)


def _path_or_none(v):
    return None if v is None or isinstance(v, (str, os.PathLike)) else "must be a name, a path or None"


def _names_or_none(v):
    ok = v is None or (isinstance(v, (tuple, list)) and all(isinstance(x, str) for x in v))
    return None if ok else "must be a list of backend names or None"


def _rule_list(v):
    ok = isinstance(v, (tuple, list)) and all(isinstance(r, Rule) for r in v)
    return None if ok else "must be a list of gspo rules"


def _precisions(v):
    from gspo.precision import PRECISIONS

    if not isinstance(v, tuple) or not all(isinstance(x, str) for x in v):
        return "must be a list of precisions"
    unknown = [x for x in v if x not in PRECISIONS]
    return f"takes {', '.join(PRECISIONS)} (unknown: {', '.join(unknown)})" if unknown else None


def _with(message: str, check):
    """``check`` with its range problem said as ``message`` (the messages users know); a wrong
    type is said as ``check`` says it."""
    def checked(v):
        problem = check(v)
        return message if problem and " in " in problem else problem
    return checked


#: Per option: the name the messages give it (the command line's flag where it has one) and its check.
CHECKS = {
    "device": ("--device", _one_of("cpu", "cuda")),
    "cuda_runtime": ("--cuda-runtime", _one_of(None, "auto", "ort", "torch")),
    "profile": ("--profile", _path_or_none),
    "force_profile": ("force_profile", _flag),
    "alpha": ("--alpha", _with("must be at least 1", _real(1))),
    "budget": ("--budget", _with("must not be negative", _integer(0))),
    "time_budget": ("--time-budget", _with(f"must be positive and at most {MAX_SECONDS:g} s (a week)",
                                           _real(0, MAX_SECONDS, low_open=True, null=True))),
    "threshold": ("--threshold", _integer(2)),
    "max_streams": ("--max-streams", _integer(1, null=True)),
    "jobs": ("--jobs", _integer(0)),
    "use_rules": ("use_rules", _flag),
    "use_streams": ("use_streams", _flag),
    "keep": ("keep", _integer(1)),
    "seed": ("the seed", _seed),
    "rtol": ("--rtol", _real(0)),
    "atol": ("--atol", _real(0)),
    "ntol": ("ntol", _real(0)),
    "verify_runs": ("verify_runs", _integer(1)),
    "timing_runs": ("timing_runs", _integer(MIN_TIMING_RUNS)),
    "piece_timing_budget": ("piece_timing_budget", _real(0, MAX_SECONDS, low_open=True)),
    "final_timing_budget": ("final_timing_budget", _real(0, MAX_SECONDS, low_open=True)),
    "margin": ("margin: margins", _real(0, 1, high_open=True)),
    "final_margin": ("final_margin: margins", _real(0, 1, high_open=True)),
    "select": ("--select", _one_of("measured", "estimated")),
    "frontend": ("frontend", _flag),
    "backends": ("--backends", _names_or_none),
    "db_path": ("db_path", _path_or_none),
    "rules": ("rules", _rule_list),
    "precision": ("--precision", _precisions),
    "max_error": ("--max-error", _path_or_none),
    "calibration": ("--calibration", _path_or_none),
    "validation": ("--validation", _path_or_none),
}


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_options(options: dict) -> OptimizeConfig:
    """:func:`~gspo.search.optimize.optimize`'s keyword options as a validated
    :class:`OptimizeConfig` (lists given for ``backends`` or ``rules`` taken as tuples).

    Raises:
        GspoError: an unknown option, or one of the wrong type or out of range (one line).
    """
    known = {f.name for f in fields(OptimizeConfig)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise GspoError(f"unknown option(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    given = {k: tuple(v) if k in ("backends", "rules", "precision") and isinstance(v, list) else v
             for k, v in options.items()}
    if isinstance(given.get("precision"), str):
        given["precision"] = tuple(p.strip().lower() for p in given["precision"].split(",") if p.strip())
    cfg = OptimizeConfig(**given)
    cfg.validate()
    return cfg


def check_model_and_inputs(model, inputs) -> None:
    """Refuse, before any work, a model that is neither a path nor a graph, a graph with no
    outputs, and ``inputs`` that are not arrays by input name (their arrays are not read here:
    a lazy ``--inputs`` file is checked against the model before it is read).

    Raises:
        GspoError: one line.
    """
    if isinstance(model, Graph):
        check_has_outputs(model)
    elif not isinstance(model, (str, os.PathLike)):
        raise GspoError(f"the model must be the path of an .onnx file or a gspo Graph (got {type(model).__name__})")
    if inputs is None:
        return
    # the arrays of a plain dict are there to look at; those of a lazy --inputs file are not read here
    arrays = inputs.values() if isinstance(inputs, dict) else ()
    if not (isinstance(inputs, Mapping) and all(isinstance(k, str) for k in inputs)) or \
            not all(isinstance(v, np.ndarray) for v in arrays):
        raise GspoError("--inputs must map input names to numpy arrays")


def refuse_no_outputs(model) -> None:
    """Raise the one-line error of a model with no outputs (called when onnxruntime failed on
    it: its own message is a page of C++); nothing when the model has outputs or cannot be read."""
    if isinstance(model, Graph):
        check_has_outputs(model)
        return
    from gspo.ir.external import read_header

    proto = read_header(model)
    if proto is None:  # unreadable: the error already raised says why
        return
    if not proto.graph.output:
        raise GspoError(f"{model}: the model has no outputs: it computes nothing")


@dataclass(frozen=True)
class OptimizeConfig:
    """Settings of ``optimize`` (the CLI builds this from its options)."""

    device: str = "cpu"
    #: The runtime on ``cuda``: "auto" (onnxruntime-gpu where its CUDA provider works, else
    #: torch), "ort" or "torch" (:mod:`gspo.runtime.cuda.choice`); None: as ``--cuda-runtime``
    #: or ``GSPO_CUDA_RUNTIME`` set it, else auto.
    cuda_runtime: str | None = None
    profile: str | None = None
    force_profile: bool = False
    alpha: float = 1.05
    budget: int = 40
    #: Seconds for the whole optimization (anytime): 90 keeps a full zoo model under 2 minutes
    #: on 2 cores (benchmarks/RESULTS.md); None = no limit.
    time_budget: float | None = 90.0
    threshold: int = DEFAULT_THRESHOLD
    #: The stream cap (``None``: the device's) and the search's processes (0: one per core);
    #: optimize resolves both (:func:`~gspo.search.optimize.resolved`) before any stage reads them.
    max_streams: int | None = None
    jobs: int = 0
    use_rules: bool = True
    use_streams: bool = True
    keep: int = 3
    seed: int = 0
    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL
    ntol: float = DEFAULT_NTOL
    #: Random input sets every candidate is verified on (user inputs replace them).
    verify_runs: int = 2
    timing_runs: int = 30
    #: Seconds of timing per piece, and per whole-model comparison, at most (runs shrink to fit,
    #: at least 5).
    piece_timing_budget: float = 1.0
    final_timing_budget: float = 8.0
    #: How much faster than the unmodified piece a piece's pick must measure: the best of several
    #: noisy options is biased low, so the bar is high.
    margin: float = 0.05
    #: The same for the whole model, whose choice is made among two or three options and must
    #: hold in two separate timings (the confirmation): a lower bar, so that a real gain of 2-5%
    #: (NASNet-A Large's padded stem, measured 3.6-8.3% in four sets) is not thrown away as noise.
    final_margin: float = 0.02
    #: "measured": pick by measured latency (never slower as measured; may differ between runs
    #: when candidates are within noise). "estimated": pick by the cost model among the verified
    #: candidates (byte-identical output for the same input, seed and profile).
    select: str = "measured"
    #: Pass the model through the front end (constant folding, shape arithmetic as constants).
    frontend: bool = True
    #: Backends to place the model or its pieces on (``None``: every one installed here).
    backends: tuple[str, ...] | None = None
    #: Calibration database caching piece timings per backend (``None``: the user's cache).
    db_path: str | None = None
    rules: tuple[Rule, ...] = field(default=DEFAULT_RULES, compare=False)
    #: Reduced precisions to search besides fp32 (``("bf16", "int8")``; empty: exact fp32 only),
    #: within ``max_error`` (the accuracy budget, e.g. ``"nmse=1e-3"``), measured on the
    #: ``validation`` data (an .npz file or a folder of them) after tuning on ``calibration``.
    precision: tuple[str, ...] = ()
    max_error: str | None = None
    calibration: str | None = None
    validation: str | None = None

    def validate(self) -> None:
        """Raise :class:`GspoError` with a one-line message on an option of the wrong type or
        out of the range the command line allows (:data:`CHECKS`)."""
        for name, (flag, check) in CHECKS.items():
            value = getattr(self, name)
            problem = check(value)
            if problem:
                raise GspoError(f"{flag} {problem} (got {_shown(value)})")
        self._check_precision()
        if self.device == "cuda":
            if self.backends is not None:
                raise GspoError("--backends places pieces on the cpu device; with --device cuda the whole model runs on the GPU")
            from gspo.runtime.cuda.choice import require_cuda, set_cuda_runtime

            if self.cuda_runtime is not None:
                set_cuda_runtime(self.cuda_runtime)
            require_cuda()

    def _check_precision(self) -> None:
        """The precision options make sense together (one line when not)."""
        reduced = [p for p in self.precision if p != "fp32"]
        if reduced and not self.max_error:
            raise GspoError("--precision needs an accuracy budget: give --max-error (e.g. nmse=1e-3, cosine=0.999, "
                            "top1=0.99)")
        if not reduced:
            given = [f for f, v in (("--max-error", self.max_error), ("--calibration", self.calibration),
                                    ("--validation", self.validation)) if v]
            if given:
                raise GspoError(f"{given[0]} applies to reduced precision: give --precision bf16, int8 or both")
            return
        if self.device == "cuda":
            raise GspoError("--precision runs on the cpu device (OpenVINO bf16, int8 QDQ); not with --device cuda")
        from gspo.precision.accuracy import ErrorBudget

        ErrorBudget.parse(self.max_error)

    @property
    def tolerance(self) -> Tolerance:
        """The equivalence tolerance these settings give."""
        return Tolerance(self.rtol, self.atol, self.ntol)


@dataclass(frozen=True)
class OptimizeResult:
    """What ``optimize`` found: the graph to save, its schedule (``None``: one stream), the report
    (:class:`~gspo.search.report.Report`; ``report["speedup"]`` reads a field as from a dict).

    ``keep_dynamic``: the result was checked at other input sizes and is saved with the input's
    dynamic dimensions.
    """

    original: Graph
    graph: Graph
    schedule: Schedule | None
    report: Report
    keep_dynamic: bool = False
    #: The bytes of the model file as read (once) and loaded, when they are the result as they
    #: are (nothing changed, no input shape pinned, no external data): saving then writes them.
    source: bytes | None = None
    #: The backend of each op, when not onnxruntime for all (``gspo run`` follows it).
    placement: Placement | None = None

    @property
    def unchanged(self) -> bool:
        """Whether the result is the input as given (same graph, no schedule, no placement)."""
        return self.graph.key == self.original.key and self.schedule is None and self.placement is None

    def save(self, path: str | os.PathLike, overwrite: bool = False) -> Path:
        """Write the optimized model (its schedule and placement, if any, in the model's
        metadata); an unchanged model read from a file is written as the bytes read then (the
        file is not read again).

        Raises:
            OutputError: ``path`` exists (also one that appeared meanwhile) and ``overwrite``
                is false, or it cannot be written.
        """
        if self.unchanged and self.source is not None:
            return save_bytes(self.source, path, overwrite)
        return save(self.graph, path, self.schedule.to_json() if self.schedule else None, overwrite,
                    keep_dynamic=self.keep_dynamic, placement=self.placement.to_json() if self.placement else None)


@dataclass
class Prepared:
    """The model as given and as searched, the inputs every check runs on, and what happened."""

    original: Graph
    work: Graph
    feeds: list[dict[str, np.ndarray]]
    notes: list[str]
    #: The model file's bytes both graphs were loaded from, when they are the model as given
    #: (``None``: given as a Graph, with input shapes pinned, or with external data).
    data: bytes | None = None
    #: Seconds one run of the original took (0.0: not run; the time budget's estimates use it).
    run_s: float = 0.0
