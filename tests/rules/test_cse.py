from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gspo.ir.builder import GraphBuilder
from gspo.rules.cse import MergeDuplicates
from tests.rules.util import apply_first, assert_equivalent, ops, reasons


def test_merge_duplicate_relus():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    g = b.output(b.op("Add", [b.op("Sigmoid", [b.op("Relu", [x])]), b.op("Tanh", [b.op("Relu", [x])])])).build()
    h = apply_first(MergeDuplicates(), g)
    assert ops(h).count("Relu") == 1
    assert_equivalent(g, h)


def test_duplicates_that_are_graph_outputs_stay():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    g = b.output(b.op("Relu", [x]), b.op("Relu", [x])).build()
    assert reasons(MergeDuplicates(), g) == ["'relu_1' is a graph output"]


def test_random_ops_are_never_merged():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    g = b.output(b.op("Add", [b.op("Dropout", [x]), b.op("Dropout", [x])])).build()
    assert list(MergeDuplicates().match(g, explain=True)) == []


@settings(max_examples=20, deadline=None)
@given(op=st.sampled_from(["Relu", "Sigmoid", "Tanh", "Exp"]), n=st.integers(2, 4))
def test_merge_duplicates_property(op, n):
    b = GraphBuilder()
    x = b.input("x", (3, 4))
    outs = [b.op("Neg", [b.op(op, [x])]) for _ in range(n)]
    total = outs[0]
    for o in outs[1:]:
        total = b.op("Add", [total, o])
    g = b.output(total).build()
    assert_equivalent(g, apply_first(MergeDuplicates(), g), runs=1)
