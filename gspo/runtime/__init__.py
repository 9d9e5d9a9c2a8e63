"""Execution and timing: the only package that imports onnxruntime."""

from gspo.runtime.session import SessionConfig, load_inputs, make_session, random_inputs, run
from gspo.runtime.verify import OutputDiff, VerifyResult, compare_outputs, verify

__all__ = [
    "OutputDiff",
    "SessionConfig",
    "VerifyResult",
    "compare_outputs",
    "load_inputs",
    "make_session",
    "random_inputs",
    "run",
    "verify",
]
