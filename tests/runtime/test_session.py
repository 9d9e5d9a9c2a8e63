"""Session options: onnxruntime's parallel execution mode (a benchmark peer) computes the same."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from gspo.runtime import SessionConfig, make_session, random_inputs
from tests.helpers import branchy


def test_parallel_mode_is_set_and_computes_the_same():
    g = branchy()
    feeds = random_inputs(g)
    plain = make_session(g)
    par = make_session(g, SessionConfig(parallel_mode=True))
    assert plain.get_session_options().execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
    assert par.get_session_options().execution_mode == ort.ExecutionMode.ORT_PARALLEL
    for a, b in zip(plain.run(None, feeds), par.run(None, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
