"""Execution and timing: the only package that imports onnxruntime."""

from gspo.runtime.bench import (
    DeviceTime,
    Repeats,
    Timing,
    calls_per_sample,
    interleaved,
    measure_once,
    median_seconds,
    timed_runner,
    warm_sample,
)
from gspo.runtime.cpu import CpuExecutor, TraceEvent
from gspo.runtime.executor import (
    DEVICES,
    check_device,
    choose_schedule,
    device_executor,
    make_executor,
    saved_schedule,
)
from gspo.runtime.inputs import capture_values, load_inputs, random_inputs
from gspo.runtime.plan import Plan, Segment, make_plan
from gspo.runtime.protocols import Executor, Runner
from gspo.runtime.session import (
    BackendError,
    SessionConfig,
    make_session,
    optimized_op_types,
    run,
    runtime_version,
)
from gspo.runtime.verify import OutputDiff, VerifyResult, compare_outputs, verify

__all__ = [
    "DEVICES",
    "BackendError",
    "Executor",
    "Runner",
    "check_device",
    "CpuExecutor",
    "DeviceTime",
    "Plan",
    "Repeats",
    "Segment",
    "Timing",
    "TraceEvent",
    "capture_values",
    "choose_schedule",
    "device_executor",
    "interleaved",
    "make_executor",
    "make_plan",
    "measure_once",
    "median_seconds",
    "saved_schedule",
    "OutputDiff",
    "SessionConfig",
    "VerifyResult",
    "compare_outputs",
    "load_inputs",
    "make_session",
    "optimized_op_types",
    "random_inputs",
    "run",
    "runtime_version",
    "timed_runner",
    "warm_sample",
    "calls_per_sample",
    "verify",
]
