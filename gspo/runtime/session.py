"""onnxruntime sessions and inputs (``gspo.runtime`` is the only package importing onnxruntime)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from gspo.errors import GspoError
from gspo.errors import first_line as _first_line
from gspo.ir import Graph, serialize
from gspo.ir.onnx_io import external_dir
from gspo.runtime.runtimes import import_onnxruntime

ort = import_onnxruntime()

__all__ = ["SessionConfig", "make_session", "optimized_op_types", "run", "RuntimeError_", "runtime_version"]


def runtime_version() -> str:
    """The installed onnxruntime's version (profiles and calibrations are keyed by it)."""
    return ort.__version__


ort.set_default_logger_severity(4)


class RuntimeError_(GspoError):
    """onnxruntime refused or failed to run a model."""


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


#: onnxruntime's session option: where the external data of a model given as bytes lies.
_EXTERNAL_FOLDER = "session.model_external_initializers_file_folder_path"

_LEVELS = {
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
}


def make_session(model: Graph | bytes, config: SessionConfig = SessionConfig(),
                 optimized_path: str | None = None) -> ort.InferenceSession:
    """An ``InferenceSession`` over a graph or serialized model bytes; with ``optimized_path``,
    onnxruntime also writes the graph it will run there (after its fusions and layout changes).

    A graph whose weights are in external data is passed with its weights still in their files
    (onnxruntime reads them from there): no copy of them in the serialized model, which stays
    below protobuf's 2 GB limit however large the weights are.
    """
    folder = external_dir(model) if isinstance(model, Graph) else ""
    try:
        data = serialize(model, inline=not folder) if isinstance(model, Graph) else model
    except GspoError as e:
        raise RuntimeError_(f"onnxruntime cannot load the model: {e}") from None
    so = ort.SessionOptions()
    if folder:
        so.add_session_config_entry(_EXTERNAL_FOLDER, folder)
    if optimized_path is not None:
        so.optimized_model_filepath = optimized_path
    so.graph_optimization_level = _LEVELS[config.optimization]
    so.intra_op_num_threads = config.intra_op_threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 4
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if config.allow_spinning else "0")
    if config.parallel_mode:
        so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
        so.inter_op_num_threads = os.cpu_count() or 1
        so.add_session_config_entry("session.inter_op.allow_spinning", "1" if config.allow_spinning else "0")
    try:
        return ort.InferenceSession(data, sess_options=so, providers=list(config.providers))
    except Exception as e:
        raise RuntimeError_(f"onnxruntime cannot load the model: {_first_line(e)}") from None


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
        raise RuntimeError_(f"onnxruntime failed to run the model: {_first_line(e)}") from None
    return dict(zip(names, outs))
