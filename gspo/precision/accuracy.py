"""The accuracy budget of reduced precision (``--max-error SPEC``) and the metrics it bounds.

A budget is a list of limits, each ``metric=value``, optionally for one output only
(``output:metric=value``)::

    nmse=1e-3                        every floating-point output: normalized MSE at most 1e-3
    cosine=0.999,top1=0.99           cosine similarity at least 0.999, top-1 agreement 99%
    logits:top5=0.99,boxes:nmse=1e-4 each output its own
    "out,1":nmse=1e-2                an output whose name holds ',' or '=', in double quotes

The metrics, per output, over all the samples (``a``: the reference, ``b``: the candidate):

* ``nmse``: sum ||b - a||^2 / sum ||a||^2 (lower is better); ``rel_l2``: its square root;
* ``maxrel``: max |b - a| / max |a|, relative to the output's magnitude (lower is better);
* ``cosine``: the lowest, over the samples, cosine similarity of the flattened output;
* ``topK`` (K = 1 .. 100): the fraction of rows (all axes but the last, flattened, over all
  samples) where the reference's top-1 class is among the candidate's top K.

A limit without an output name applies to every floating-point output. An integer or bool
output (an ArgMax's label) takes only ``top1``, as the fraction of equal elements; with no
such limit it must be exactly equal (metric ``exact``): no output drifts without a stated
budget. A NaN or infinity of the candidate where the reference is finite, another shape, or
floats where the reference has integers (or the reverse) breaks every limit of that output.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gspo.errors import GspoError, first_line
from gspo.precision.spec import quote_output, quoted_output, split_items

__all__ = ["LOWER_IS_BETTER", "METRICS", "Limit", "ErrorBudget", "Accuracy", "check_metric_name", "measure", "judge", "shown"]

#: The metrics where lower is better; the others (cosine, topK, exact) are better higher.
LOWER_IS_BETTER = ("nmse", "rel_l2", "maxrel")
#: The metrics a budget names, as its error messages list them.
METRICS = "nmse, rel_l2, maxrel, cosine, top1 ... top100"
_TOPK = re.compile(r"top([1-9][0-9]?|100)")
#: What every spec error ends with: how to write a limit.
_FORM = (f"(write [output:]metric=value, e.g. nmse=1e-3, an output name with ',' or '=' in double quotes: "
         f"\"out,1\":nmse=1e-3; metrics: {METRICS})")


def check_metric_name(metric: str) -> str:
    """``metric`` as a budget names it (lower case), refused unless one of :data:`METRICS`.

    Raises:
        GspoError: one line naming the metric and the accepted ones.
    """
    name = metric.strip().lower()
    if name in LOWER_IS_BETTER or name == "cosine" or _TOPK.fullmatch(name):
        return name
    raise GspoError(f"--max-error: unknown metric {metric.strip()!r} {_FORM}")


def _top_k(metric: str) -> int | None:
    """K of a ``topK`` metric (``None`` for the others)."""
    m = _TOPK.fullmatch(metric)
    return int(m.group(1)) if m else None


def _num(x: float) -> str:
    """The shortest text that reads back as ``x`` exactly."""
    for digits in range(1, 18):
        text = f"{x:.{digits}g}"
        if float(text) == x:
            return text
    return repr(x)


@dataclass(frozen=True)
class Limit:
    """One limit of a budget: ``metric`` at most (lower-better) or at least ``bound``, for
    the output ``output`` (``None``: every output it applies to)."""

    metric: str
    bound: float
    output: str | None = None

    @property
    def lower_is_better(self) -> bool:
        """Whether the metric is an error (the bound is a maximum)."""
        return self.metric in LOWER_IS_BETTER

    def holds(self, value: float) -> bool:
        """Whether ``value`` of the metric keeps within the bound."""
        return value <= self.bound if self.lower_is_better else value >= self.bound

    def excess(self, value: float) -> float:
        """How far ``value`` is from holding: value / bound (lower-better), (1 - value) /
        (1 - bound) (higher-better); at most 1 exactly when the limit holds."""
        if self.lower_is_better:
            used, room = value, self.bound
        else:
            used, room = 1.0 - min(value, 1.0), 1.0 - self.bound
        ratio = used / room if room > 0 else (0.0 if used <= 0 else math.inf)
        ratio = max(ratio, 0.0)
        return min(ratio, 1.0) if self.holds(value) else max(ratio, math.nextafter(1.0, math.inf))

    def __str__(self) -> str:
        return f"{quote_output(self.output) + ':' if self.output is not None else ''}{self.metric}={_num(self.bound)}"


def _parse_limit(item: str) -> Limit:
    """One ``[output:]metric=value`` item of a spec; ``output`` may be in double quotes."""
    if item.strip().startswith('"'):
        output, rest = quoted_output(item, _FORM)
        key, eq, text = rest.partition("=")
        colon, metric = ":", key
    else:
        key, eq, text = item.partition("=")
        output, colon, metric = key.strip().rpartition(":")
    if not eq:
        raise GspoError(f"--max-error: {item.strip()!r} has no '=value' {_FORM}")
    if colon and not output.strip():
        raise GspoError(f"--max-error: {item.strip()!r} has an empty output name before ':' {_FORM}")
    metric = check_metric_name(metric)
    try:
        bound = float(text.strip())
    except ValueError:
        bound = math.nan
    if not math.isfinite(bound):
        raise GspoError(f"--max-error: {item.strip()!r}: {text.strip()!r} is not a finite number {_FORM}")
    low, high = (0.0, math.inf) if metric in LOWER_IS_BETTER else ((-1.0, 1.0) if metric == "cosine" else (0.0, 1.0))
    if not low <= bound <= high:
        where = f"at least {low:g}" if high == math.inf else f"in [{low:g}, {high:g}]"
        raise GspoError(f"--max-error: {item.strip()!r}: {metric} must be {where} {_FORM}")
    quoted = item.strip().startswith('"')
    return Limit(metric, bound, (output if quoted else output.strip()) if colon else None)


@dataclass(frozen=True)
class ErrorBudget:
    """The accuracy budget: the limits every output of a candidate must keep (see the module
    docstring); ``str()`` gives the canonical spec, which :meth:`parse` reads back."""

    limits: tuple[Limit, ...]

    @classmethod
    def parse(cls, spec: str) -> ErrorBudget:
        """The budget ``spec`` states: ``[output:]metric=value`` items separated by commas; an
        output whose name holds ``,`` or ``=`` is written in double quotes (``"out,1":nmse=1e-2``;
        ``\\"`` and ``\\\\`` inside them stand for ``"`` and ``\\``).

        Raises:
            GspoError: one line naming what is wrong (an empty spec or item, an unknown metric,
                a missing ``=``, a value that is not a number or out of range, a metric given
                twice for the same output) and the accepted metrics.
        """
        if not spec or not spec.strip():
            raise GspoError(f"--max-error is empty {_FORM}")
        limits: list[Limit] = []
        seen = set()
        for item in split_items(spec, _FORM):
            if not item.strip():
                raise GspoError(f"--max-error {spec!r}: an empty item between commas {_FORM}")
            limit = _parse_limit(item)
            if (limit.output, limit.metric) in seen:
                whom = f"output {limit.output!r}" if limit.output is not None else "every output"
                raise GspoError(f"--max-error: {limit.metric} is given twice for {whom} {_FORM}")
            seen.add((limit.output, limit.metric))
            limits.append(limit)
        return cls(tuple(limits))

    def __str__(self) -> str:
        return ",".join(str(limit) for limit in self.limits)

    def limits_for(self, output: str, is_float: bool) -> tuple[Limit, ...]:
        """The limits that apply to ``output``: its own and those without a name; on an
        integer or bool output only ``top1`` (element agreement)."""
        return tuple(lim for lim in self.limits
                     if lim.output in (None, output) and (is_float or lim.metric == "top1"))

    def check_outputs(self, outputs: Mapping[str, np.dtype | str]) -> None:
        """Refuse a budget that does not fit the outputs (name -> dtype): a limit for an output
        there is not, a metric other than top1 named for an integer output, or a
        floating-point output no limit applies to (none may drift without a stated budget).

        Raises:
            GspoError: one line naming the outputs.
        """
        unknown = sorted({lim.output for lim in self.limits if lim.output is not None} - set(outputs))
        if unknown:
            raise GspoError(f"--max-error names output(s) {', '.join(map(repr, unknown))} the model does not have "
                            f"(its outputs: {', '.join(map(repr, outputs))})")
        for lim in self.limits:
            if lim.output is not None and lim.metric != "top1" and not _float_dtype(np.dtype(outputs[lim.output])):
                raise GspoError(f"--max-error {lim}: output {lim.output!r} is {np.dtype(outputs[lim.output])}, "
                                "not floating-point: only top1 (the fraction of equal elements) applies to it")
        bare = [n for n, dt in outputs.items() if _float_dtype(np.dtype(dt)) and not self.limits_for(n, True)]
        if bare:
            raise GspoError(f"--max-error sets no limit for the output(s) {', '.join(map(repr, bare))}: add one "
                            f"(e.g. {quote_output(bare[0])}:nmse=1e-4) or a limit without an output name, which applies to all")


    def check_graph(self, graph) -> None:
        """:meth:`check_outputs` for the outputs of a :class:`~gspo.ir.Graph` (an output that
        is not a tensor, or of a type numpy has not, counts as not floating-point).

        Raises:
            GspoError: one line naming the outputs.
        """
        from gspo.ir.weights import np_dtype

        dtypes = {}
        for v in graph.outputs:
            try:
                dtypes[v.name] = np_dtype(v.dtype) if v.is_tensor else np.dtype(object)
            except (KeyError, TypeError, ValueError):
                dtypes[v.name] = np.dtype(object)
        self.check_outputs(dtypes)


def _float_dtype(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is floating-point (numpy's, or ml_dtypes' bfloat16 and float8)."""
    return dtype.kind == "f" or dtype.name.startswith(("bfloat", "float"))


