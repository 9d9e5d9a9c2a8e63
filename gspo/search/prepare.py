"""Preparing a model for the search: the model as given and through the front end (read once),
valid inputs drawn, and the front end's graph checked against the model, within the time budget."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.ir.frontend import describe_defaults
from gspo.ir.onnx_io import from_model, load_bytes, read_model_file, to_model, uses_external_data
from gspo.runtime import make_session, run
from gspo.runtime.backends import DEFAULT_BACKEND
from gspo.runtime.inputs import check_inputs, human_bytes, input_bytes, random_input_sets
from gspo.runtime.pinned import explain_defaults_failure
from gspo.runtime.session import load_refusal
from gspo.runtime.types import complete_types
from gspo.search.budget import Budget, frontend_seconds
from gspo.search.config import OptimizeConfig, Prepared
from gspo.search.trial import Option, ReferenceError_, Trial

__all__ = ["prepare"]


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
           cfg: OptimizeConfig, budget: Budget, read_s: float) -> Graph:
    """The model through the front end (``original`` itself without it, or when the budget
    cannot hold it: see :func:`~gspo.search.budget.frontend_seconds`; ``read_s`` is the seconds
    reading the model took)."""
    if not cfg.frontend:
        return original
    if not budget.fits(frontend_seconds(read_s, len(original.nodes))) or budget.expired():
        budget.skip("load", "the front end (constant folding; the model is searched as given)",
                    "the time budget could not hold it")
        return original
    if isinstance(model, Graph):
        return _typed(dataclasses.replace(from_model(to_model(model), plain=True), extras=model.extras))
    return _typed(load_bytes(data, input_shapes, plain=True, **where))


def prepare(model, input_shapes, inputs, cfg: OptimizeConfig, budget: Budget) -> Prepared:
    """Load, draw inputs, and check the front end's graph against the model as given."""
    began = time.perf_counter()
    original, data, where = _original(model, input_shapes)
    work = _plain(model, original, data, where, input_shapes, cfg, budget, time.perf_counter() - began)
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
    feeds = [dict(inputs)] if inputs is not None else random_input_sets(work, cfg.seed, cfg.verify_runs)
    if len(feeds) < cfg.verify_runs and inputs is None:
        notes.append(f"verified on one random input set, not {cfg.verify_runs}: one takes {human_bytes(input_bytes(work))}")
    seed = cfg.seed if inputs is None else None  # with the user's inputs, gspo chose no size
    if work is not original and not budget.fits(2 * budget.rates.estimate(DEFAULT_BACKEND, len(original.nodes))):
        budget.skip("load", "checking the front end's graph against the model",
                    "the time budget could not hold it (the model is searched as given)")
        work = original
    if work is original:
        return Prepared(original, work, feeds, notes, data=data, run_s=_require_runs(original, feeds[0], budget, seed))
    try:
        with Trial(original, [Option("plain", work)], feeds[:1], cfg.tolerance, budget=budget, stage="load") as trial:
            if trial.rejected:
                notes.append(f"the front end's graph was not used: {trial.rejected[0].rejected}")
            if not trial.equivalent:
                work = original
    except ReferenceError_ as e:
        raise GspoError(_cannot_run(original, e, seed)) from None
    return Prepared(original, work, feeds, notes, data=data, run_s=trial.run_s)


def _require_runs(graph: Graph, feeds, budget: Budget, seed: int | None) -> float:
    """Raise a one-line error when onnxruntime cannot run ``graph`` (unless the budget cannot
    hold building it: then nothing is tried and the input is handed back); the seconds one run took."""
    ops = len(graph.nodes)
    if not budget.fits(budget.rates.estimate(DEFAULT_BACKEND, ops)):
        budget.skip("load", "running the model once with onnxruntime", "the time budget could not hold it")
        return 0.0
    try:
        began = time.perf_counter()
        session = make_session(graph)
        built = time.perf_counter()
        budget.rates.record(DEFAULT_BACKEND, ops, built - began)
        run(session, feeds)
    except GspoError as e:
        raise GspoError(_cannot_run(graph, e, seed)) from None
    return time.perf_counter() - built


def _cannot_run(graph: Graph, e: Exception, seed: int | None) -> str:
    """Why the model as given does not run: at the sizes gspo chose for its dynamic dimensions
    (which are named, with the flags that fix it), or onnxruntime's reason as it is."""
    explained = None if seed is None else explain_defaults_failure(graph, seed)
    return explained or f"onnxruntime cannot run the model: {e}"
