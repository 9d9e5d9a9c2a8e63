"""Running a scheduled graph with PyTorch: on a CUDA device, or on torch's CPU device for tests.

The plan is gspo's own (:func:`gspo.runtime.plan.make_plan`): a segment per run of ops on one
stream between sync points. Each segment is a :class:`~gspo.runtime.torchrt.convert.Program`
issued on its stream (cuda-python streams handed to torch, :mod:`.streams`); a cross-stream
dependency is an event recorded after the producing segment and waited on before the consuming
one, exactly where the schedule puts it. Values stay on the device between segments and are
held until the run's streams have finished (no block freed on one stream is reused by another
mid-run). TF32 is off unless asked for (the config's ``tf32``, or a graph marked for it,
:func:`marked_tf32`), so outputs stay fp32 and comparable with the CPU's; torch's
process-wide switches (TF32, cuDNN's autotuner) are set for each run and put back after it
(:func:`torch_flags`), so that an executor changes nothing for the rest of the process.

With ``cuda_graph`` the whole schedule is captured once (its streams forked from and joined to
the first, as Nimble's ahead-of-time schedule) and replayed; a program that must read values
back to the host (an onnxruntime island, a shape computed from the data) cannot be captured,
and :attr:`TorchExecutor.graph_refusal` says why it runs eagerly instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import torch

from gspo.errors import GspoError, first_line
from gspo.ir import Graph
from gspo.ir.metadata import metadata_value
from gspo.runtime.bench import DeviceTime
from gspo.runtime.cuda.common import CudaError
from gspo.runtime.cuda.executor import PieceTime
from gspo.runtime.plan import make_plan
from gspo.runtime.torchrt.convert import Fallback, Program, StepError, convert, to_device, to_numpy
from gspo.runtime.torchrt.streams import CudaStreams, NullStreams
from gspo.streams import Schedule

__all__ = ["TF32_MARK", "TorchConfig", "TorchExecutor", "marked_tf32", "torch_flags"]

#: The metadata entry and value that mark a graph to run with TF32 matrix products (what
#: :func:`gspo.precision.floats.with_tf32` writes; read here without importing the precision fit).
TF32_MARK = ("gspo.precision", "tf32")


def marked_tf32(graph: Graph) -> bool:
    """Whether ``graph`` is marked to run with TF32 (:data:`TF32_MARK`): its executor lets matrix
    products and convolutions round to TF32 around each of its runs (:func:`torch_flags`)."""
    return metadata_value(graph, TF32_MARK[0]) == TF32_MARK[1]


@dataclass(frozen=True)
class TorchConfig:
    """Where and how the torch runtime runs: ``device`` ``"cuda"`` (``device_id``) or ``"cpu"``;
    ``tf32`` lets matrix products and convolutions round to TF32 (off: fp32, as verification
    needs); ``cuda_graph`` captures the schedule once and replays it."""

    device: str = "cuda"
    device_id: int = 0
    tf32: bool = False
    cuda_graph: bool = False


@contextlib.contextmanager
def torch_flags(config: TorchConfig) -> Iterator[None]:
    """torch's process-wide switches as a run of ``config`` needs them, for the block, put back
    as they were after it: TF32 in CUDA matrix products and cuDNN convolutions allowed or not
    (``config.tf32``), and on ``cuda`` cuDNN's autotuner on (``benchmark``)."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = (matmul.allow_tf32, cudnn.allow_tf32, cudnn.benchmark)
    matmul.allow_tf32 = cudnn.allow_tf32 = config.tf32
    if config.device == "cuda":
        cudnn.benchmark = True
    try:
        yield
    finally:
        matmul.allow_tf32, cudnn.allow_tf32, cudnn.benchmark = saved


