"""What a :class:`~gspo.runtime.torchrt.registry.Call` decides at conversion: the known inputs
an op reads as numbers, as plain Python values, and whether known indices are non-negative."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from onnx import TensorProto  # noqa: E402

from gspo.ir import Node, Value  # noqa: E402
from gspo.runtime.torchrt.registry import Call  # noqa: E402


def call(*consts) -> Call:
    names = tuple(f"i{k}" for k in range(len(consts)))
    node = Node("Gather", names, (Value("y", TensorProto.FLOAT, None),), name="g")
    return Call(node, consts, 17, torch.device("cpu"))


def test_small_known_inputs_are_python_values_at_conversion():
    c = call(np.array([2, -1], np.int64), np.array(0.5, np.float32), None, np.array([True]))
    assert c.numbers(0) == (2, -1) and all(type(v) is int for v in c.numbers(0))
    assert c.numbers(1) == (0.5,) and type(c.numbers(1)[0]) is float
    assert c.numbers(2) is None and c.numbers(3) == (True,) and c.numbers(9) is None
    assert c.known_shape(0) == (2,) and c.known_shape(1) == () and c.known_shape(2) is None
    assert c.ints(0, None) == [2, -1] and c.ints(2, torch.tensor([4, 5])) == [4, 5] and c.ints(2, None) is None


def test_a_large_known_input_is_not_copied_but_still_read():
    big = np.arange(10_000, dtype=np.int64)
    c = call(big, np.zeros(1000, np.float32))
    assert c.numbers(0) is None and c.numbers(1) is None, "weights are not kept twice"
    assert c.ints(0, None) == list(range(10_000))


def test_non_negative_is_known_only_for_known_indices_without_a_negative_one():
    c = call(np.array([0, 3], np.int64), np.array([0, -3], np.int64), None, np.array([7], np.uint8),
             np.arange(10_000, dtype=np.int32))
    assert [c.non_negative(k) for k in range(6)] == [True, False, False, True, True, False]
