"""torch dynamo takes a converted program whole: every decision an op function makes from a
value known at conversion is a Python value by then (:class:`gspo.runtime.torchrt.registry.Call`),
so the callable benchmarks/gpu/gpu_peers.py compiles traces to one graph, with no break, and
computes what the program computes. Where the data itself decides a shape, the read remains, and
the program names the op (:attr:`Program.host_reads`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gspo.runtime.inputs import random_inputs  # noqa: E402
from gspo.runtime.torchrt.convert import convert, to_device  # noqa: E402
from gspo.zoo import build  # noqa: E402
from tests.runtime.torchrt.test_probe import range_of_data  # noqa: E402

PEERS = Path(__file__).resolve().parents[3] / "benchmarks" / "gpu" / "gpu_peers.py"


def flat(program):
    """The callable gpu_peers compiles (its ``flat``), or the same function where the
    benchmarks are not shipped."""
    if PEERS.is_file():
        spec = importlib.util.spec_from_file_location("gpu_peers", PEERS)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.flat(program)

    def run(*xs):
        out = program(dict(zip(program.inputs, xs)))
        return tuple(out[name] for name in program.outputs)
    return run


def args_of(program, feeds) -> list:
    return [to_device(np.asarray(feeds[name]), program.device) for name in program.inputs]


@pytest.mark.parametrize("name", ["resnet50", "inception_v3", "squeezenet", "nasnet_mobile", "nasrnn", "bert"])
def test_dynamo_traces_a_zoo_model_whole(name):
    g = build(name, "tiny")
    program = convert(g, "cpu")
    assert not program.fallbacks and program.host_reads == []
    args = args_of(program, random_inputs(g, 0))
    torch._dynamo.reset()
    compiled = torch.compile(flat(program), fullgraph=True, backend="eager")  # a graph break raises
    with torch.no_grad():
        got, want = compiled(*args), flat(program)(*args)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_where_the_data_decides_a_shape_the_read_stays_and_the_program_names_the_op():
    """dynamo takes even this program whole (the limit as an unbacked integer), but the read of
    the data stays in its graph: a host read, which the program names."""
    program = convert(range_of_data(None), "cpu")
    assert [r.split(":")[0] for r in program.host_reads] == ["Range 'range'"]
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(flat(program), fullgraph=True, backend=keep)
    for n in (5, 3):
        np.testing.assert_array_equal(compiled(torch.tensor(n))[0].numpy(), np.arange(n))
    assert graphs and all(any(str(node.target) in ("tolist", "item") or "local_scalar" in str(node.target)
                              for node in gm.graph.nodes) for gm in graphs), [gm.code for gm in graphs]
