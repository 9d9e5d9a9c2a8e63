"""Preparing a model for the search: the model as given and through the front end (read once),
valid inputs drawn, and the front end's graph checked against the model, within the time budget."""

from __future__ import annotations

import dataclasses
import math
import os
import time
from pathlib import Path

from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.ir.onnx_io import from_model, load_bytes, read_model_file, to_model, uses_external_data
from gspo.ir.pinning import describe_defaults
from gspo.ir.weights import Init, np_dtype
from gspo.runtime import make_session, run
from gspo.runtime.backends import DEFAULT_BACKEND
from gspo.runtime.default_sizes import explain_defaults_failure
from gspo.runtime.inputs import (
    LARGE_INPUT_SET,
    InputsOutOfTime,
    check_inputs,
    check_seed,
    human_bytes,
    input_bytes,
    input_set_count,
    making_seconds,
    output_bytes,
    random_input_sets,
    require_memory,
)
from gspo.runtime.session import load_refusal
from gspo.runtime.types import complete_types
from gspo.search.budget import Timebox
from gspo.search.build_costs import frontend_seconds
from gspo.search.candidate import Candidate
from gspo.search.config import OptimizeConfig
from gspo.search.prepared import Prepared
from gspo.search.trial import MIN_ROUNDS, WARMUP_ROUNDS, ReferenceError_, Trial

__all__ = ["MAKING_INPUTS", "prepare"]


def _typed(graph: Graph) -> Graph:
    """``graph`` with the types and shapes onnxruntime gives where onnx has none, when it has
    ops outside onnx's default domain (contrib and custom ops, whose schemas onnx lacks)."""
    return complete_types(graph) if any(n.domain not in ("", "ai.onnx") for n in graph.nodes) else graph


def _original(model: str | os.PathLike | Graph, input_shapes) -> tuple[Graph, bytes | None, dict]:
    """The model as given (:func:`_typed`), the file's bytes it was parsed from (read once), and
    how :func:`_plain` parses them again."""
    if isinstance(model, Graph):
        return model, None, {}
    p = Path(model)
    data = read_model_file(p)
    where = {"base_dir": str(p.resolve().parent), "label": str(p), "refusal": load_refusal, "path": p}
    return _typed(load_bytes(data, input_shapes, **where)), data, where


def _plain(model: str | os.PathLike | Graph, original: Graph, data: bytes | None, where: dict, input_shapes,
           cfg: OptimizeConfig, timebox: Timebox, read_s: float) -> Graph:
    """The model through the front end (``original`` itself without it, or when the budget
    cannot hold it: see :func:`~gspo.search.budget.frontend_seconds`; ``read_s`` is the seconds
    reading the model took)."""
    if not cfg.search.frontend:
        return original
    if not timebox.fits(frontend_seconds(read_s, len(original.nodes))) or timebox.expired():
        timebox.skip("load", "the front end (constant folding; the model is searched as given)",
                     "the time budget could not hold it")
        return original
    if isinstance(model, Graph):
        plain = dataclasses.replace(from_model(to_model(model), plain=True), extras=model.extras)
    else:
        plain = load_bytes(data, input_shapes, plain=True, **where)
    return _typed(_sharing_weights(plain, original))


def _sharing_weights(plain: Graph, original: Graph) -> Graph:
    """``plain`` holding the weights the front end left as they were in ``original``'s tensors
    (not a second parse of the model's weights: 400 MB more for a model of 400 MB)."""
    same = {name for name, w in plain.weights.items()
            if isinstance(w, Init) and w.name == name and name in original.store and original.weights.get(name) == w}
    return dataclasses.replace(plain, store=plain.store.sharing(original.store, same))


#: Bytes per second that one run of a model at least moves (its inputs read, its outputs
#: written): a memory-bound model's best case, so that the estimate of one run errs short.
RUN_RATE = 10e9
#: What an input array costs beyond its data (numpy's header, the set's dict entry: 344 bytes
#: a set of one array measured), and a set of random inputs beyond drawing its data (32 us
#: measured), each erring short.
ARRAY_OVERHEAD = 300
SET_SECONDS = 1e-5


#: Bytes per second of fresh memory touched for the first time (the kernel maps and zeroes each
#: page), a best case, so that an estimate errs short: a Relu over [30000, 30000] was estimated
#: at 21.7 s from a small draw into memory already mapped and took 36 s, touching its 3.6 GB
#: took 9 s of it (17 s on a busier machine; 64 MB alone, in 0.2 s, does not tell this).
TOUCH_RATE = 4e9


