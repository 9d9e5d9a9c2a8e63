"""What ``gspo optimize --device cuda`` needs of the device: the executor its options are verified
and timed on (TF32 off, fallback to the CPU refused), on the runtime the device chose. The device's
description for the report is :func:`gspo.runtime.cuda.choice.device_block`'s.

Verification compares these executors' outputs with the original run by onnxruntime's CPU
provider; timing goes through :func:`gspo.runtime.bench.timed_runner`, which uses the
executor's own CUDA-event timing (inputs uploaded once, no host copies counted).
"""

from __future__ import annotations

import logging

from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.runtime.executor import device_executor
from gspo.runtime.protocols import Executor
from gspo.streams import Placement, Schedule

__all__ = ["verifying_executor"]

log = logging.getLogger(__name__)


def verifying_executor(graph: Graph, schedule: Schedule | None, placement: Placement | None = None,
                       settings=None, *, runtime: str) -> Executor:
    """The CUDA executor an option of ``gspo optimize --device cuda`` is verified and timed on:
    ``schedule`` on CUDA streams (``None`` or one stream: one session), TF32 off (the outputs stay
    fp32), on ``runtime`` (``ort`` or ``torch``, as :class:`~gspo.search.device.CudaDevice` chose
    it), made by the one dispatcher (:func:`~gspo.runtime.executor.device_executor`). A session
    that onnxruntime puts on the CPU is refused (:class:`~gspo.runtime.cuda.CudaError`).

    Raises:
        GspoError: a placement on another backend (on the GPU the whole model runs there), a
            thread setting (one of the CPU backends'), or CUDA refused the option.
    """
    if settings is not None and not settings.is_default:
        raise GspoError("thread settings (gspo.settings) apply to the cpu backends, not to cuda")
    ex = device_executor(graph, schedule if schedule is not None and schedule.num_streams > 1 else None, "cuda",
                         runtime=runtime, placement=placement)
    for k, fallback in getattr(ex, "fallbacks", ()):
        log.warning("on the CPU (onnxruntime) in segment %d of %s: %s", k, graph.name, fallback)
    return ex