@dataclass(frozen=True)
class Accuracy:
    """A candidate judged by a budget.

    Attributes:
        outputs: per output, every metric that applies to it (nmse, cosine and maxrel for a
            floating-point output, rel_l2 and each topK its limits name; top1 or exact for an
            integer one).
        broken: one line per limit broken (``logits: nmse 3.2e-03 > 1e-03``).
        holds: whether no limit is broken.
        excess: how far the worst limit is from holding (see :meth:`Limit.excess`): at most 1
            when all hold; ranks candidates.
        samples: how many samples were measured.
    """

    outputs: dict[str, dict[str, float]]
    broken: tuple[str, ...]
    holds: bool
    excess: float
    samples: int

    def lines(self) -> list[str]:
        """One line per output with its metrics (``logits  nmse 1.2e-04  cosine 0.99994 ...``)."""
        width = max((len(name) for name in self.outputs), default=0)
        return [f"{name:<{width}}  " + "  ".join(f"{m} {shown(m, v)}" for m, v in metrics.items())
                for name, metrics in self.outputs.items()]

    def to_json(self) -> dict:
        """The accuracy as JSON data (an infinite value as the string ``"inf"`` or ``"-inf"``)."""
        return {"holds": self.holds, "excess": _json_float(self.excess), "samples": self.samples,
                "outputs": {name: {m: _json_float(v) for m, v in metrics.items()} for name, metrics in self.outputs.items()},
                "broken": list(self.broken)}

    @classmethod
    def from_json(cls, data: Mapping) -> Accuracy:
        """The accuracy of :meth:`to_json`'s dict (``"inf"`` read back as a float)."""
        return cls({name: {m: float(v) for m, v in metrics.items()} for name, metrics in data["outputs"].items()},
                   tuple(data["broken"]), data["holds"], float(data["excess"]), data["samples"])


