"""The CUDA backend. These machines have no GPU: the GPU tests skip with the reason."""

from __future__ import annotations

import numpy as np
import pytest

from gspo.errors import GspoError
from gspo.runtime import make_executor, make_session, random_inputs, run
from gspo.runtime.cuda import gpu_status
from gspo.streams import assign_streams
from gspo.zoo import build

HAVE_GPU, WHY = gpu_status()


@pytest.mark.skipif(HAVE_GPU, reason="a GPU is visible; the no-GPU error cannot be shown")
def test_cuda_without_a_gpu_is_a_clear_error():
    with pytest.raises(GspoError, match="--device cuda: "):
        make_executor(build("resnet50", "tiny"), None, "cuda")


@pytest.mark.skipif(not HAVE_GPU, reason=f"no GPU: {WHY}")
@pytest.mark.parametrize("name", ["inception_v3", "nasnet_mobile", "nasrnn"])
def test_cuda_streams_match_plain_onnxruntime(name):
    from gspo.runtime.cuda import CudaExecutor

    g = build(name, "tiny")
    feeds = random_inputs(g)
    ref = run(make_session(g), feeds)
    with CudaExecutor(g, assign_streams(g)) as ex:
        got = ex.run(feeds)
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-3, atol=1e-4)
