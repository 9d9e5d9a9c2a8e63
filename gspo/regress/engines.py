"""Where the jobs run: here, one after another (``local``), or spread over a Ray cluster (``ray``).

An engine takes the jobs (as functions that make them, so the local engine holds one model's
bytes at a time) and a progress callback, and returns one :class:`~gspo.regress.job.Result` per
job, in order. Both run the same :func:`~gspo.regress.job.run_job`, so they give the same verdicts.

On Ray (``pip install 'gspo[ray]'``), each job is one task: the whole of a model's job, optimize
plus timing, runs on one node. Every task needs one unit of the custom resource
:data:`RESOURCE`, which each node offers once (``ray start --resources='{"gspo_timing": 1}'``), so
a node times one model at a time. A node lost mid-job makes Ray run the task again elsewhere
(:data:`RETRIES` times); when that fails too, the model is ``ERROR``, never ``ok``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from contextlib import contextmanager

from gspo.errors import GspoError, first_line
from gspo.regress.job import ERROR, Job, Result, run_job

__all__ = ["ENGINES", "RESOURCE", "RETRIES", "local_engine", "ray_engine"]

RESOURCE = "gspo_timing"
RETRIES = 2
Progress = Callable[[str, int, str, Result | None], None]


def local_engine(jobs: Sequence[Callable[[], Job]], names: Sequence[str], progress: Progress | None = None,
                 run: Callable[[Job], Result] = run_job, **_) -> list[Result]:
    """Run every job here, one after another (``run``: what runs a job)."""
    results = []
    for k, make in enumerate(jobs):
        if progress:
            progress("start", k, names[k], None)
        job = _made(make, names[k])
        result = job if isinstance(job, Result) else run(job)
        del job
        results.append(result)
        if progress:
            progress("done", k, names[k], result)
    return results


def _made(make: Callable[[], Job], name: str) -> Job | Result:
    """The job, or an ERROR result when its model, inputs or baseline artifact cannot be read."""
    try:
        return make()
    except GspoError as e:
        return Result(name, ERROR, first_line(e))


def _ray():
    try:
        import ray
    except ImportError:
        raise GspoError("--engine ray needs Ray: pip install 'gspo[ray]'") from None
    return ray


@contextmanager
def _quiet_stderr():
    """Ray's C++ core writes its connection retries to file descriptor 2 whatever Python's
    logging says (20 lines before the one-line error): held in a temporary file while
    connecting, and dropped."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)


def _connect(ray, address: str | None) -> bool:
    """Connect to the cluster at ``address`` (unless already connected), Ray's own logging kept
    quiet (Python's at ERROR, the workers' not forwarded, the core's retries not shown);
    whether we connected."""
    if ray.is_initialized():
        return False
    if not address:
        raise GspoError("--engine ray needs --address (e.g. auto, or ray://HOST:10001)")
    try:
        with _quiet_stderr():
            ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    except Exception as e:  # Ray raises ConnectionError, RuntimeError, ValueError...
        raise GspoError(f"cannot connect to the Ray cluster at {address}: {first_line(e)}") from None
    return True


def _check_resource(ray) -> None:
    if ray.cluster_resources().get(RESOURCE, 0) < 1:
        raise GspoError(f"no node of the Ray cluster offers the {RESOURCE!r} resource; start each node with "
                        f"ray start ... --resources='{{\"{RESOURCE}\": 1}}'")


def _lost(name: str, e: BaseException) -> Result:
    return Result(name, ERROR, f"the job was lost on the cluster after {RETRIES} retries ({type(e).__name__}: "
                               f"{first_line(e)})")


def ray_engine(jobs: Sequence[Callable[[], Job]], names: Sequence[str], progress: Progress | None = None,
               address: str | None = None, run: Callable[[Job], Result] = run_job, **_) -> list[Result]:
    """Run every job as one Ray task (one node each, one timing per node at a time); connects
    to ``address`` unless this process is already connected (and then leaves it connected)."""
    ray = _ray()
    connected = _connect(ray, address)
    try:
        _check_resource(ray)
        task = ray.remote(run).options(num_cpus=1, resources={RESOURCE: 1}, max_retries=RETRIES,
                                           retry_exceptions=False)
        pending = {}
        results: list[Result | None] = [None] * len(names)
        for k, make in enumerate(jobs):
            job = _made(make, names[k])
            if isinstance(job, Result):
                results[k] = job
                if progress:
                    progress("done", k, names[k], job)
                continue
            pending[task.remote(job)] = k
            if progress:
                progress("start", k, names[k], None)
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            k = pending.pop(done[0])
            try:
                results[k] = ray.get(done[0])
            except Exception as e:  # a node lost (NodeDiedError, WorkerCrashedError, ...) or a task error
                results[k] = _lost(names[k], e)
            if progress:
                progress("done", k, names[k], results[k])
        return results
    finally:
        if connected:
            ray.shutdown()


ENGINES = {"local": local_engine, "ray": ray_engine}