def _json_float(x: float) -> float | str:
    return float(x) if math.isfinite(x) else str(float(x))


def shown(metric: str, value: float | str, digits: int | None = None) -> str:
    """``value`` of ``metric`` as the reports show it (also a value read back from
    :meth:`Accuracy.to_json`, where an infinite one is a string)."""
    if isinstance(value, str) or not math.isfinite(value):
        return str(value)
    if metric == "exact":
        return f"{value:g}"
    if metric in LOWER_IS_BETTER:
        return f"{value:.{1 if digits is None else digits}e}"
    if digits is None:  # enough decimals that a value below 1 does not show as 1
        digits = 5 if metric == "cosine" else 3
        while value < 1 and float(f"{value:.{digits}f}") == 1 and digits < 12:
            digits += 1
    return f"{value:.{digits}f}"


def _broken_line(output: str, limit: Limit, value: float, reason: str) -> str:
    """The line that says how ``limit`` is broken on ``output`` (digits enough to show it)."""
    if reason:
        return f"{output}: {limit.metric} {shown(limit.metric, value)} ({reason})"
    if limit.metric == "exact":
        return f"{output}: differs from the reference, and no limit of the budget covers it (outputs that are " \
               "not floating-point must be equal unless a top1 limit applies)"
    digits = 1 if limit.lower_is_better else (5 if limit.metric == "cosine" else 3)
    while digits < 17 and limit.holds(float(shown(limit.metric, value, digits))):
        digits += 1
    sign = ">" if limit.lower_is_better else "<"
    return f"{output}: {limit.metric} {shown(limit.metric, value, digits)} {sign} {_num(limit.bound)}"


