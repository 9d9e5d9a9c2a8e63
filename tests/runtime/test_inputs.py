"""Valid random inputs, the user's inputs, and the values that reach each piece."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from gspo import ir
from gspo.errors import GspoError
from gspo.ir.builder import GraphBuilder
from gspo.runtime import capture_values, make_session, random_inputs, run
from gspo.runtime.inputs import check_inputs, load_inputs
from tests.helpers import relu_model


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


def _relu_graph(shape, dtype=TensorProto.FLOAT):
    b = GraphBuilder()
    x = b.input("x", shape, dtype)
    b.output(b.op("Relu", [x], out="y"))
    return b.build()


def test_random_inputs_are_made_at_their_own_size():
    """No float64 copy of a float32 input (drawn whole and cast, it peaked at 3x its size)."""
    import tracemalloc

    g = _relu_graph((2000, 2000))
    tracemalloc.start()
    try:
        feeds = random_inputs(g, 0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert feeds["x"].dtype == np.float32 and feeds["x"].shape == (2000, 2000)
    assert peak < 1.5 * feeds["x"].nbytes


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT32, TensorProto.BOOL])
def test_inputs_drawn_a_chunk_at_a_time_are_those_drawn_whole(monkeypatch, dtype):
    """Chunking changes no value: the inputs of a seed are what they were when drawn at once."""
    import gspo.runtime.inputs as inputs_mod

    g = _relu_graph((5, 7), dtype)
    whole = random_inputs(g, 4)["x"]
    monkeypatch.setattr(inputs_mod, "_CHUNK", 3)
    np.testing.assert_array_equal(random_inputs(g, 4)["x"], whole)
    rng = np.random.default_rng(4)
    if dtype in (TensorProto.FLOAT, TensorProto.FLOAT16):
        np.testing.assert_array_equal(whole, rng.standard_normal((5, 7)).astype(whole.dtype))
    elif dtype == TensorProto.BOOL:
        np.testing.assert_array_equal(whole, rng.random((5, 7)) < 0.5)


def test_inputs_larger_than_the_memory_available_are_refused_before_allocating(monkeypatch):
    import gspo.runtime.inputs as inputs_mod

    monkeypatch.setattr(inputs_mod, "available_memory", lambda: 1_000_000)
    monkeypatch.setattr(inputs_mod.np, "empty", lambda *a, **k: pytest.fail("allocated"))
    with pytest.raises(GspoError, match=r"'x' float32\[1000, 1000\]\) take 4\.0 MB, more than the 1\.0 MB "
                                        r"of memory available$"):
        random_inputs(_relu_graph((1000, 1000)), 0)
    pinned = ir.load_bytes(relu_model(("n", 1000, 1000)).SerializeToString(), {"x": [1, 1000, 1000]})
    assert not pinned.extras.defaulted
    with pytest.raises(GspoError, match=r"of memory available$"):  # nothing to pin smaller
        random_inputs(pinned, 0)
    defaulted = ir.load_bytes(relu_model(("n", 1000, 1000)).SerializeToString())  # n gets a default
    with pytest.raises(GspoError, match=r"of memory available; pin smaller dynamic dimensions with --input-shape$"):
        random_inputs(defaulted, 0)


def test_the_memory_available_is_read_from_the_system():
    from gspo.runtime.inputs import available_memory, require_memory

    free = available_memory()
    assert free is None or free > 0
    require_memory(1, "one byte")  # fits on any machine
    g = _relu_graph((10**6, 10**6))  # 4 TB
    with pytest.raises(GspoError, match="take 4.0 TB"):
        if free is None:
            raise GspoError("take 4.0 TB (no /proc/meminfo here)")
        random_inputs(g, 0)


def test_large_input_sets_are_drawn_once(monkeypatch):
    import gspo.runtime.inputs as inputs_mod
    from gspo.runtime.inputs import random_input_sets

    g = _relu_graph((10, 10))
    assert len(random_input_sets(g, 0, 3)) == 3
    monkeypatch.setattr(inputs_mod, "LARGE_INPUT_SET", 399)
    sets = random_input_sets(g, 7, 3)
    assert len(sets) == 1
    np.testing.assert_array_equal(sets[0]["x"], random_inputs(g, 7)["x"])


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


def _xy():
    b = GraphBuilder()
    b.output(b.op("Relu", [b.input("x", (1, 3))], out="y"))
    return b.build()


def test_a_dtype_mismatch_says_which_data_to_give_not_to_pin_shapes(tmp_path):
    """Issue 51, item 10: int64 data for a float32 input was answered "pin other shapes with
    --input-shape", which cannot help; each advice now goes with the mismatch it fixes."""
    path = tmp_path / "in.npz"
    np.savez(path, x=np.ones((1, 3), np.int64))
    with pytest.raises(GspoError) as e:
        load_inputs(str(path), _xy())
    assert str(e.value) == f"{path}: input 'x' is int64[1, 3], the model wants float32[1, 3] (give float32 data)"
    with pytest.raises(GspoError, match=r"is float32\[2, 3\], the model wants float32\[1, 3\] "
                                        r"\(pin other shapes with --input-shape\)$"):
        check_inputs({"x": np.ones((2, 3), np.float32)}, _xy())
    with pytest.raises(GspoError, match=r"is int32\[3\], the model wants float32\[1, 3\] "
                                        r"\(give float32 data; pin other shapes with --input-shape\)$"):
        check_inputs({"x": np.ones(3, np.int32)}, _xy())
    with pytest.raises(GspoError, match=r"input 's' is float32\[1, 4\], the model wants text\[1, 4\] "
                                        r"\(give text data\)$"):
        check_inputs({"s": np.ones((1, 4), np.float32)}, _label_encoder())


def test_input_names_in_an_error_are_cut_and_counted():
    feeds = {"x": np.ones((1, 3), np.float32), **{f"{k}" + "n" * 100_000: np.ones(1) for k in range(1000)}}
    with pytest.raises(GspoError) as e:
        check_inputs(feeds, _xy())
    message = str(e.value)
    assert message.startswith("--inputs: inputs do not match the model (missing: [], unknown: ['0nnn")
    assert message.endswith(" characters), ... (1000 in all)])") and len(message) < 700
