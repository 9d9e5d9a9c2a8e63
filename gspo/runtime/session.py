"""onnxruntime sessions and inputs (``gspo.runtime`` is the only package importing onnxruntime)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from gspo.errors import GspoError, first_line
from gspo.ir import Graph, serialize
from gspo.ir.features import nbytes
from gspo.ir.onnx_io import external_dir
from gspo.ir.weights import np_dtype
from gspo.runtime.buffers import BUFFERS, LARGE_OUTPUT
from gspo.runtime.runtimes import import_onnxruntime

ort = import_onnxruntime()

__all__ = ["AS_INSTALLED", "BackendError", "OPTIMIZATION_LEVELS", "SessionConfig", "load_refusal", "make_session",
           "optimized_op_types", "run", "runtime_version", "session_options"]


def runtime_version() -> str:
    """The installed onnxruntime's version (profiles and calibrations are keyed by it)."""
    return ort.__version__


ort.set_default_logger_severity(4)


class BackendError(GspoError):
    """A backend (onnxruntime, OpenVINO) refused a model or failed to run it."""


@dataclass(frozen=True)
class SessionConfig:
    """How to build an onnxruntime session.

    ``intra_op_threads`` 0 lets onnxruntime choose; spinning is off by default so idle intra-op
    threads do not steal the other core between runs (a 2-3x timing error on 2-core machines).
    """

    intra_op_threads: int = 0
    allow_spinning: bool = False
    optimization: str = "all"  # "all" | "basic" | "extended" | "disable"
    providers: tuple[str, ...] = ("CPUExecutionProvider",)
    #: onnxruntime's own parallel execution mode (inter-op threads = cores); measured slower than
    #: sequential on every zoo model here, kept as a peer for benchmarks/run.py.
    parallel_mode: bool = False


#: onnxruntime as installed, as a user's plain ``InferenceSession`` runs a model: its default
#: threads, idle intra-op threads spinning. A plain file gspo writes deploys so
#: (``gspo.InferenceSession`` too, at the thread count saved in it); optimize holds its pick
#: against the input run so (:mod:`gspo.search.deployed`).
AS_INSTALLED = SessionConfig(allow_spinning=True)


#: ``SessionConfig.optimization`` -> the name of onnxruntime's ``GraphOptimizationLevel``.
OPTIMIZATION_LEVELS = {
    "all": "ORT_ENABLE_ALL",
    "extended": "ORT_ENABLE_EXTENDED",
    "basic": "ORT_ENABLE_BASIC",
    "disable": "ORT_DISABLE_ALL",
}

#: onnxruntime's session option: where the external data of a model given as bytes lies.
_EXTERNAL_FOLDER = "session.model_external_initializers_file_folder_path"


def session_options(ort, *, threads: int | None = None, allow_spinning: bool | None = None,
                    optimization: str | None = None, inter_op_threads: int | None = None, parallel: bool = False,
                    log_severity: int = 4, entries: Mapping[str, str] | None = None):
    """The ``SessionOptions`` of every session gspo builds (the CPU's, the CUDA runner's and the
    CUDA executor's pieces); ``None`` leaves onnxruntime's default (:func:`make_session` also
    sets where onnxruntime writes the graph it will run, when asked).

    Args:
        ort: the onnxruntime module to build them with (the CUDA code passes its own, which
            tests replace with a stand-in).
        threads: intra-op threads (0: onnxruntime chooses).
        allow_spinning: whether idle intra-op (and, with ``parallel``, inter-op) threads spin.
        optimization: a key of :data:`OPTIMIZATION_LEVELS`.
        inter_op_threads: inter-op threads.
        parallel: onnxruntime's parallel execution mode.
        log_severity: onnxruntime's log severity for the session (4: fatal only).
        entries: further session config entries, as given.
    """
    so = ort.SessionOptions()
    so.log_severity_level = log_severity
    if optimization is not None:
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, OPTIMIZATION_LEVELS[optimization])
    if threads is not None:
        so.intra_op_num_threads = int(threads)
    if inter_op_threads is not None:
        so.inter_op_num_threads = int(inter_op_threads)
    if allow_spinning is not None:
        so.add_session_config_entry("session.intra_op.allow_spinning", "1" if allow_spinning else "0")
    if parallel:
        so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
        if allow_spinning is not None:
            so.add_session_config_entry("session.inter_op.allow_spinning", "1" if allow_spinning else "0")
    for key, value in (entries or {}).items():
        so.add_session_config_entry(key, value)
    return so


