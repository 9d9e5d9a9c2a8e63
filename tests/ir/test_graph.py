"""The immutable graph: structural keys, sharing on rewrite, invariants."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gspo.ir import Graph, GraphError, Node, Value, fresh_name, toposort
from gspo.ir.builder import GraphBuilder, make_attr
from tests.helpers import branchy


def _chain(ops, channels, kernel, stride, hw, relu_alpha=None):
    b = GraphBuilder("chain", seed=1)
    x = b.input("x", (1, channels, hw, hw))
    x = b.op("Conv", [x, b.weight("w", (channels, channels, kernel, kernel))], kernel_shape=[kernel, kernel], strides=[stride, stride])
    for op in ops:
        x = b.op(op, [x]) if relu_alpha is None or op != "LeakyRelu" else b.op(op, [x], alpha=relu_alpha)
    return b.output(x).build()


graphs = st.tuples(
    st.lists(st.sampled_from(["Relu", "Sigmoid", "Tanh", "LeakyRelu"]), min_size=1, max_size=5),
    st.integers(1, 6),
    st.sampled_from([1, 3]),
    st.sampled_from([1, 2]),
    st.integers(4, 9),
)


@settings(max_examples=60, deadline=None)
@given(graphs)
def test_graphs_built_the_same_way_hash_equal(spec):
    a, b = _chain(*spec), _chain(*spec)
    assert a is not b
    assert a.key == b.key and a == b and hash(a) == hash(b)


def _variants(g: Graph):
    """Every graph that differs from ``g`` by one attribute, one input or one shape."""
    node = g.nodes[-1]
    yield "attribute", g.with_nodes(g.nodes[:-1] + (node.replace(attrs=node.attrs + (make_attr("extra", 1),)),))
    if node.inputs[0] != g.inputs[0].name:
        yield "input", g.with_nodes(g.nodes[:-1] + (node.replace(inputs=(g.inputs[0].name,)),))
    out = node.outputs[0]
    bigger = Value(out.name, out.dtype, tuple(d + 1 for d in out.shape))
    yield "shape", g.with_nodes(g.nodes[:-1] + (node.replace(outputs=(bigger,)),))
    yield "stream", g.with_nodes(g.nodes[:-1] + (node.replace(stream=1),))


@settings(max_examples=60, deadline=None)
@given(graphs)
def test_any_single_change_changes_the_key(spec):
    g = _chain(*spec)
    for what, v in _variants(g):
        assert v.key != g.key, what


def test_attribute_value_change_changes_the_key():
    a = _chain(["LeakyRelu"], 2, 1, 1, 4, relu_alpha=0.1)
    b = _chain(["LeakyRelu"], 2, 1, 1, 4, relu_alpha=0.2)
    assert a.key != b.key


def test_node_order_does_not_change_the_key():
    g = branchy()
    c1, c3 = g.nodes[0], g.nodes[1]
    swapped = g.with_nodes((c3, c1) + g.nodes[2:])
    assert swapped.key == g.key


def test_node_names_are_labels_not_structure():
    g = branchy()
    renamed = g.with_nodes(tuple(n.replace(name=n.name + "_x") for n in g.nodes))
    assert renamed.key == g.key


def test_rewrite_shares_untouched_nodes():
    g = branchy()
    relu = g.nodes[-1]
    sig = relu.replace(op_type="Sigmoid")
    h = g.replace_nodes(remove=[relu], add=[sig])
    assert h.key != g.key
    assert all(a is b for a, b in zip(g.nodes[:-1], h.nodes[:-1]))
    assert h.nodes[-1] is sig
    assert g.nodes[-1] is relu  # the old graph is untouched


def test_replace_nodes_drops_weights_only_removed_nodes_read():
    g = branchy()
    conv1 = g.nodes[0]
    ident = Node("Identity", (g.inputs[0].name,), conv1.outputs)
    h = g.replace_nodes(remove=[conv1], add=[ident])
    assert conv1.inputs[1] not in h.weights
    assert set(g.weights) - set(h.weights) == {conv1.inputs[1]}
    h.check()


def test_replace_nodes_sorts_new_nodes_topologically():
    g = branchy()
    relu = g.nodes[-1]
    mid = Value(fresh_name("t", relu.key), relu.outputs[0].dtype, relu.outputs[0].shape)
    first = Node("Relu", relu.inputs, (mid,))
    second = Node("Identity", (mid.name,), relu.outputs)
    h = g.replace_nodes(remove=[relu], add=[second, first])
    assert [n.op_type for n in h.nodes[-2:]] == ["Relu", "Identity"]


def test_check_rejects_a_value_read_before_it_is_written():
    g = branchy()
    with pytest.raises(GraphError, match="before it is defined"):
        g.with_nodes(tuple(reversed(g.nodes))).check()


def test_check_rejects_a_value_produced_twice():
    g = branchy()
    dup = Node("Relu", (g.inputs[0].name,), g.nodes[0].outputs)
    with pytest.raises(GraphError, match="produced twice"):
        g.with_nodes((g.nodes[0], dup) + g.nodes[1:]).check()


def test_toposort_detects_a_cycle():
    v1, v2 = Value("a", 1, (1,)), Value("b", 1, (1,))
    with pytest.raises(GraphError, match="cycle"):
        toposort([Node("Relu", ("b",), (v1,)), Node("Relu", ("a",), (v2,))])


def test_fresh_name_is_deterministic():
    assert fresh_name("w", 1, "x") == fresh_name("w", 1, "x") != fresh_name("w", 2, "x")
