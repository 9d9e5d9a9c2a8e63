"""The main graph's structure: one-line errors naming the node and the value; unsorted graphs sorted."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from gspo.errors import ModelLoadError
from gspo.ir.order import topologically_sorted
from tests.helpers import onnx_model

X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])


def _out(name="y"):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [2, 4])


CASES = {
    "cycle": ([helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["b"])], "a",
              "the graph has a cycle: node #0 (Add) reads 'b', the output of node #1 (Relu), which depends on the "
              "output of node #0 (Add)"),
    "self": ([helper.make_node("Add", ["x", "a"], ["a"], name="acc")], "a",
             "the graph has a cycle: node 'acc' (Add) reads its own output 'a'"),
    "dangling": ([helper.make_node("Add", ["x", "b2"], ["y"], name="add0")], "y",
                 "node 'add0' (Add) reads 'b2', which is not a graph input, an initializer or the output of any node"),
    "missing initializer": ([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], "y",
                            "node 'mm' (MatMul) reads 'W', which is not a graph input, an initializer or the output "
                            "of any node"),
    "undefined output": ([helper.make_node("Relu", ["x"], ["y"])], "ghost",
                         "graph output 'ghost' is not a graph input, an initializer or the output of any node"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_graph_that_cannot_run_is_one_full_line_naming_the_node_and_value(case):
    nodes, output, message = CASES[case]
    with pytest.raises(ModelLoadError) as e:
        topologically_sorted(onnx_model(nodes, [X], [_out(output)]), "m.onnx")
    assert str(e.value) == f"m.onnx: {message}"


def test_unsorted_nodes_are_sorted_and_a_sorted_graph_is_returned_as_is():
    nodes = [helper.make_node("Relu", ["a"], ["y"], name="second"), helper.make_node("Neg", ["x"], ["a"], name="first")]
    model = onnx_model(nodes, [X], [_out()])
    fixed = topologically_sorted(model)
    assert [n.name for n in fixed.graph.node] == ["first", "second"]
    assert [n.name for n in model.graph.node] == ["second", "first"]  # the given model is not changed
    onnx.checker.check_model(fixed)
    assert topologically_sorted(fixed) is fixed


def test_a_subgraph_reading_a_later_value_is_sorted_after_it():
    then = helper.make_graph([helper.make_node("Relu", ["a"], ["r"])], "t", [], [_out("r")])
    other = helper.make_graph([helper.make_node("Neg", ["a"], ["n"])], "e", [], [_out("n")])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="if"),
             helper.make_node("Abs", ["x"], ["a"], name="abs")]
    model = onnx_model(nodes, [X, helper.make_tensor_value_info("c", TensorProto.BOOL, [])], [_out()])
    assert [n.name for n in topologically_sorted(model).graph.node] == ["abs", "if"]
