"""Building rewrites: content names, reuse of identical nodes, bypassing a node."""

from __future__ import annotations

from gspo.ir.builder import GraphBuilder
from gspo.rules.edit import Edit, bypass, bypass_check


def _relu_of_relu():
    b = GraphBuilder()
    x = b.input("x", (1, 4))
    return b.output(b.op("Sigmoid", [b.op("Relu", [x])])).build()


def test_an_identical_node_is_reused_not_added_twice():
    g = _relu_of_relu()
    relu = g.nodes_by_op["Relu"][0]
    e = Edit(g)
    assert e.node("Relu", relu.inputs) == list(relu.output_names)
    first = e.node("Tanh", relu.inputs)
    assert e.node("Tanh", relu.inputs) == first
    assert len(e.commit().nodes) == len(g.nodes) + 1


def test_two_edits_adding_the_same_node_name_it_alike():
    g = _relu_of_relu()
    x = g.inputs[0].name
    assert Edit(g).node("Tanh", [x]) == Edit(g).node("Tanh", [x])


def test_bypass_points_the_readers_at_the_input():
    g = _relu_of_relu()
    relu = g.nodes_by_op["Relu"][0]
    plan = bypass_check(g, relu.outputs[0].name, relu.inputs[0], [relu])
    assert plan.rename is None  # x is a graph input: the Sigmoid is pointed at it
    e = Edit(g)
    bypass(e, plan)
    out = e.commit()
    assert [n.op_type for n in out.nodes] == ["Sigmoid"]
    assert out.nodes[0].inputs == relu.inputs


def test_bypass_check_refuses_a_graph_output():
    b = GraphBuilder()
    x = b.input("x", (1, 4))
    y = b.op("Relu", [x])
    g = b.output(y).build()
    relu = g.nodes[0]
    assert "graph output" in bypass_check(g, y, x, [relu]).reason
