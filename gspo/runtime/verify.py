"""Numerical equivalence of two models on the same inputs.

The criterion is scale-aware, per output: an element of the candidate ``b`` matches the
reference ``a`` when

    |b - a| <= atol + rtol * |a| + ntol * max|a|

where ``max|a|`` is the largest finite magnitude of that output. The first two terms are the
usual elementwise test; the third lets the rounding that reordering fp32 arithmetic costs grow
with the output's scale (a random-weight network whose outputs are ~1e12 differs by ~1e5 after
an exact rewrite, while an element near zero keeps no relative precision at all). An output a
DequantizeLinear computes with one scale for the whole tensor may also be off by one step of
that scale: integer kernels round the last requantization each their own way (onnxruntime's and
OpenVINO's put a QDQ ResNet-50's logits one step apart), so one step is allowed there and more
is refused. Integer and bool outputs must be equal; NaN and infinities must sit at the same
places (infinities with the same sign). Half-precision outputs are held to half-precision
tolerances. An output of another element type (float16 or float64 where the reference gives
float32, int32 for int64) or shape is a different model, whatever its values.

A comparison must compare something: a floating-point output with no finite value in either
model (all NaN or infinite, at the same places) compared nothing and is not a pass, and inputs
with no finite value in any of them are refused before anything runs (all-NaN ``--inputs``
made two models with different weights "equivalent").

An output that is not a tensor (a sequence, a map such as ZipMap's class probabilities, an
optional) must have the same structure: sequences of the same length, maps with the same keys,
``None`` where the reference has ``None``; the tensors and numbers it holds are compared one by
one by the same criterion.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.runtime.backends import REDUCED_BACKENDS, run_precision
from gspo.runtime.executor import make_executor
from gspo.runtime.inputs import random_inputs
from gspo.runtime.session import SessionConfig, make_session, run
from gspo.runtime.spill import SpilledArray

__all__ = ["DEFAULT_RTOL", "DEFAULT_ATOL", "DEFAULT_NTOL", "OutputDiff", "Tolerance", "VerifyResult",
           "check_finite_inputs", "check_has_outputs", "compare_outputs", "output_steps", "verify", "worse"]

DEFAULT_RTOL = 1e-3
DEFAULT_ATOL = 1e-4
#: The scale term: a rewrite may move any element by this fraction of the output's magnitude.
DEFAULT_NTOL = 1e-5
#: Floors for float16 / bfloat16 outputs (their rounding unit is ~1e-3 / ~8e-3).
_HALF_FLOOR = {"float16": (1e-2, 1e-3, 1e-3), "bfloat16": (5e-2, 1e-2, 1e-2)}


@dataclass(frozen=True)
class Tolerance:
    """The equivalence criterion's three terms (see the module docstring)."""

    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL
    ntol: float = DEFAULT_NTOL
    #: A quantized output's step (see the module docstring): elements may differ by one more.
    step: float = 0.0

    def for_dtype(self, dtype: np.dtype) -> Tolerance:
        """The tolerance for outputs of ``dtype`` (wider floors for half precision)."""
        floor = _HALF_FLOOR.get(np.dtype(dtype).name)
        if floor is None:
            return self
        return Tolerance(max(self.rtol, floor[0]), max(self.atol, floor[1]), max(self.ntol, floor[2]), self.step)


def output_steps(graph: Graph) -> dict[str, float]:
    """The quantization step of each output of ``graph`` that a DequantizeLinear computes with
    one constant scale for the whole tensor (per-axis scales get none)."""
    producers = graph.producers
    steps = {}
    for name in graph.output_names():
        node = producers[name][0] if name in producers else None
        if node is None or node.op_type != "DequantizeLinear" or node.domain not in ("", "ai.onnx"):
            continue
        scale = node.inputs[1] if len(node.inputs) > 1 else ""
        if scale not in graph.weights:
            continue
        value = np.asarray(graph.weights[scale].evaluate(graph.store), dtype=np.float64)
        if value.size == 1 and np.isfinite(value).all() and float(value.ravel()[0]) != 0:
            steps[name] = abs(float(value.ravel()[0]))
    return steps


@dataclass(frozen=True)
class OutputDiff:
    """How far one output of the candidate is from the reference's.

    Attributes:
        max_abs: the largest absolute difference.
        max_rel: the largest difference relative to the element (elements above the
            tolerance's absolute floor only).
        norm_rel: the largest difference relative to the output's largest magnitude.
        ok: whether every element meets the criterion.
    """

    name: str
    max_abs: float
    max_rel: float
    ok: bool
    norm_rel: float = 0.0
    reason: str = ""
    #: False when the output held no finite value in either model: nothing was compared.
    compared: bool = True