@dataclass
class _Sums:
    """What the float metrics of one output accumulate over the samples."""

    err2: float = 0.0
    ref2: float = 0.0
    max_err: float = 0.0
    max_ref: float = 0.0
    cosine: float = math.inf
    rows: int = 0


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two flat arrays (two zero: 1, one zero: 0; equal arrays exactly 1,
    whatever the rounding of the norms)."""
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0 or nb == 0:
        return 1.0 if na == nb else 0.0
    if np.array_equal(a, b):
        return 1.0
    return min(max(float(np.dot(a, b) / na / nb), -1.0), 1.0)


def _top_hits(a: np.ndarray, b: np.ndarray, ks: Sequence[int]) -> tuple[int, dict[int, int]]:
    """Rows (all axes but the last), and for each K the rows where the reference's top class
    is among the candidate's top K (fewer than K of the candidate's scores above its own)."""
    classes = a.shape[-1] if a.ndim else 1
    if a.size == 0:
        return 0, dict.fromkeys(ks, 0)
    ra = np.where(np.isnan(a), -np.inf, a).reshape(-1, classes)
    rb = np.where(np.isnan(b), -np.inf, b).reshape(-1, classes)
    picked = rb[np.arange(len(ra)), ra.argmax(axis=1)]
    above = (rb > picked[:, None]).sum(axis=1)
    return len(ra), {k: int((above < k).sum()) for k in ks}


def _ratio(x: float, y: float) -> float:
    """``x / y``, with 0 / 0 = 0 and x / 0 = infinity."""
    return x / y if y > 0 else (0.0 if x == 0 else math.inf)


def _float_metrics(pairs, ks: Sequence[int]) -> tuple[dict[str, float], str]:
    """nmse, cosine, maxrel and each topK of a floating-point output over its samples, and why
    it fails ("" when it does not)."""
    sums, hits = _Sums(), dict.fromkeys(ks, 0)
    for a, b in pairs:
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        finite = np.isfinite(a)
        if not np.isfinite(b[finite]).all():
            return {}, "NaN or infinity where the reference is finite"
        if not np.array_equal(a[~finite], b[~finite], equal_nan=True):
            return {}, "another value where the reference is NaN or infinite"
        fa, fb = a[finite], b[finite]
        d = fb - fa
        sums.err2 += float(np.dot(d, d))
        sums.ref2 += float(np.dot(fa, fa))
        if d.size:
            sums.max_err = max(sums.max_err, float(np.abs(d).max()))
            sums.max_ref = max(sums.max_ref, float(np.abs(fa).max()))
        sums.cosine = min(sums.cosine, _cosine(fa, fb))
        if ks:
            rows, got = _top_hits(a, b, ks)
            sums.rows += rows
            hits = {k: hits[k] + got[k] for k in ks}
    nmse = _ratio(sums.err2, sums.ref2)
    metrics = {"nmse": nmse, "rel_l2": math.sqrt(nmse), "cosine": sums.cosine,
               "maxrel": _ratio(sums.max_err, sums.max_ref)}
    metrics.update({f"top{k}": hits[k] / sums.rows if sums.rows else 1.0 for k in ks})
    return metrics, ""


def _agreement(pairs) -> tuple[float, bool]:
    """The fraction of equal elements of a non-float output over its samples, and whether all are."""
    equal = total = 0
    for a, b in pairs:
        same = np.asarray(a == b)
        if same.shape != a.shape:  # an object array numpy did not compare elementwise
            same = np.full(a.shape, bool(np.array_equal(a, b)))
        equal, total = equal + int(same.sum()), total + a.size
    return (equal / total if total else 1.0), equal == total


def _mismatch(pairs) -> str:
    """Why the candidate's arrays cannot be compared with the reference's ("" when they can)."""
    for a, b in pairs:
        if a.shape != b.shape:
            return f"shape {list(b.shape)} instead of {list(a.shape)}"
        if _float_dtype(a.dtype) != _float_dtype(b.dtype):
            return f"type {b.dtype} instead of {a.dtype}"
    return ""


def _measure_output(pairs, limits: Sequence[Limit], is_float: bool) -> tuple[dict[str, float], str, tuple[Limit, ...]]:
    """The metrics of one output, why it fails ("" when it does not), and the limits it is
    held to (an ``exact`` limit for a non-float output that no limit covers)."""
    reason = _mismatch(pairs)
    if not is_float:
        limits = tuple(limits) or (Limit("exact", 1.0),)
        share, equal = (0.0, False) if reason else _agreement(pairs)
        return {lim.metric: (share if lim.metric == "top1" else float(equal)) for lim in limits}, reason, limits
    ks = sorted({k for k in map(_top_k, (lim.metric for lim in limits)) if k is not None})
    metrics, why = _float_metrics(pairs, ks) if not reason else ({}, reason)
    shown = ["nmse"] + (["rel_l2"] if any(lim.metric == "rel_l2" for lim in limits) else []) \
        + ["cosine", "maxrel"] + [f"top{k}" for k in ks]
    if why:  # every metric fails
        metrics = {m: (math.inf if m in LOWER_IS_BETTER else (-math.inf if m == "cosine" else 0.0)) for m in shown}
    return {m: metrics[m] for m in shown}, why, tuple(limits)


def measure(reference: Sequence[Mapping[str, np.ndarray]], candidate: Sequence[Mapping[str, np.ndarray]],
            budget: ErrorBudget) -> Accuracy:
    """Judge the candidate's outputs by ``budget``: ``reference[i]`` and ``candidate[i]`` are
    the outputs (by name) of the reference model and of the candidate on sample ``i``.

    Raises:
        GspoError: no samples, not as many of each, other output names, or a budget that does
            not fit the outputs (:meth:`ErrorBudget.check_outputs`).
    """
    if len(reference) != len(candidate):
        raise GspoError(f"{len(reference)} reference samples but {len(candidate)} candidate samples")
    if not reference:
        raise GspoError("no samples to measure the error on")
    names = list(reference[0])
    for ref, cand in zip(reference, candidate):
        if set(ref) != set(names) or set(cand) != set(names):
            raise GspoError(f"the models have different outputs: {sorted(ref)} vs {sorted(cand)}")
    dtypes = {name: np.asarray(reference[0][name]).dtype for name in names}
    budget.check_outputs(dtypes)
    outputs: dict[str, dict[str, float]] = {}
    broken, excess = [], 0.0
    for name in names:
        pairs = [(np.asarray(r[name]), np.asarray(c[name])) for r, c in zip(reference, candidate)]
        is_float = _float_dtype(dtypes[name])
        metrics, reason, limits = _measure_output(pairs, budget.limits_for(name, is_float), is_float)
        outputs[name] = metrics
        for lim in limits:
            value = metrics[lim.metric]
            ok = not reason and lim.holds(value)
            excess = max(excess, lim.excess(value) if not reason else math.inf)
            if not ok:
                broken.append(_broken_line(name, lim, value, reason))
    return Accuracy(outputs, tuple(broken), not broken, excess, len(reference))


def _session(path: str, input_shapes: Mapping[str, Sequence[int]] | None):
    """``gspo.InferenceSession`` of ``path`` (its saved schedule and placement followed)."""
    from gspo.runtime.deploy import InferenceSession
    from gspo.runtime.session import BackendError

    try:
        return InferenceSession(path, input_shapes=input_shapes)
    except GspoError:
        raise
    except Exception as e:  # onnxruntime's own session refused the file
        raise BackendError(f"{path}: cannot load the model: {first_line(e)}") from None


def _run_all(path: str, session, samples: Sequence[Mapping[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """The outputs of ``session`` on every sample, by name."""
    from gspo.runtime.session import BackendError

    names = [o.name for o in session.get_outputs()]
    outputs = []
    for sample in samples:
        try:
            values = session.run(names, dict(sample))
        except GspoError:
            raise
        except Exception as e:
            raise BackendError(f"{path}: failed to run the model: {first_line(e)}") from None
        outputs.append(dict(zip(names, values)))
    return outputs


def judge(model_a: str, model_b: str, budget: ErrorBudget, samples: Sequence[Mapping[str, np.ndarray]],
          input_shapes: Mapping[str, Sequence[int]] | None = None) -> Accuracy:
    """Run ``model_a`` (the reference) and ``model_b`` (the candidate) on ``samples``, each
    with ``gspo.InferenceSession`` as it was saved (schedule and placement followed), and judge
    the candidate by ``budget`` (:func:`measure`).

    Raises:
        GspoError: no samples, models with other inputs or outputs, a model that does not load
            or run (:class:`~gspo.runtime.session.BackendError`), a budget that does not fit.
    """
    if not samples:
        raise GspoError("no samples to judge the models on")
    outputs = []
    described = []
    for path in (model_a, model_b):
        session = _session(path, input_shapes)
        try:
            described.append([(i.name, i.type) for i in session.get_inputs()])
            if len(described) == 2 and described[0] != described[1]:
                raise GspoError("the models have different inputs (names or types)")
            outputs.append(_run_all(path, session, samples))
        finally:
            session.close()
    return measure(outputs[0], outputs[1], budget)
