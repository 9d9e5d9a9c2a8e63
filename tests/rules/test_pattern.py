"""Patterns: the named nodes Rule.match binds before a rule's check sees them."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from gspo.ir.builder import GraphBuilder
from gspo.rules.base import ConvParams, Fail, OpSet, Rule, conv_mismatch, require
from gspo.rules.pattern import EITHER, Bound, Input, Pattern, Readers, Root, SiteNode


def _conv_plus(relu_first: bool = False, conv_readers: int = 1):
    """``Add(Relu(x), Conv(x))`` (or the Conv first), the Conv read ``conv_readers`` times."""
    b = GraphBuilder()
    x = b.input("x", (1, 4, 8, 8))
    conv = b.op("Conv", [x, b.weight("w", (4, 4, 1, 1))], kernel_shape=[1, 1])
    relu = b.op("Relu", [x])
    add = b.op("Add", [relu, conv] if relu_first else [conv, relu])
    extra = [b.op("Sigmoid", [conv]) for _ in range(conv_readers - 1)]
    return b.output(add, *extra).build()


_SUM = Pattern(Root("add", "Add"), Input("conv", OpSet("Conv", ("Conv", "Gemm")), of="add", at=EITHER, sole=True))


def test_a_pattern_is_the_tuple_of_its_positions_and_weighs_its_steps():
    p = Pattern(Root("a", "Add"), Input("b", "Conv", of="a", weight=2), Input("c", "Erf", of="b", weight=0),
                SiteNode("d", None, 1))
    assert list(p) == ["Add", "Conv", "Conv"] and [s.name for s in p.steps] == ["a", "b", "c", "d"]
    assert pickle.loads(pickle.dumps(_SUM)) == _SUM and pickle.loads(pickle.dumps(_SUM)).steps == _SUM.steps
    with pytest.raises(ValueError, match="each name once"):
        Pattern(Root("a", "Add"), Input("a", "Conv", of="a"))


@pytest.mark.parametrize("relu_first", [False, True])
def test_an_input_binds_the_first_operand_whose_producer_fits_and_says_where(relu_first):
    g = _conv_plus(relu_first)
    bound = _SUM.bind(g, (g.nodes_by_op["Add"][0],))
    assert isinstance(bound, Bound) and bound[0] is bound["add"]  # still the site
    assert bound["conv"].op_type == "Conv" and bound.at("conv") == (1 if relu_first else 0)


def test_binding_says_why_a_producer_does_not_bind():
    g = _conv_plus(conv_readers=2)
    assert "has 2 consumers" in _SUM.bind(g, (g.nodes_by_op["Add"][0],)).reason
    relu = Pattern(Root("add", "Add"), Input("x", "Tanh", of="add", at=EITHER, reason="no Tanh"))
    assert relu.bind(g, (g.nodes_by_op["Add"][0],)) == Fail("no Tanh")
    plain = Pattern(Root("add", "Add"), Input("x", "Tanh", of="add"))
    assert plain.bind(g, (g.nodes_by_op["Add"][0],)).reason == "not fed by Tanh"


def _split_into(readers):
    b = GraphBuilder()
    x = b.input("x", (1, 4))
    pieces = b.op("Split", [x, b.const("s", np.array([2, 2]))], n_outputs=2, axis=1)
    return b.output(*[b.op(op, [p]) for op, p in zip(readers, pieces)]).build()


def test_readers_bind_the_only_reader_of_each_output():
    pattern = Pattern(Root("split", "Split"), Readers("users", OpSet("Relu", ("Relu", "Tanh")), of="split",
                                                        reason="a piece is not read by Relu or Tanh"))
    g = _split_into(["Relu", "Tanh"])
    bound = pattern.bind(g, (g.nodes_by_op["Split"][0],))
    assert [u.op_type for u in bound["users"]] == ["Relu", "Tanh"]
    g = _split_into(["Relu", "Exp"])
    assert pattern.bind(g, (g.nodes_by_op["Split"][0],)).reason == "a piece is not read by Relu or Tanh"


class _ConvBesideRelu(Rule):
    """Test-only rule: an Add of a Conv and anything; its check sees the bound Conv."""

    pattern = _SUM

    def check(self, graph, site):
        require(site["conv"].attr("kernel_shape") == (1, 1), "not a 1x1 Conv")
        return self._match([site["add"], site["conv"]], operand=site.at("conv"))


def test_rule_match_binds_the_pattern_before_the_check():
    rule = _ConvBesideRelu()
    assert rule.positions() == (frozenset({"Add"}), frozenset({"Conv", "Gemm"}))
    (m,) = rule.match(_conv_plus(relu_first=True))
    assert [n.op_type for n in m.nodes] == ["Add", "Conv"] and m["operand"] == 1
    assert [f.reason for f in rule.match(_conv_plus(conv_readers=3), explain=True)] == ["'conv' has 3 consumers"]


def test_one_conv_compatibility_check_names_the_first_difference():
    p = ConvParams((3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, 8, 4)
    assert conv_mismatch(p, p) is None
    assert conv_mismatch(p, ConvParams((1, 1), (2, 2), (1, 1), (0,) * 4, 1, 8, 4)) == "kernel sizes differ"
    assert conv_mismatch(p, ConvParams((1, 1), (2, 2), (1, 1), (0,) * 4, 1, 8, 4), same=("strides",)) == "strides differ"
    assert conv_mismatch(p, ConvParams((3, 3), (1, 1), (1, 1), (0,) * 4, 1, 8, 4)) == "pads differ"
    assert conv_mismatch(p, ConvParams((3, 3), (1, 1), (1, 1), (1,) * 4, 2, 8, 2)) == "group is not 1"