class TorchExecutor:
    """Run ``graph`` with ``schedule`` through torch (see the module docstring).

    Args:
        graph: the model.
        schedule: stream assignment (``None``: one stream).
        config: device, TF32, CUDA graph.
        one_stream: the schedule's segments one after another on a single stream.
        streams: the stream and event calls (default: cuda-python's on ``cuda``, none on ``cpu``).
    """

    runtime = "torch"

    def __init__(self, graph: Graph, schedule: Schedule | None = None, config: TorchConfig = TorchConfig(),
                 one_stream: bool = False, streams=None):
        if not config.tf32 and marked_tf32(graph):
            config = dataclasses.replace(config, tf32=True)  # for this executor's runs only (torch_flags)
        self.graph, self.config = graph, config
        self.outputs = graph.output_names()
        self.plan = make_plan(graph, schedule or Schedule.single(graph))
        self._stream_of = [0 if one_stream else seg.stream for seg in self.plan.segments]
        self._captured = None
        self._closed = False
        self._weight_outputs: dict = {}
        self.graph_refusal: str | None = None
        self._api = streams if streams is not None else (
            CudaStreams(config.device_id) if config.device == "cuda" else NullStreams())
        self.device = torch.device("cuda", config.device_id) if config.device == "cuda" else torch.device("cpu")
        n = 1 if one_stream else max(1, self.plan.num_streams)
        self._num_streams = n
        self._streams = [self._api.stream() for _ in range(n)]
        self._events = [self._api.event() for _ in range(self.plan.num_events)]
        self._joins = [self._api.event() for _ in range(2 * n)]
        self._marks: list = []
        try:
            self.programs: list[Program] = [convert(seg.graph, self.device) for seg in self.plan.segments]
            # outputs no segment computes: weights the graph returns as they are
            self._weight_outputs = {n: to_device(graph.weights[n].evaluate(graph.store), self.device)
                                    for n in self.outputs if n in graph.weights}
            if self._api.on_device and self.device.type == "cuda":
                torch.cuda.synchronize(self.device)  # the constants, copied on the default stream
        except GspoError:
            self.close()
            raise
        except Exception as e:
            self.close()
            raise CudaError(f"torch cannot convert {graph.name}: {type(e).__name__}: {first_line(e)}") from None
        except BaseException:
            self.close()
            raise

    @property
    def num_streams(self) -> int:
        """Number of streams the plan runs on."""
        return self._num_streams

    @property
    def fallbacks(self) -> list[tuple[int, Fallback]]:
        """(segment, node) pairs onnxruntime's CPU provider runs instead of torch, with why."""
        return [(k, f) for k, p in enumerate(self.programs) for f in p.fallbacks]

    def providers(self) -> list[list[str]]:
        """What runs each segment: torch on the device, and onnxruntime's CPU provider where an
        op fell back."""
        where = f"torch:{self.device.type}"
        return [[where] + (["onnxruntime:cpu"] if p.fallbacks else []) for p in self.programs]

    # ------------------------------------------------------------------ running
    def upload(self, feeds: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
        """The inputs on the device (copied, and finished before this returns)."""
        values = {name: to_device(np.asarray(feeds[name]), self.device) for name in (v.name for v in self.graph.inputs)}
        if self._api.on_device:
            torch.cuda.synchronize(self.device)
        return values

    def _launch(self, values: dict, marks: list | None = None) -> dict:
        """Issue every segment on its stream in the plan's order (``marks``: a timing event pair
        per segment, recorded around it on its stream)."""
        api = self._api
        for k, (seg, program) in enumerate(zip(self.plan.segments, self.programs)):
            stream = self._streams[self._stream_of[k]]
            for e in seg.waits:
                api.wait(stream, self._events[e])
            with api.use(stream):
                if marks:
                    api.record(marks[k][0], stream)
                try:
                    values.update(program({name: values[name] for name in seg.inputs}))
                except StepError as e:
                    raise CudaError(f"torch failed in segment {k}: {e}") from None
                if marks:
                    api.record(marks[k][1], stream)
            for e in seg.signals:
                api.record(self._events[e], stream)
        return values

    def _forked(self, values: dict, marks: list | None = None) -> dict:
        """:meth:`_launch` with every stream forked from the first and joined back to it."""
        api, first, rest = self._api, self._streams[0], self._streams[1:]
        fork, joins = self._joins[0], self._joins[1:]
        values = {**self._weight_outputs, **values}
        api.record(fork, first)
        for stream in rest:
            api.wait(stream, fork)
        out = self._launch(values, marks)
        for stream, join in zip(rest, joins):
            api.record(join, stream)
            api.wait(first, join)
        return out

    def _synchronize(self) -> None:
        for stream in self._streams:
            self._api.synchronize(stream)

    def run_device(self, values: Mapping) -> dict:
        """Run on uploaded inputs (:meth:`upload`): the graph's outputs, on the device, after
        every stream finished."""
        if self._closed:
            raise CudaError("the executor is closed")
        with torch.inference_mode(), torch_flags(self.config):
            if self.config.cuda_graph and self._capture(values):
                return self._replay(values)
            out = self._forked(dict(values))
            self._synchronize()
        return {name: out[name] for name in self.outputs}

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Upload, run, and copy the outputs back: outputs by name."""
        out = self.run_device(self.upload(feeds))
        return {name: to_numpy(out[name]) for name in self.outputs}

    # ------------------------------------------------------------------ CUDA graph
    def _capture(self, values: Mapping) -> bool:
        """Capture the schedule once (True), or say why it runs eagerly (False)."""
        if self._captured is not None:
            return True
        if self.graph_refusal is not None:
            return False
        if not self._api.on_device:
            self.graph_refusal = "CUDA graphs need a CUDA device"
            return False
        if not any(p.steps for p in self.programs):
            self.graph_refusal = "nothing to capture (every value is known without running the model)"
            return False
        host = [f"segment {k}: {p.fallbacks[0]}" if p.fallbacks else f"segment {k}: {p.host_reads[0]}"
                for k, p in enumerate(self.programs) if p.needs_host]
        if host:
            self.graph_refusal = f"not captured, values are read back to the host ({host[0]})"
            return False
        static = {name: t.clone() for name, t in values.items()}
        try:
            for _ in range(2):  # warm-up outside the capture (cuDNN and cuBLAS choose and allocate)
                self._forked(dict(static))
                self._synchronize()
            graph = torch.cuda.CUDAGraph()
            with warnings.catch_warnings():  # a program of views only (Reshape, Transpose) launches no kernel
                warnings.filterwarnings("ignore", message="The CUDA Graph is empty")
                with torch.cuda.graph(graph, stream=self._streams[0]):
                    out = self._forked(dict(static))
        except RuntimeError as e:
            self.graph_refusal = f"capture failed: {first_line(e)}"
            torch.cuda.synchronize(self.device)
            return False
        self._captured = (graph, static, {name: out[name] for name in self.outputs})
        return True

    def _replay(self, values: Mapping) -> dict:
        graph, static, out = self._captured
        first = self._streams[0]
        with self._api.use(first):
            for name, t in values.items():
                if t.data_ptr() != static[name].data_ptr():
                    static[name].copy_(t)
            graph.replay()
        self._api.synchronize(first)
        return dict(out)

    # ------------------------------------------------------------------ timing
    def _timing_marks(self) -> list:
        if not self._marks:
            self._marks = [self._api.event(timing=True) for _ in range(2 + 2 * len(self.plan.segments))]
        return self._marks

    def time_run(self, values: Mapping, pieces: bool = True) -> tuple[float, list[PieceTime]]:
        """One run on uploaded inputs timed with CUDA events on the first stream (every stream
        forked from and joined to it): seconds, and when each segment ran on its stream (none
        when the run is a CUDA graph replay, or without ``pieces``: the events around each
        segment cost a few microseconds each, which a timing of the whole run leaves out)."""
        if not self._api.on_device:
            raise CudaError("device timing needs a CUDA device")
        api, first = self._api, self._streams[0]
        marks = self._timing_marks()
        start, end, rest = marks[0], marks[1], marks[2:]
        pairs = list(zip(rest[0::2], rest[1::2]))
        held = None
        with torch.inference_mode(), torch_flags(self.config):
            if self.config.cuda_graph and self._capture(values):
                graph, static, _ = self._captured
                with api.use(first):
                    for name, t in values.items():
                        if t.data_ptr() != static[name].data_ptr():
                            static[name].copy_(t)
                    api.record(start, first)
                    graph.replay()
                    api.record(end, first)
                pieces_of: list = []
            else:
                api.record(start, first)
                held = self._forked(dict(values), pairs if pieces else None)
                api.record(end, first)
                pieces_of = pairs if pieces else []
            api.synchronize(first)
            self._synchronize()
            del held  # the run's values are let go once every stream has finished
        pieces = [PieceTime(k, self._stream_of[k], api.elapsed_ms(start, a), api.elapsed_ms(start, b))
                  for k, (a, b) in enumerate(pieces_of)]
        return api.elapsed_ms(start, end) / 1e3, pieces

    def timed_runner(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], object]:
        """Inputs uploaded once; each call one run: its device time on CUDA (no host copies
        counted), the host's clock on the CPU device."""
        values = self.upload(feeds)
        if not self._api.on_device:
            return lambda: self.run_device(values)
        return lambda: DeviceTime(self.time_run(values, pieces=False)[0])

    def close(self) -> None:
        """Wait for the streams, drop the programs and the captured graph, destroy the streams."""
        self._closed = True
        if getattr(self, "_streams", None):
            try:
                self._synchronize()
            finally:
                self.programs, self._captured, self._streams = [], None, []
                self._api.close()
        self.programs = []

    def __enter__(self) -> TorchExecutor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