def make_session(model: Graph | bytes, config: SessionConfig = SessionConfig(),
                 optimized_path: str | None = None):
    """An ``InferenceSession`` over a graph or serialized model bytes; with ``optimized_path``,
    onnxruntime also writes the graph it will run there (after its fusions and layout changes).

    A graph whose weights are in external data is passed with its weights still in their files
    (onnxruntime reads them from there): no copy of them in the serialized model, which stays
    below protobuf's 2 GB limit however large the weights are. A graph's outputs of
    :data:`~gspo.runtime.buffers.LARGE_OUTPUT` bytes or more are written into reused arrays
    (:mod:`gspo.runtime.buffers`); the session is otherwise onnxruntime's own.
    """
    folder = external_dir(model) if isinstance(model, Graph) else ""
    try:
        data = serialize(model, inline=not folder) if isinstance(model, Graph) else model
    except GspoError as e:
        raise BackendError(f"onnxruntime cannot load the model: {e}") from None
    so = session_options(ort, threads=config.intra_op_threads, allow_spinning=config.allow_spinning,
                         optimization=config.optimization,
                         inter_op_threads=(os.cpu_count() or 1) if config.parallel_mode else 1,
                         parallel=config.parallel_mode, entries={_EXTERNAL_FOLDER: folder} if folder else None)
    if optimized_path is not None:
        so.optimized_model_filepath = optimized_path
    try:
        session = ort.InferenceSession(data, sess_options=so, providers=list(config.providers))
    except Exception as e:
        raise BackendError(f"onnxruntime cannot load the model: {first_line(e)}") from None
    _forget_bytes(session, config)
    large = _large_outputs(model) if isinstance(model, Graph) else {}
    return _BoundSession(session, large) if large else session


def _forget_bytes(session, config: SessionConfig) -> None:
    """Drop the serialized model onnxruntime's Python session keeps for one purpose: building
    the session again on its fallback providers after a provider fails. A session on the CPU
    provider alone has none to fall back to, and the bytes held the model's weights a second
    time for the session's life (four MatMuls of 400 MB: 764 -> 382 MB held per session)."""
    if list(config.providers) == ["CPUExecutionProvider"] and hasattr(session, "_model_bytes"):
        session.disable_fallback()
        session._model_bytes = None


def _large_outputs(graph: Graph) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """The outputs of :data:`~gspo.runtime.buffers.LARGE_OUTPUT` bytes or more, with their
    shapes and types; none when an input is not a tensor (they are bound as arrays)."""
    if not all(v.is_tensor for v in graph.inputs):
        return {}
    out = {}
    for v in graph.outputs:
        if v.is_tensor and v.is_static and nbytes(v) >= LARGE_OUTPUT:
            out[v.name] = (tuple(v.shape), np_dtype(v.dtype))
    return out


class _BoundSession:
    """An ``InferenceSession`` whose large outputs onnxruntime writes into arrays of
    :data:`~gspo.runtime.buffers.BUFFERS` (not into blocks its arena then keeps); everything
    else is the session's own."""

    def __init__(self, session, large: dict[str, tuple[tuple[int, ...], np.dtype]]):
        self._session, self._large = session, large

    def __getattr__(self, name):
        return getattr(self._session, name)

    def run(self, output_names, input_feed, run_options=None):
        names = list(output_names or [o.name for o in self._session.get_outputs()])
        if not self._large or not any(n in self._large for n in names):
            return self._session.run(names, input_feed, run_options)
        io = self._session.io_binding()
        feeds = {k: np.ascontiguousarray(v) for k, v in input_feed.items()}  # alive until the run ends
        for k, v in feeds.items():
            io.bind_cpu_input(k, v)
        held = {}
        for n in names:
            if n in self._large:
                shape, dtype = self._large[n]
                held[n] = BUFFERS.take(shape, dtype)
                io.bind_output(n, "cpu", 0, dtype, list(shape), held[n].ctypes.data)
            else:
                io.bind_output(n, "cpu")
        try:
            self._session.run_with_iobinding(io, run_options)
        except Exception:  # a declared shape the model does not keep: run as onnxruntime does
            self._large = {}
            return self._session.run(names, input_feed, run_options)
        values = io.get_outputs()
        return [held[n] if n in held else values[i].numpy() for i, n in enumerate(names)]


def load_refusal(data: bytes) -> str | None:
    """Why onnxruntime refuses to load the serialized model ``data`` (``None``: it loads it)."""
    try:
        make_session(data)
    except BackendError as e:
        return str(e)
    return None


def optimized_op_types(model: Graph | bytes, config: SessionConfig = SessionConfig()) -> list[str]:
    """The op types of the graph onnxruntime runs for ``model`` (what it fused, the layout
    reorders it inserted): how the cost model's mirrors of those optimizations are checked."""
    import tempfile

    from gspo.ir.onnx_io import node_op_types

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "optimized.onnx")
        make_session(model, config, optimized_path=path)
        return node_op_types(path)


def run(session: ort.InferenceSession, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run once; outputs by name."""
    names = [o.name for o in session.get_outputs()]
    try:
        outs = session.run(names, dict(feeds))
    except Exception as e:
        raise BackendError(f"onnxruntime failed to run the model: {first_line(e)}") from None
    return dict(zip(names, outs))