def touching_seconds(nbytes: int) -> float:
    """Seconds that touching ``nbytes`` of fresh memory takes, at least (:data:`TOUCH_RATE`)."""
    return nbytes / TOUCH_RATE


def _check_sizes(graph: Graph, runs: int, timebox: Timebox) -> None:
    """Refuse, before anything of their size is allocated, random input sets (``runs`` of them,
    one when large) larger than :data:`~gspo.runtime.inputs.LARGE_INPUT_SET` in all when they
    and one run's outputs do not fit in the memory available, or when making them and one run
    on them cannot end before the budget's deadline (a Relu over [60000, 60000] took 61.9 s and
    13.9 GB at --time-budget 30, and then skipped everything).

    Raises:
        GspoError: one line naming the largest input, the sizes or seconds, and what to do.
    """
    count, size = input_set_count(graph, runs), input_bytes(graph)
    total = count * (size + ARRAY_OVERHEAD * len(graph.inputs))
    if total <= LARGE_INPUT_SET or not graph.inputs:
        return
    largest = max(graph.inputs, key=lambda v: math.prod(v.shape) if v.is_static else 0)
    sets = "" if count == 1 else f"{count} sets of "
    what = (f"{sets}the random inputs ({human_bytes(size)}; the largest: {largest.name!r} "
            f"{np_dtype(largest.dtype)}{list(largest.shape)})")
    pin = "pin smaller dynamic dimensions with --input-shape, or pass --inputs" if graph.extras.defaulted else ""
    need = total + output_bytes(graph)
    require_memory(need, f"{what} and the outputs of one run on them", pin)
    if not timebox.limited:
        return
    fresh = count * size + output_bytes(graph)  # the inputs' and one run's outputs' memory, touched first
    seconds = count * (making_seconds(graph) + SET_SECONDS) + (size + output_bytes(graph)) / RUN_RATE \
        + touching_seconds(fresh)
    left = timebox.remaining()
    if seconds > left:
        raise GspoError(f"{what} and one run of the model on them are estimated at {seconds:.1f} s here, more than "
                        f"the {left:.1f} s left of --time-budget; raise --time-budget{', or ' + pin if pin else ''}")


def prepare(model, input_shapes, inputs, cfg: OptimizeConfig, timebox: Timebox) -> Prepared:
    """Load, size the random inputs against the budget and the memory (:func:`_check_sizes`),
    draw them, and check the front end's graph against the model as given."""
    began = timebox.clock()
    check_seed(cfg.verify.seed)  # the random inputs' and the dynamic dimensions' checks' seed
    original, data, where = _original(model, input_shapes)
    if inputs is None:
        _check_sizes(original, cfg.verify.runs, timebox)
    plain = _plain(model, original, data, where, input_shapes, cfg, timebox, timebox.clock() - began)
    if input_shapes or uses_external_data(original):
        data = None  # not the result as it is: the output is written from the graph
    if inputs is not None:
        inputs = check_inputs(inputs, original)
    notes = []
    if original.extras.defaulted:
        pins = {v.name: v.shape for v in original.inputs}
        notes.append(describe_defaults(original.extras.defaulted, pins))
    if original.extras.static_refused:
        notes.append(f"inputs and outputs kept as the model declares them; with them pinned: {original.extras.static_refused}")
    feeds = [dict(inputs)] if inputs is not None else _drawn(plain, cfg, timebox)
    if not feeds:  # the budget ended while the inputs were drawn: nothing can be checked or timed
        return Prepared(original, original, [], notes, data=data)
    if len(feeds) < cfg.verify.runs and inputs is None:
        notes.append(f"verified on one random input set, not {cfg.verify.runs}: one takes {human_bytes(input_bytes(plain))}")
    seed = cfg.verify.seed if inputs is None else None  # with the user's inputs, gspo chose no size
    if plain is not original and plain.key == original.key:
        plain = original  # the front end changed nothing: nothing to check
    if plain is not original and not timebox.fits(2 * _run_seconds(original, timebox, len(feeds))):
        timebox.skip("load", "checking the front end's graph against the model",
                     "the time budget could not hold it (the model is searched as given)")
        plain = original
    if plain is original:
        return Prepared(original, plain, feeds, notes, data=data, run_s=_require_runs(original, feeds[0], timebox, seed))
    try:
        with Trial(original, [Candidate(plain, label="plain")], feeds[:1], cfg.tolerance, timebox=timebox, stage="load") as trial:
            if trial.rejected:
                notes.append(f"the front end's graph was not used: {trial.rejected[0].rejected}")
            if not trial.equivalent:
                plain = original
    except ReferenceError_ as e:
        raise GspoError(_cannot_run(original, e, seed)) from None
    return Prepared(original, plain, feeds, notes, data=data, run_s=trial.run_s)


