"""Run an optimized model as it was saved, with onnxruntime's call shape.

``gspo optimize`` saves a standard ONNX model; when a schedule on several streams or a
placement on several backends won, it is written into the model's metadata. Plain onnxruntime
runs the file but ignores both; :class:`InferenceSession` follows them (the CPU multi-stream
executor, each piece on its backend) behind the interface of ``onnxruntime.InferenceSession``:
``run(output_names, input_feed)``, ``get_inputs()``, ``get_outputs()``. A model without either
(every model onnxruntime alone runs best) gets a plain onnxruntime session, whose own ``run``
is the one called: no overhead.

Example:
    >>> import gspo                                                   # doctest: +SKIP
    >>> sess = gspo.InferenceSession("fast.onnx")                      # doctest: +SKIP
    >>> probs, = sess.run(None, {"input": x})                          # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gspo.errors import GspoError
from gspo.ir import Value, load
from gspo.ir.onnx_io import PLACEMENT_KEY, SCHEDULE_KEY, saved_metadata
from gspo.ir.weights import np_dtype
from gspo.runtime.executor import check_device, make_executor
from gspo.runtime.inputs import check_inputs
from gspo.runtime.session import SessionConfig, ort, session_options
from gspo.runtime.settings import settings_from_metadata

__all__ = ["InferenceSession", "NodeArg"]


@dataclass(frozen=True)
class NodeArg:
    """A graph input or output as onnxruntime describes it: name, type string, shape."""

    name: str
    type: str
    shape: list


def _plain_session(path, props: dict[str, str], sess_options: Any, providers: list[str]):
    """onnxruntime's session of ``path``; without ``sess_options``, at the thread setting
    ``gspo optimize`` saved in the model's metadata ``props`` (``gspo.settings``), if any."""
    if sess_options is None:
        saved = settings_from_metadata(props)
        if not saved.is_default:
            sess_options = session_options(ort, threads=saved.threads)
    return ort.InferenceSession(os.fspath(path), sess_options, providers=providers)


def _node_arg(v: Value) -> NodeArg:
    """The description of a graph input or output (a value that is not a tensor: its kind)."""
    shape = list(v.shape) if v.shape is not None else []
    if not v.is_tensor:
        return NodeArg(v.name, "non-tensor" if v.type_proto else "unknown", shape)
    elem = np_dtype(v.dtype).name
    elem = {"float32": "float", "float64": "double", "object": "string"}.get(elem, elem)
    return NodeArg(v.name, f"tensor({elem})", shape)


class InferenceSession:
    """An optimized model, run as ``gspo optimize`` saved it (schedule and placement included).

    Args:
        path: the ``.onnx`` file.
        sess_options: ``onnxruntime.SessionOptions`` for a model without schedule or placement
            (passed to onnxruntime as they are); with one, its ``intra_op_num_threads`` is kept.
        providers: onnxruntime's execution providers, for a model without schedule or
            placement (default: the CPU provider).
        streams: ``None`` follows the saved schedule; an integer runs Nimble's assignment
            capped at that many streams (1: one plain session, whatever was saved).
        input_shapes: static shapes for dynamic inputs of a scheduled model (its pieces are
            built for one shape; the defaults of ``gspo optimize`` otherwise).
        device: ``"cpu"``, or ``"cuda"``: the model on its saved streams on the GPU, on the
            CUDA runtime ``cuda_runtime`` asks for (``"auto"``, ``"ort"``, ``"torch"``; default
            ``$GSPO_CUDA_RUNTIME``, else auto: :mod:`gspo.runtime.cuda.choice`); each session runs
            on the one it was given.
    """

    def __init__(self, path: str | os.PathLike, sess_options: Any = None, providers: Sequence[str] | None = None,
                 streams: int | None = None, input_shapes: Mapping[str, Sequence[int]] | None = None,
                 device: str = "cpu", cuda_runtime: str | None = None):
        check_device(device)
        props = saved_metadata(path)
        schedule, placement = props.get(SCHEDULE_KEY, ""), props.get(PLACEMENT_KEY, "")
        self._executor = None
        self._session = None
        if device == "cuda":
            graph = self._graph = load(path, input_shapes)
            self._executor = make_executor(graph, streams, "cuda", runtime=cuda_runtime)
            self._describe(graph)
            return
        if streams == 1 or (streams is None and not schedule and not placement):
            self._session = _plain_session(path, props, sess_options, list(providers or ["CPUExecutionProvider"]))
            self.run = self._session.run  # onnxruntime's own: nothing in between
            return
        graph = self._graph = load(path, input_shapes)
        threads = getattr(sess_options, "intra_op_num_threads", 0) or 0
        self._executor = make_executor(graph, streams, "cpu", SessionConfig(intra_op_threads=threads))
        self._describe(graph)

    def _describe(self, graph) -> None:
        """The graph's inputs and outputs as onnxruntime describes them, and the output names
        (once, not per call: a decoder's dozens of outputs were a set built per name per call)."""
        self._inputs = [_node_arg(v) for v in graph.inputs]
        self._outputs = [_node_arg(v) for v in graph.outputs]
        self._names = [o.name for o in self._outputs]
        self._known = frozenset(self._names)

    @property
    def num_streams(self) -> int:
        """How many streams the model runs on (1 for a plain session)."""
        return self._executor.num_streams if self._executor is not None else 1

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any], run_options: Any = None) -> list:
        """The outputs ``output_names`` (all of them for ``None``) on ``input_feed``, in order."""
        names = list(output_names) if output_names else self._names
        unknown = [n for n in names if n not in self._known]
        if unknown:
            raise GspoError(f"{unknown[0]!r} is not an output of the model")
        # as onnxruntime's own session would: a missing or unknown input name, another dtype or
        # shape is one line (OpenVINO converted other dtypes silently; a missing one was 'x')
        feeds = check_inputs({k: v if type(v) is np.ndarray else np.asarray(v) for k, v in input_feed.items()},
                             self._graph, "the inputs")
        values = self._executor.run(feeds)
        return [values[n] for n in names]

    def get_inputs(self) -> list:
        """The graph inputs (name, type, shape)."""
        return self._session.get_inputs() if self._session is not None else list(self._inputs)

    def get_outputs(self) -> list:
        """The graph outputs (name, type, shape)."""
        return self._session.get_outputs() if self._session is not None else list(self._outputs)

    def close(self) -> None:
        """Stop the executor's stream threads (a plain session needs nothing)."""
        if self._executor is not None:
            self._executor.close()

    def __enter__(self) -> InferenceSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