@dataclass(frozen=True)
class VerifyResult:
    """The outcome of a verification: equivalent or not, and the difference per output and run."""
    equivalent: bool
    outputs: tuple[OutputDiff, ...] = field(default_factory=tuple)
    #: How each model ran (:func:`verify`: the reference's way, then the candidate's).
    ran: tuple[str, ...] = ()

    @property
    def worst(self) -> OutputDiff | None:
        """The first output that differs (``None`` if none does)."""
        bad = [o for o in self.outputs if not o.ok]
        return bad[0] if bad else None

    @property
    def max_norm_rel(self) -> float:
        """The largest scale-relative difference over all outputs."""
        return max((o.norm_rel for o in self.outputs), default=0.0)


def _fail(name: str, reason: str) -> OutputDiff:
    return OutputDiff(name, float("inf"), float("inf"), False, float("inf"), reason)


#: Elements compared at a time: the comparison works in float64, a chunk at a time, so it costs
#: tens of MB beside the outputs whatever their size (whole, it took eight copies of an output).
_CHUNK = 1 << 16


def _flat(x) -> Iterator[np.ndarray]:
    """``x``'s elements in C order, a chunk at a time (read from its file when spilled)."""
    if isinstance(x, SpilledArray):
        yield from x.chunks(_CHUNK)
        return
    flat = np.ravel(x)
    for start in range(0, flat.size, _CHUNK):
        yield flat[start:start + _CHUNK]


def _chunks(a, b):
    """``a`` and ``b`` flattened, as float64, a chunk at a time."""
    for ca, cb in zip(_flat(a), _flat(b)):
        yield ca.astype(np.float64), cb.astype(np.float64)


