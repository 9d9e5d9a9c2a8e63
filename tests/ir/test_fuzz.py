"""Mutated model bytes only ever fail with gspo's one-line errors: no traceback, no hang."""

from __future__ import annotations

from functools import cache

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gspo import ir
from gspo.errors import GspoError
from gspo.zoo import build
from tests.ir.conformance import DATA


@cache
def _seeds() -> tuple[bytes, ...]:
    return (
        ir.serialize(build("squeezenet", "tiny")),
        ir.serialize(build("bert", "tiny")),
        (DATA / "light" / "light_squeezenet.onnx").read_bytes(),
    )


@st.composite
def mutated(draw):
    data = bytearray(draw(st.sampled_from(_seeds())))
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["flip", "set", "truncate", "insert", "delete"]))
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "flip" and data:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and data:
            data[pos] = draw(st.integers(0, 255))
        elif kind == "truncate":
            del data[pos:]
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del data[pos : pos + draw(st.integers(1, 64))]
    return bytes(data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mutated())
def test_mutated_models_fail_cleanly(data):
    try:
        graph = ir.load_bytes(data, label="fuzz.onnx")
    except GspoError as e:
        message = str(e)
        assert message.startswith("fuzz.onnx: ") and "\n" not in message
        return
    ir.serialize(graph)  # what loads also saves
