"""CPU backend: one worker thread per stream running its segments' onnxruntime sessions.

Threads are created once per executor (a persistent pool), block on queues between runs (no
spinning), and onnxruntime releases the GIL during ``run``, so two streams really run at once on
two cores. Each segment session gets the default intra-op thread count unless told otherwise:
measured on 2 cores (``benchmarks/streams.md``), dividing the cores among the streams was slower
(ResNet-50 0.57x vs 0.82x of plain onnxruntime) because a stream whose branch is alone then
runs on one core. With one stream the executor is one plain onnxruntime session over the whole
model, run on the calling thread.

A placed model's pieces run on the :class:`~gspo.runtime.protocols.Runner` that
:func:`~gspo.runtime.backends.load_runner` loads for their backend; the executor names no
backend itself and drives them all from the CPU's threads with host arrays (a piece placed on
``cuda`` copies its values to the GPU and back). A whole model on CUDA streams is
:class:`~gspo.runtime.cuda.CudaExecutor`'s, chosen by :func:`~gspo.runtime.executor.device_executor`.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from gspo.errors import first_line
from gspo.ir import Graph
from gspo.runtime.backends import load_runner
from gspo.runtime.plan import Plan, make_plan
from gspo.runtime.protocols import Runner
from gspo.runtime.session import BackendError, SessionConfig, make_session
from gspo.streams import Placement, Schedule

__all__ = ["CpuExecutor", "TraceEvent"]


@dataclass(frozen=True)
class TraceEvent:
    """One segment execution: stream, segment, when it started waiting, started and ended."""

    stream: int
    segment: int
    wait_start: float
    start: float
    end: float


class _Abort(Exception):
    pass


class CpuExecutor:
    """Run ``graph`` with ``schedule`` on the CPU.

    Args:
        graph: the model.
        schedule: stream assignment; ``None`` or one stream = a single plain session.
        config: session settings for every segment (``intra_op_threads`` 0: onnxruntime's
            default, all cores, for each stream).
        placement: the backend of each op (``None``: onnxruntime for all). A stream's run of ops
            is cut where the backend changes; with one stream the pieces run on the calling
            thread, one after another.
    """

    def __init__(self, graph: Graph, schedule: Schedule | None = None, config: SessionConfig = SessionConfig(),
                 placement: Placement | None = None):
        self.graph = graph
        self.outputs = graph.output_names()
        #: The session settings every runner was built with.
        self.config = config
        self.schedule = schedule
        self.placement = placement if placement is not None and not placement.is_default else None
        self.plan: Plan | None = None
        self._workers: list[threading.Thread] = []
        single = schedule is None or schedule.num_streams <= 1
        if single and self.placement is None:
            self._session = make_session(graph, config)
            self._names = list(self.outputs)  # once, not per call
            return
        self.plan = make_plan(graph, Schedule.single(graph) if single else schedule, self.placement)
        # outputs no piece computes: weights the graph returns as they are
        self._weight_outputs = {n: graph.weights[n].evaluate(graph.store) for n in self.outputs if n in graph.weights}
        self._sessions: list[Runner] = [load_runner(seg.backend, seg.graph, config, seg.keep_f32)
                                        for seg in self.plan.segments]
        # each segment's inputs and outputs, named once (not per call)
        self._io = [(seg.inputs, list(seg.outputs)) for seg in self.plan.segments]
        if single:
            return  # the pieces run on the calling thread
        self._jobs = [queue.Queue() for _ in self.plan.streams]
        self._done: queue.Queue = queue.Queue()
        self._start_workers()

    def _start_workers(self) -> None:
        """One thread per stream; when the system refuses one, those started are stopped and
        the refusal is one line."""
        try:
            for s in range(self.plan.num_streams):
                t = threading.Thread(target=self._worker, args=(s,), daemon=True, name=f"gspo-stream-{s}")
                t.start()
                self._workers.append(t)
        except RuntimeError as e:  # "can't start new thread"
            started = len(self._workers)
            self.close()
            raise BackendError(f"cannot start the {self.plan.num_streams} stream threads the schedule asks for "
                               f"({started} started): {first_line(e)}") from None

    @property
    def num_streams(self) -> int:
        """Number of streams (threads) the plan runs on."""
        return self.plan.num_streams if self.plan else 1

    def _run_inline(self, feeds: Mapping[str, np.ndarray], trace: list | None) -> dict[str, np.ndarray]:
        """One stream of pieces on several backends: each after the other, on this thread."""
        values = {**self._weight_outputs, **feeds}
        for k, (inputs, outputs) in enumerate(self._io):
            start = time.perf_counter()
            try:
                outs = self._sessions[k].run(outputs, {name: values[name] for name in inputs})
            except BackendError:
                raise
            except Exception as e:
                raise BackendError(f"{self.plan.segments[k].backend} failed to run a piece: {first_line(e)}") from None
            values.update(zip(outputs, outs))
            if trace is not None:
                trace.append(TraceEvent(0, k, start, start, time.perf_counter()))
        return {name: values[name] for name in self.outputs}

    def run(self, feeds: Mapping[str, np.ndarray], trace: list | None = None) -> dict[str, np.ndarray]:
        """Run once; outputs by name. ``trace`` (a list) receives :class:`TraceEvent` rows."""
        if self.plan is None:
            # one session: nothing between the caller and onnxruntime but the output dict
            names = self._names
            try:
                outs = self._session.run(names, feeds if type(feeds) is dict else dict(feeds))
            except Exception as e:
                raise BackendError(f"onnxruntime failed to run the model: {first_line(e)}") from None
            if trace is not None:
                trace.append(TraceEvent(0, 0, 0.0, 0.0, 0.0))
            return dict(zip(names, outs))
        if self.plan.num_streams == 1:
            return self._run_inline(feeds, trace)
        if not self._workers:
            raise BackendError("the executor is closed")
        job = _Job(self.plan.num_events, {**self._weight_outputs, **feeds}, trace)
        for q in self._jobs:
            q.put(job)
        errors = [self._done.get() for _ in self._jobs]
        errors = [e for e in errors if e is not None]
        if errors:
            raise errors[0]
        return {name: job.values[name] for name in self.outputs}

    def _worker(self, stream: int) -> None:
        plan = self.plan
        assert plan is not None
        while True:
            job = self._jobs[stream].get()
            if job is None:
                return
            error = None
            try:
                for k in plan.streams[stream]:
                    seg = plan.segments[k]
                    wait_start = time.perf_counter()
                    for e in seg.waits:
                        job.events[e].wait()
                        if job.failed:
                            raise _Abort
                    start = time.perf_counter()
                    inputs, outputs = self._io[k]
                    outs = self._sessions[k].run(outputs, {name: job.values[name] for name in inputs})
                    job.values.update(zip(outputs, outs))
                    end = time.perf_counter()
                    for e in seg.signals:
                        job.events[e].set()
                    if job.trace is not None:
                        job.trace.append(TraceEvent(stream, k, wait_start, start, end))
            except _Abort:
                error = None
            except Exception as e:
                error = BackendError(f"onnxruntime failed on stream {stream}: {first_line(e)}")
                job.fail()
            self._done.put(error)

    def close(self) -> None:
        """Stop the worker threads (the sessions go with the executor)."""
        for q in getattr(self, "_jobs", []):
            q.put(None)
        for t in self._workers:
            t.join(timeout=5)
        self._workers = []

    def __enter__(self) -> CpuExecutor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class _Job:
    def __init__(self, num_events: int, values: dict, trace: list | None):
        self.events = [threading.Event() for _ in range(num_events)]
        self.values = values
        self.trace = trace
        self.failed = False

    def fail(self) -> None:
        self.failed = True
        for e in self.events:
            e.set()