#: What the report's ``skipped`` names when the time budget ends while the random inputs are drawn.
MAKING_INPUTS = "making the random inputs"


def _drawn(graph: Graph, cfg: OptimizeConfig, timebox: Timebox) -> list[dict]:
    """The random input sets of ``graph`` (:func:`~gspo.runtime.inputs.random_input_sets`), drawn
    until the budget's deadline; none when it passed first (the budget says so), and the driver
    then hands the input back unchanged: a Relu over [30000, 30000] drew its 3.6 GB for 36 s at
    --time-budget 30, past its estimate (touching fresh memory on a loaded machine)."""
    try:
        return random_input_sets(graph, cfg.verify.seed, cfg.verify.runs, until=timebox.end)
    except InputsOutOfTime as e:
        timebox.skip("load", MAKING_INPUTS, str(e))
        return []


def _run_seconds(graph: Graph, timebox: Timebox, sets: int = 1) -> float:
    """Seconds that building a session of ``graph`` and running it on ``sets`` input sets is
    expected to take, at least: the build at the budget's rate, and each run moving its inputs
    and outputs (:data:`RUN_RATE`) into outputs of fresh memory (:func:`touching_seconds`), the
    reference's written to a file and read back when large (:class:`~gspo.runtime.spill.Spill`).
    A Relu over [30000, 30000] was checked against the front end's graph, counted as two
    builds, at --time-budget 60: 86.8 s."""
    return timebox.rates.estimate(DEFAULT_BACKEND, len(graph.nodes)) + sets * _one_run_seconds(graph)


def _one_run_seconds(graph: Graph) -> float:
    """The least seconds one run of ``graph`` is expected to take (see :func:`_run_seconds`;
    0.0 unless its outputs are larger than :data:`~gspo.runtime.inputs.LARGE_INPUT_SET`)."""
    out = output_bytes(graph)
    return (input_bytes(graph) + 3 * out) / RUN_RATE + touching_seconds(out) if out > LARGE_INPUT_SET else 0.0


def _require_runs(graph: Graph, feeds, timebox: Timebox, seed: int | None) -> float:
    """Raise a one-line error when onnxruntime cannot run ``graph`` (unless the budget cannot
    hold building and running it and then the least timing of it, :func:`_run_seconds`: then
    nothing is tried and the input is handed back); the seconds one run took, or, not run, the
    least it is expected to take (:func:`_one_run_seconds`): the final comparison, which needs
    the same run and timing, is then not tried either (a Relu over [30000, 30000] at
    --time-budget 30 skipped this run, then began the final comparison with 4.7 s left, its
    run estimated at 0 s, and ended at 41.9 s)."""
    ops = len(graph.nodes)
    if not timebox.fits(_run_seconds(graph, timebox, 1 + MIN_ROUNDS + WARMUP_ROUNDS)):  # and the least timing after
        timebox.skip("load", "running the model once with onnxruntime",
                     "the time budget could not hold it and a timing of the model after it")
        return _one_run_seconds(graph)
    try:
        began = timebox.clock()
        session = make_session(graph)
        timebox.rates.record(DEFAULT_BACKEND, ops, timebox.clock() - began)
        built = time.perf_counter()  # the run itself is timed for real (its seconds estimate the runs to come)
        run(session, feeds)
    except GspoError as e:
        raise GspoError(_cannot_run(graph, e, seed)) from None
    return time.perf_counter() - built


def _cannot_run(graph: Graph, e: Exception, seed: int | None) -> str:
    """Why the model as given does not run: at the sizes gspo chose for its dynamic dimensions
    (which are named, with the flags that fix it), or onnxruntime's reason as it is."""
    explained = None if seed is None else explain_defaults_failure(graph, seed)
    return explained or f"onnxruntime cannot run the model: {e}"
