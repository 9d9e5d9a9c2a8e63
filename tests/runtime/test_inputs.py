"""Valid random inputs, the user's inputs, and the values that reach each piece."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from gspo.errors import GspoError
from gspo.ir.builder import GraphBuilder
from gspo.runtime import capture_values, make_session, random_inputs, run
from gspo.runtime.inputs import check_inputs


def _bert_like():
    """Token ids (8000 rows), token types (2 rows) and a mask, as a BERT export reads them."""
    b = GraphBuilder()
    ids = b.input("input_ids", (1, 16), TensorProto.INT64)
    types = b.input("token_type_ids", (1, 16), TensorProto.INT64)
    mask = b.input("attention_mask", (1, 16), TensorProto.INT64)
    emb = b.op("Add", [b.op("Gather", [b.weight("words", (8000, 4)), ids]),
                       b.op("Gather", [b.weight("types", (2, 4)), types])])
    keep = b.op("Unsqueeze", [b.op("Cast", [mask], to=TensorProto.FLOAT), b.const("axes", np.array([2], np.int64))])
    b.output(b.op("Mul", [emb, keep], out="y"))
    return b.build()


def test_random_integer_inputs_are_valid_for_the_model():
    g = _bert_like()
    feeds = random_inputs(g, 3)
    assert feeds["token_type_ids"].max() <= 1 and feeds["input_ids"].max() < 8000
    assert feeds["input_ids"].max() >= 16  # not capped at a small default
    assert set(np.unique(feeds["attention_mask"])) <= {0, 1}
    run(make_session(g), feeds)  # onnxruntime accepts them


def test_user_inputs_are_checked_by_name_shape_and_type():
    g = _bert_like()
    feeds = random_inputs(g, 0)
    assert check_inputs(feeds, g).keys() == feeds.keys()
    with pytest.raises(GspoError, match="missing: \\['token_type_ids'\\]"):
        check_inputs({k: v for k, v in feeds.items() if k != "token_type_ids"}, g)
    with pytest.raises(GspoError, match="the model wants int64\\[1, 16\\]"):
        check_inputs({**feeds, "input_ids": feeds["input_ids"].astype(np.int32)}, g)


def test_capture_values_gives_the_intermediate_values_a_piece_receives():
    b = GraphBuilder()
    x = b.input("x", (1, 4))
    mid = b.op("Relu", [x], out="mid")
    b.output(b.op("Neg", [mid], out="y"))
    g = b.build()
    feeds = {"x": np.array([[-1.0, 2.0, -3.0, 4.0]], np.float32)}
    got = capture_values(g, feeds, ["x", "mid"])
    np.testing.assert_array_equal(got["mid"], [[0, 2, 0, 4]])
    np.testing.assert_array_equal(got["x"], feeds["x"])


def test_capture_values_of_several_input_sets_builds_one_session(monkeypatch):
    import gspo.runtime.inputs as inputs_mod

    b = GraphBuilder()
    x = b.input("x", (1, 4))
    b.output(b.op("Neg", [b.op("Relu", [x], out="mid")], out="y"))
    g = b.build()
    built = []
    real = inputs_mod.make_session
    monkeypatch.setattr(inputs_mod, "make_session", lambda *a, **k: built.append(1) or real(*a, **k))
    sets = [{"x": np.array([[-1.0, 2.0, -3.0, 4.0]], np.float32)}, {"x": np.array([[5.0, -6.0, 7.0, -8.0]], np.float32)}]
    got = capture_values(g, sets, ["x", "mid"])
    assert len(built) == 1 and len(got) == 2
    np.testing.assert_array_equal(got[1]["mid"], [[5, 0, 7, 0]])
    np.testing.assert_array_equal(got[0]["x"], sets[0]["x"])


def _label_encoder():
    """A string input mapped to ids by an ai.onnx.ml LabelEncoder (a categorical feature)."""
    from onnx import helper

    from gspo.ir import load_bytes

    node = helper.make_node("LabelEncoder", ["s"], ["y"], domain="ai.onnx.ml", keys_strings=["s1", "s2"],
                            values_int64s=[1, 2], default_int64=0)
    g = helper.make_graph([node], "enc", [helper.make_tensor_value_info("s", TensorProto.STRING, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.INT64, [1, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 2)])
    m.ir_version = 8
    return load_bytes(m.SerializeToString())


def test_string_inputs_get_random_tokens_and_npz_text_is_accepted():
    """A string input stopped optimize ('cannot make random data for input of type object') and
    an .npz of text was refused ('<U2, the model wants object')."""
    g = _label_encoder()
    feeds = random_inputs(g, seed=0)
    assert feeds["s"].dtype == object and all(isinstance(x, str) for x in feeds["s"].ravel())
    assert run(make_session(g), feeds)["y"].shape == (1, 4)
    given = check_inputs({"s": np.array([["s1", "s2", "zz", "s1"]])}, g)
    assert given["s"].dtype == object
    np.testing.assert_array_equal(run(make_session(g), given)["y"], [[1, 2, 0, 1]])
