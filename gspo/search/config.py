"""optimize's settings checked as the command line checks them, and its error (the settings
themselves: :mod:`gspo.search.options`)."""

from __future__ import annotations

import logging
import math
import numbers
import os
from collections.abc import Mapping

import numpy as np

from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.rules import Rule
from gspo.runtime.verify import check_has_outputs
from gspo.search.options import MaxError, OptimizeConfig

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


def _budget_or_none(v):
    return None if v is None or isinstance(v, MaxError) else "must be an accuracy budget such as 'nmse=1e-3' or None"


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


#: Per option (its flat name, :func:`~gspo.search.options.settings`): the name the messages give it
#: (the command line's flag where it has one) and its check.
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
    "max_error": ("--max-error", _budget_or_none),
    "calibration": ("--calibration", _path_or_none),
    "validation": ("--validation", _path_or_none),
}


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_options(options: dict, base: OptimizeConfig | None = None) -> OptimizeConfig:
    """:func:`~gspo.search.driver.optimize`'s keyword options as a validated
    :class:`OptimizeConfig`: ``base`` (default: the defaults) with those options replacing its
    values, each read as it enters (:meth:`OptimizeConfig.replace`).

    Raises:
        GspoError: an unknown option, or one of the wrong type or out of range (one line).
    """
    if base is not None and not isinstance(base, OptimizeConfig):
        raise GspoError(f"the config must be an OptimizeConfig (got {type(base).__name__})")
    cfg = (base if base is not None else OptimizeConfig()).replace(**options)
    validate(cfg)
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


def validate(cfg: OptimizeConfig) -> None:
    """Raise :class:`GspoError` with a one-line message on an option of the wrong type or out of
    the range the command line allows (:data:`CHECKS`), or options that do not make sense
    together; on ``cuda``, require the CUDA runtime asked for to work here."""
    options = cfg.options()
    for name, (flag, check) in CHECKS.items():
        value = options[name]
        problem = check(value)
        if problem:
            raise GspoError(f"{flag} {problem} (got {_shown(value)})")
    _check_precision(cfg)
    if cfg.device.name == "cuda":
        if cfg.device.backends is not None:
            raise GspoError("--backends places pieces on the cpu device; with --device cuda the whole model runs on the GPU")
        from gspo.runtime.cuda.choice import require_cuda

        require_cuda(cfg.device.cuda_runtime)


def _check_precision(cfg: OptimizeConfig) -> None:
    """The precision options make sense together (one line when not)."""
    p = cfg.precision
    reduced = [x for x in p.precisions if x != "fp32"]
    if reduced and p.max_error is None:
        raise GspoError("--precision needs an accuracy budget: give --max-error (e.g. nmse=1e-3, cosine=0.999, "
                        "top1=0.99)")
    if not reduced:
        given = [f for f, v in (("--max-error", p.max_error), ("--calibration", p.calibration),
                                ("--validation", p.validation)) if v]
        if given:
            raise GspoError(f"{given[0]} applies to reduced precision: give --precision bf16, int8 or both")
        return
    if cfg.device.name == "cuda":
        from gspo.runtime.cuda.choice import requested_runtime

        if requested_runtime(cfg.device.cuda_runtime) != "torch":  # auto could choose ort: say which runs it
            raise GspoError("--precision with --device cuda runs on the torch runtime (fp16, bf16, tf32): give "
                            "--cuda-runtime torch (onnxruntime's CUDA provider is not searched for reduced precision)")