def _equal(a, b) -> bool:
    """Whether ``a`` and ``b`` (same shape) hold the same elements."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return bool(np.array_equal(a, b))
    return all(np.array_equal(ca, cb) for ca, cb in zip(_flat(a), _flat(b)))


def _special_places(name: str, a: np.ndarray, b: np.ndarray) -> tuple[OutputDiff | None, float, bool]:
    """A failure when NaN or infinities are not at the same places (infinities with the same
    sign); else the largest finite magnitude of ``a`` and whether ``a`` has a finite element."""
    if any(not np.array_equal(np.isnan(ca), np.isnan(cb)) for ca, cb in _chunks(a, b)):
        return _fail(name, "NaN at different places"), 0.0, False
    scale, any_finite = 0.0, False
    for ca, cb in _chunks(a, b):
        inf_a, inf_b = np.isinf(ca), np.isinf(cb)
        if not np.array_equal(inf_a, inf_b) or not np.array_equal(ca[inf_a], cb[inf_b]):
            return _fail(name, "infinities at different places"), 0.0, False
        finite = np.abs(ca[np.isfinite(ca)])
        if finite.size:
            any_finite, scale = True, max(scale, float(finite.max()))
    return None, scale, any_finite


def _nothing_compared(name: str) -> OutputDiff:
    return OutputDiff(name, 0.0, 0.0, False, 0.0, "no finite value in either model (NaN or infinite at the same "
                                                  "places): compared nothing", compared=False)


def _diff(name: str, a: np.ndarray, b: np.ndarray, tol: Tolerance) -> OutputDiff:
    if a.shape != b.shape:
        return _fail(name, f"shape {list(b.shape)} instead of {list(a.shape)}")
    if a.dtype != b.dtype:
        return _fail(name, f"type {b.dtype.name} instead of {a.dtype.name}")
    if a.dtype.kind not in "fc":
        same = _equal(a, b)
        return OutputDiff(name, 0.0, 0.0, True) if same else _fail(name, "values differ")
    tol = tol.for_dtype(a.dtype)
    failed, scale, any_finite = _special_places(name, a, b)
    if failed is not None:
        return failed
    if not any_finite:
        return _nothing_compared(name) if a.size else OutputDiff(name, 0.0, 0.0, True)
    max_abs = max_rel = 0.0
    ok = True
    for ca, cb in _chunks(a, b):
        finite = np.isfinite(ca)
        fa, err = np.abs(ca[finite]), np.abs(ca[finite] - cb[finite])
        if err.size:
            max_abs = max(max_abs, float(err.max()))
            ok = ok and bool(np.all(err <= tol.atol + tol.rtol * fa + tol.ntol * scale + tol.step))
            above = fa > tol.atol
            if above.any():
                max_rel = max(max_rel, float((err[above] / fa[above]).max()))
    norm_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
    reason = "" if ok else f"max abs error {max_abs:.3g}" + (f", {max_abs / tol.step:.3g} quantization steps" if tol.step else "")
    return OutputDiff(name, max_abs, max_rel, ok, norm_rel, reason)


def _leaves(x, path: str, out: list) -> str | None:
    """Append ``(path, array)`` for every tensor or number inside ``x``; the structure as text."""
    if x is None:
        return "None"
    if isinstance(x, dict):
        keys = sorted(x, key=repr)
        parts = [f"{k!r}:{_leaves(x[k], f'{path}[{k!r}]', out)}" for k in keys]
        return "{" + ",".join(parts) + "}"
    if isinstance(x, (list, tuple)):
        return "[" + ",".join(str(_leaves(v, f"{path}[{i}]", out)) for i, v in enumerate(x)) + "]"
    out.append((path, np.asarray(x)))
    return "."


def _diff_any(name: str, a, b, tol: Tolerance) -> OutputDiff:
    """:func:`_diff` for tensors; for other outputs the same structure, then each leaf compared."""
    if isinstance(a, (np.ndarray, SpilledArray)) and isinstance(b, (np.ndarray, SpilledArray)):
        return _diff(name, a, b, tol)
    la: list = []
    lb: list = []
    if _leaves(a, name, la) != _leaves(b, name, lb):
        return _fail(name, "a different structure (lengths, keys or missing values)")
    diffs = [_diff(pa, xa, xb, tol) for (pa, xa), (_, xb) in zip(la, lb)]
    bad = next((d for d in diffs if not d.ok), None)
    if bad is not None:
        return OutputDiff(name, bad.max_abs, bad.max_rel, False, bad.norm_rel, f"{bad.name}: {bad.reason}")
    return OutputDiff(name, max((d.max_abs for d in diffs), default=0.0), max((d.max_rel for d in diffs), default=0.0),
                      True, max((d.norm_rel for d in diffs), default=0.0))


def compare_outputs(
    ref: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray], rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL, ntol: float = DEFAULT_NTOL, steps: Mapping[str, float] | None = None,
) -> VerifyResult:
    """Compare outputs by name with the scale-aware criterion of this module; ``steps``: the
    quantization step of the quantized outputs (:func:`output_steps` of the reference)."""
    if set(ref) != set(got):
        raise GspoError(
            f"the models have different outputs: {sorted(ref)} vs {sorted(got)}"
        )
    steps = steps or {}
    diffs = tuple(_diff_any(name, ref[name], got[name], Tolerance(rtol, atol, ntol, steps.get(name, 0.0)))
                  for name in ref)
    return VerifyResult(all(d.ok for d in diffs), diffs)


def _holds_finite(x: np.ndarray) -> bool:
    """Whether ``x`` has an element that is a value to compare: any element of a non-float
    array, a finite one of a floating-point array (a chunk at a time)."""
    x = np.asarray(x)
    if x.dtype.kind not in "fc":
        return x.size > 0
    flat = x.reshape(-1)
    return any(bool(np.isfinite(flat[i:i + _CHUNK]).any()) for i in range(0, flat.size, _CHUNK))


def check_finite_inputs(feeds: Mapping[str, np.ndarray], what: str = "the inputs") -> None:
    """Refuse inputs none of which holds a finite value (all NaN or infinite): every floating
    output computed from them is NaN or infinite, and comparing them compares nothing.

    Raises:
        GspoError: one line naming the inputs.
    """
    arrays = {k: v for k, v in feeds.items() if np.asarray(v).size}
    if not arrays or any(_holds_finite(v) for v in arrays.values()):
        return
    names = ", ".join(repr(k) for k in list(arrays)[:3]) + (", ..." if len(arrays) > 3 else "")
    raise GspoError(f"{what} hold no finite value ({names} {'has' if len(arrays) == 1 else 'have'} no finite value: "
                    "all NaN or infinite): nothing would be compared; give inputs with finite values")


def check_has_outputs(graph: Graph, what: str = "the model") -> None:
    """Refuse a graph with no outputs (it computes nothing; onnxruntime's own message about it
    is a page of C++)."""
    if not graph.outputs:
        raise GspoError(f"{what} has no outputs: it computes nothing")


def worse(old: OutputDiff | None, d: OutputDiff, by: str = "max_abs") -> bool:
    """Whether ``d`` (one input set's verdict on an output) replaces ``old`` (the worst so far):
    a difference beats a pass, a pass with something compared beats one that compared nothing,
    and among equals the larger difference (``by``: ``max_abs`` or ``norm_rel``) wins."""
    if old is None:
        return True
    rank_old, rank_new = _rank(old), _rank(d)
    return rank_new > rank_old or (rank_new == rank_old and getattr(d, by) > getattr(old, by))


def _rank(d: OutputDiff) -> int:
    """3: differs; 2: matches; 1: compared nothing."""
    if not d.compared:
        return 1
    return 2 if d.ok else 3


def _as_saved(graph: Graph, config: SessionConfig, what: str,
              stack: contextlib.ExitStack) -> tuple[Callable[[Mapping[str, np.ndarray]], dict], str]:
    """``graph`` run as gspo runs it (``gspo run``, :class:`gspo.InferenceSession`): without a saved
    schedule or placement, one onnxruntime session; with one, the executor that follows them
    (each piece on the backend it was placed on), closed with ``stack``. Returns the run and how
    it runs, in words that follow "MODEL ran" ("on onnxruntime", "as saved: 3 ops on openvino").

    Raises:
        GspoError: one line: the model cannot run here as saved (a backend it names is missing).
    """
    if not graph.extras.schedule and not graph.extras.placement:
        session = make_session(graph, config)
        return (lambda feeds: run(session, feeds)), "on onnxruntime"
    try:
        executor = stack.enter_context(make_executor(graph, None, "cpu", config))
    except GspoError as e:
        raise GspoError(f"{what} cannot run here as saved: {e}") from None
    placement = executor.placement
    where = "onnxruntime" if placement is None else ", ".join(
        f"{n} ops on {b}" + (" (at f32 here)" if b in REDUCED_BACKENDS and run_precision(b) == "f32" else "")
        for b, n in placement.counts(graph).items())
    streams = f" on {executor.num_streams} streams" if executor.num_streams > 1 else ""
    return executor.run, f"as saved: {where}{streams}"


def verify(
    reference: Graph,
    candidate: Graph,
    tolerance: Tolerance = Tolerance(),
    seed: int = 0,
    runs: int = 1,
    inputs: Mapping[str, np.ndarray] | None = None,
    config: SessionConfig = SessionConfig(),
) -> VerifyResult:
    """Run both graphs on the same inputs as gspo runs them and compare every output: a graph with
    a saved schedule or placement on the executor that follows them (a piece placed on OpenVINO
    runs there), any other on onnxruntime; how each ran is the result's ``ran``.

    Every output is held to ``tolerance``'s ``rtol``, ``atol`` and ``ntol`` (its ``step`` is
    the output's own: :func:`output_steps`). With ``inputs`` given they are used once (refused
    when none holds a finite value: see :func:`check_finite_inputs`); otherwise ``runs`` sets of
    random inputs are drawn from seeds ``seed, seed+1, ...``, one at a time, and the worst error
    per output is reported (an output that compared nothing in one set and matched in another
    matched).
    """
    check_has_outputs(reference, "the first model")
    check_has_outputs(candidate, "the second model")
    ref_in = {v.name: (v.dtype, v.shape) for v in reference.inputs}
    cand_in = {v.name: (v.dtype, v.shape) for v in candidate.inputs}
    if ref_in != cand_in:
        raise GspoError("the models have different inputs (names, types or shapes)")
    if inputs is not None:
        check_finite_inputs(inputs)
    with contextlib.ExitStack() as stack:
        run_ref, ran_ref = _as_saved(reference, config, "the first model", stack)
        run_cand, ran_cand = _as_saved(candidate, config, "the second model", stack)
        # One input set at a time: only it and the two models' outputs on it are held.
        feeds_sets = iter([inputs]) if inputs is not None else (random_inputs(reference, seed + i) for i in range(runs))
        worst: dict[str, OutputDiff] = {}
        steps = output_steps(reference)
        for feeds in feeds_sets:
            res = compare_outputs(run_ref(feeds), run_cand(feeds), tolerance.rtol, tolerance.atol, tolerance.ntol, steps)
            del feeds  # let the set go before the next one is drawn
            for d in res.outputs:
                if worse(worst.get(d.name), d):
                    worst[d.name] = d
    diffs = tuple(worst.values())
    return VerifyResult(all(d.ok for d in diffs), diffs, (ran_ref, ran_cand))
