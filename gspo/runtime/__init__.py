"""Execution and timing: the only package that imports onnxruntime."""

from gspo.runtime.bench import Repeats, Timing, interleaved, median_seconds
from gspo.runtime.cpu import CpuExecutor, TraceEvent
from gspo.runtime.executor import choose_schedule, make_executor, parse_streams, saved_schedule
from gspo.runtime.inputs import capture_values, load_inputs, random_inputs
from gspo.runtime.plan import Plan, Segment, make_plan
from gspo.runtime.session import (
    SessionConfig,
    make_session,
    optimized_op_types,
    run,
    runtime_version,
)
from gspo.runtime.verify import OutputDiff, VerifyResult, compare_outputs, verify

__all__ = [
    "CpuExecutor",
    "Plan",
    "Repeats",
    "Segment",
    "Timing",
    "TraceEvent",
    "capture_values",
    "choose_schedule",
    "interleaved",
    "make_executor",
    "make_plan",
    "median_seconds",
    "parse_streams",
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
    "verify",
]
