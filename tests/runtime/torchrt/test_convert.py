"""A graph as a torch program (:mod:`gspo.runtime.torchrt.convert`): what is folded when the
model is converted, what goes to onnxruntime's CPU provider, and what a run returns. The ops
themselves are tested in test_ops.py; here they are counted, not checked one by one."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import onnxruntime  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

from gspo import ir  # noqa: E402
from gspo.ir import Graph, Node, Value  # noqa: E402
from gspo.ir.weights import Literal  # noqa: E402
from gspo.runtime import make_session, run  # noqa: E402
from gspo.runtime.session import BackendError  # noqa: E402
from gspo.runtime.torchrt import ops  # noqa: E402
from gspo.runtime.torchrt.convert import Fallback, convert, to_numpy, to_torch  # noqa: E402
from gspo.runtime.torchrt.registry import Unsupported  # noqa: E402

F, I64 = TensorProto.FLOAT, TensorProto.INT64
CPU = torch.device("cpu")


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def literal(array) -> Literal:
    """A constant weight of ``array``'s shape (``Literal.from_array`` makes a 0-d array 1-d)."""
    array = np.asarray(array)
    return Literal(array.tobytes(), helper.np_dtype_to_tensor_dtype(array.dtype), array.shape)


def need(*names: str) -> None:
    """Skip unless the op table has every op of ``names`` (default domain)."""
    missing = [n for n in names if ("", n) not in ops.OPS]
    if missing:
        pytest.skip(f"the torch op table lacks {', '.join(missing)} so far")


def count_calls(monkeypatch, *names: str) -> dict[str, int]:
    """Count the calls of each op of ``names`` (their table entries wrapped for the test)."""
    counts = dict.fromkeys(names, 0)
    for name in names:
        fn, check = ops.OPS[("", name)]

        def counted(c, x, fn=fn, name=name):
            counts[name] += 1
            return fn(c, x)

        monkeypatch.setitem(ops.OPS, ("", name), (counted, check))
    return counts


def shape_arithmetic(dims, scalar_index: bool = False) -> Graph:
    """``y = Reshape(Relu(x), Concat(Gather(Shape(x), [0]), [-1]))``: x as (d0, -1); ``dims`` may
    hold a symbolic first dimension. ``scalar_index``: ``Unsqueeze(Gather(Shape(x), 0))`` instead,
    as exporters write it (a 0-d value in between)."""
    x = Value("x", F, tuple(dims))
    rest = int(np.prod(dims[1:]))
    c = {"i0": literal(np.array(0 if scalar_index else [0], np.int64)),
         "ax": literal(np.array([0], np.int64)), "m1": literal(np.array([-1], np.int64))}
    axis0 = (ir.Attr("axis", 2, 0),)
    if scalar_index:
        first = (Node("Gather", ("s", "i0"), (Value("d0", I64, ()),), axis0, name="gather"),
                 Node("Unsqueeze", ("d0", "ax"), (Value("u", I64, (1,)),), name="unsqueeze"))
    else:
        first = (Node("Gather", ("s", "i0"), (Value("u", I64, (1,)),), axis0, name="gather"),)
    nodes = (
        Node("Relu", ("x",), (Value("r", F, tuple(dims)),), name="relu"),
        Node("Shape", ("x",), (Value("s", I64, (len(dims),)),), name="shape"),
        *first,
        Node("Concat", ("u", "m1"), (Value("target", I64, (2,)),), axis0, name="concat"),
        Node("Reshape", ("r", "target"), (Value("y", F, (dims[0], rest)),), name="reshape"),
    )
    weights = c if scalar_index else {k: v for k, v in c.items() if k != "ax"}
    return Graph(inputs=(x,), outputs=(nodes[-1].outputs[0],), nodes=nodes, weights=weights).check()


# ------------------------------------------------------------------ folding
def test_shape_arithmetic_of_a_static_input_is_folded_at_conversion(monkeypatch):
    need("Relu", "Shape", "Gather", "Concat", "Reshape")
    counts = count_calls(monkeypatch, "Relu", "Shape", "Gather", "Concat", "Reshape")
    g = shape_arithmetic((2, 3, 4))
    program = convert(g, CPU)
    assert not program.fallbacks and not program.needs_host
    counts.update(dict.fromkeys(counts, 0))  # what conversion itself computed does not count
    x = rand(2, 3, 4)
    for _ in range(2):
        out = program.run({"x": x})
        np.testing.assert_array_equal(out["y"], np.maximum(x, 0).reshape(2, 12))
    assert counts == {"Relu": 2, "Shape": 0, "Gather": 0, "Concat": 0, "Reshape": 2}, \
        "only Relu and Reshape are left to run"
    np.testing.assert_array_equal(out["y"], run(make_session(g), {"x": x})["y"])


def test_a_folded_scalar_stays_a_scalar():
    need("Relu", "Shape", "Gather", "Unsqueeze", "Concat", "Reshape", "Size")
    g = shape_arithmetic((2, 3, 4), scalar_index=True)
    x = rand(2, 3, 4)
    program = convert(g, CPU)  # today: Concat fails here, folding [[2]] with [-1]
    assert not program.needs_host
    np.testing.assert_array_equal(program.run({"x": x})["y"], np.maximum(x, 0).reshape(2, 12))
    size = Node("Size", ("x",), (Value("n", I64, ()),), name="size")
    g = Graph(inputs=g.inputs, outputs=size.outputs, nodes=(size,), weights={}).check()
    n = convert(g, CPU).run({"x": x})["n"]
    assert n.shape == () and int(n) == 24


def test_shape_with_start_and_end_is_folded(monkeypatch):
    need("Shape", "Concat")
    counts = count_calls(monkeypatch, "Shape", "Concat")
    x = Value("x", F, (2, 3, 4, 5))
    nodes = (Node("Shape", ("x",), (Value("s", I64, (2,)),), (ir.Attr("start", 2, 1), ir.Attr("end", 2, -1)),
                  name="shape"),
             Node("Concat", ("s", "m1"), (Value("y", I64, (3,)),), (ir.Attr("axis", 2, 0),), name="concat"))
    g = Graph(inputs=(x,), outputs=(nodes[-1].outputs[0],), nodes=nodes,
              weights={"m1": literal(np.array([-1], np.int64))}).check()
    program = convert(g, CPU)
    counts.update(dict.fromkeys(counts, 0))
    out = program.run({"x": rand(2, 3, 4, 5)})
    np.testing.assert_array_equal(out["y"], np.array([3, 4, -1], np.int64))
    assert out["y"].dtype == np.int64 and sum(counts.values()) == 0
    np.testing.assert_array_equal(out["y"], run(make_session(g), {"x": rand(2, 3, 4, 5)})["y"])


@pytest.mark.parametrize("scalar_index", [False, True])
def test_the_shape_of_a_dynamic_input_is_computed_at_each_run(monkeypatch, scalar_index):
    need("Relu", "Shape", "Gather", "Unsqueeze", "Concat", "Reshape")
    counts = count_calls(monkeypatch, "Shape", "Reshape")
    g = shape_arithmetic(("N", 3, 4), scalar_index)
    program = convert(g, CPU)
    assert not program.fallbacks and program.needs_host, "a shape read from the data cannot be captured"
    counts.update(dict.fromkeys(counts, 0))
    for n in (2, 5):
        x = rand(n, 3, 4, seed=n)
        out = program.run({"x": x})
        np.testing.assert_array_equal(out["y"], np.maximum(x, 0).reshape(n, 12))
    assert counts == {"Shape": 2, "Reshape": 2}


def test_nodes_of_constant_inputs_are_folded_and_weights_never_recomputed(monkeypatch):
    need("Relu", "Add")
    counts = count_calls(monkeypatch, "Relu", "Add")
    c = rand(2, 3, seed=1)
    x = Value("x", F, (2, 3))
    nodes = (Node("Relu", ("c",), (Value("k", F, (2, 3)),), name="const_relu"),
             Node("Add", ("x", "k"), (Value("y", F, (2, 3)),), name="add"))
    g = Graph(inputs=(x,), outputs=(nodes[1].outputs[0],), nodes=nodes, weights={"c": literal(c)}).check()
    program = convert(g, CPU)
    assert counts == {"Relu": 1, "Add": 0}, "Relu(c) computed once, at conversion"
    out = program.run({"x": rand(2, 3)})
    np.testing.assert_allclose(out["y"], rand(2, 3) + np.maximum(c, 0), rtol=0, atol=0)
    assert counts == {"Relu": 1, "Add": 1}


# ------------------------------------------------------------------ outputs
def constant_outputs_graph() -> tuple[Graph, np.ndarray]:
    c = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    x = Value("x", F, (2, 3))
    nodes = (Node("Add", ("x", "c"), (Value("y", F, (2, 3)),), name="add"),
             Node("Relu", ("c",), (Value("k", F, (2, 3)),), name="relu"))
    outputs = (nodes[0].outputs[0], nodes[1].outputs[0], Value("c", F, (2, 3)), x)
    return Graph(inputs=(x,), outputs=outputs, nodes=nodes, weights={"c": literal(c)}).check(), c


def test_outputs_that_are_constants_or_inputs_are_returned():
    need("Add", "Relu")
    g, c = constant_outputs_graph()
    program = convert(g, CPU)
    x = rand(2, 3)
    want = run(make_session(g), {"x": x})
    assert set(want) == {"y", "k", "c", "x"}
    out = program.run({"x": x})
    assert list(out) == ["y", "k", "c", "x"]
    for name in want:
        np.testing.assert_array_equal(out[name], want[name], err_msg=name)
        assert out[name].dtype == want[name].dtype
    tensors = program({"x": torch.from_numpy(x)})
    assert set(tensors) == {"y", "k", "c", "x"} and all(isinstance(t, torch.Tensor) for t in tensors.values())
    np.testing.assert_array_equal(tensors["c"].numpy(), c)


def test_what_a_run_returns_is_the_callers_to_change():
    need("Add", "Relu")
    g, c = constant_outputs_graph()
    program = convert(g, CPU)
    x = rand(2, 3)
    first = program.run({"x": x})
    for value in first.values():
        value[...] = 100.0
    np.testing.assert_array_equal(x, rand(2, 3), err_msg="the feed changed with an output")
    again = program.run({"x": rand(2, 3)})
    np.testing.assert_array_equal(again["c"], c)
    np.testing.assert_array_equal(again["k"], np.maximum(c, 0))
    np.testing.assert_array_equal(again["y"], rand(2, 3) + c)


def test_to_torch_and_to_numpy_keep_types_and_read_bfloat16_as_float32():
    t = to_torch(np.arange(4, dtype=np.int32)[::2], CPU)
    assert t.dtype == torch.int32 and t.tolist() == [0, 2]
    assert to_torch(np.zeros((0, 2), bool), CPU).shape == (0, 2)
    b = to_numpy(torch.tensor([1.5, 2.0], dtype=torch.bfloat16))
    assert b.dtype == np.float32 and b.tolist() == [1.5, 2.0]
    with pytest.raises(Unsupported, match="numpy type"):
        to_torch(np.array(["a"]), CPU)


def test_to_torch_keeps_a_scalar_0_d_and_copies():
    a = np.array([1.0, 2.0], np.float32)
    t = to_torch(a, CPU)
    a[0] = 7.0
    assert t.tolist() == [1.0, 2.0]
    assert to_torch(np.array(3.5, np.float32), CPU).shape == ()


# ------------------------------------------------------------------ onnxruntime islands
def island_model() -> Graph:
    """x -> Relu -> Binarizer -> Scaler -> Add(c) -> Relu: two ai.onnx.ml ops in a row, which gspo
    keeps as opaque nodes (never in the torch table)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Binarizer", ["r"], ["b"], domain="ai.onnx.ml", threshold=0.5),
             helper.make_node("Scaler", ["b"], ["s"], domain="ai.onnx.ml", offset=[0.25], scale=[2.0]),
             helper.make_node("Add", ["s", "c"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    graph = helper.make_graph(nodes, "island", [helper.make_tensor_value_info("x", F, [2, 3])],
                              [helper.make_tensor_value_info("y", F, [2, 3])],
                              initializer=[helper.make_tensor("c", F, [3], [-1.0, 0.0, 1.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 8
    return ir.load_bytes(model.SerializeToString())


def test_an_island_of_two_unsupported_nodes_is_one_onnxruntime_session(monkeypatch):
    need("Relu", "Add")
    g = island_model()
    made = []
    real = onnxruntime.InferenceSession

    def counted(model, *args, **kwargs):
        session = real(model, *args, **kwargs)
        made.append(session)
        return session

    monkeypatch.setattr(onnxruntime, "InferenceSession", counted)
    program = convert(g, CPU)
    monkeypatch.setattr(onnxruntime, "InferenceSession", real)
    assert [f.op_type for f in program.fallbacks] == ["Binarizer", "Scaler"]
    assert all(isinstance(f, Fallback) and f.reason and f.op_type in str(f) for f in program.fallbacks)
    assert len(made) == 1, "the two nodes in a row make one island"
    assert [o.name for o in made[0].get_outputs()] == ["s"] and [i.name for i in made[0].get_inputs()] == ["r"]
    assert program.needs_host
    x = rand(2, 3)
    np.testing.assert_allclose(program.run({"x": x})["y"], run(make_session(g), {"x": x})["y"], rtol=1e-6)


def test_an_op_missing_from_the_table_says_so():
    absent = next((n for n in ("MeanVarianceNormalization", "Det", "ReverseSequence") if ("", n) not in ops.OPS), None)
    if absent != "MeanVarianceNormalization":
        pytest.skip("the op table has MeanVarianceNormalization")
    nodes = [helper.make_node("MeanVarianceNormalization", ["x"], ["y"])]
    graph = helper.make_graph(nodes, "mvn", [helper.make_tensor_value_info("x", F, [1, 2, 3, 3])],
                              [helper.make_tensor_value_info("y", F, [1, 2, 3, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    g = ir.load_bytes(model.SerializeToString())
    program = convert(g, CPU)
    (fallback,) = program.fallbacks
    assert fallback.op_type == "MeanVarianceNormalization" and "not in the torch runtime's op table" in fallback.reason
    x = rand(1, 2, 3, 3)
    np.testing.assert_allclose(program.run({"x": x})["y"], run(make_session(g), {"x": x})["y"], rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ strict
def test_strict_mode_names_the_node_whose_output_breaks_its_declared_dtype():
    need("Relu")
    x = Value("x", F, (2, 3))
    wrong = Node("Relu", ("x",), (Value("y", TensorProto.DOUBLE, (2, 3)),), name="the_relu")
    g = Graph(inputs=(x,), outputs=wrong.outputs, nodes=(wrong,), weights={}).check()
    with pytest.raises(AssertionError, match=r"Relu 'the_relu': output 'y' is torch.float32, declared torch.float64"):
        convert(g, CPU, strict=True).run({"x": rand(2, 3)})
    assert convert(g, CPU).run({"x": rand(2, 3)})["y"].dtype == np.float32, "not checked unless strict"


def test_strict_mode_checks_a_declared_static_shape():
    need("Relu")
    x = Value("x", F, (2, 3))
    wrong = Node("Relu", ("x",), (Value("y", F, (3, 2)),), name="the_relu")
    g = Graph(inputs=(x,), outputs=wrong.outputs, nodes=(wrong,), weights={}).check()
    with pytest.raises(AssertionError, match=r"has shape \(2, 3\), declared \(3, 2\)"):
        convert(g, CPU, strict=True).run({"x": rand(2, 3)})


# ------------------------------------------------------------------ types torch cannot compute
def typed_model(nodes, inputs, outputs) -> Graph:
    """A graph of ``nodes`` over ``inputs``/``outputs`` given as (name, element type, shape)."""
    graph = helper.make_graph(nodes, "typed", [helper.make_tensor_value_info(*v) for v in inputs],
                              [helper.make_tensor_value_info(*v) for v in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    return ir.load_bytes(model.SerializeToString())


def test_wide_unsigned_arithmetic_falls_back_at_conversion_and_moves_stay_on_torch():
    U32 = TensorProto.UINT32
    g = typed_model([helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
                     helper.make_node("Add", ["t", "t"], ["a"]),
                     helper.make_node("Greater", ["a", "t"], ["y"])],
                    [("x", U32, [2, 3])], [("y", TensorProto.BOOL, [3, 2])])
    program = convert(g, CPU, strict=True)
    assert [(f.op_type, f.reason) for f in program.fallbacks] == [
        ("Add", "Add: torch has no CPU kernels for Add on UINT32"),
        ("Greater", "Greater: torch has no CPU kernels for Greater on UINT32")]
    x = np.array([[0, 1, 2], [4294967295, 7, 2147483648]], np.uint32)
    want = (x.T + x.T) > x.T  # wraps around, as onnxruntime
    np.testing.assert_array_equal(program.run({"x": x})["y"], want)


def test_a_string_value_falls_back_at_conversion_and_the_rest_runs_on_torch():
    S, B = TensorProto.STRING, TensorProto.BOOL
    g = typed_model([helper.make_node("Equal", ["a", "b"], ["e"]), helper.make_node("Not", ["e"], ["y"])],
                    [("a", S, [3]), ("b", S, [3])], [("y", B, [3])])
    program = convert(g, CPU, strict=True)
    assert [f.reason for f in program.fallbacks] == ["Equal: STRING tensors have no torch dtype here"]
    out = program.run({"a": np.array(["x", "y", "z"], object), "b": np.array(["x", "q", "z"], object)})
    assert out["y"].tolist() == [False, True, False]


def test_bfloat16_inputs_run_on_torch():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    BF = TensorProto.BFLOAT16
    g = typed_model([helper.make_node("Relu", ["x"], ["y"])], [("x", BF, [3])], [("y", BF, [3])])
    program = convert(g, CPU, strict=True)
    assert not program.fallbacks
    y = program.run({"x": np.array([-1.5, 0.0, 2.5], ml_dtypes.bfloat16)})["y"]
    assert y.dtype == np.float32 and y.tolist() == [0.0, 0.0, 2.5]  # bfloat16 read back as float32


def test_an_island_onnxruntime_cannot_be_handed_is_refused_at_conversion():
    BF = TensorProto.BFLOAT16
    g = typed_model([helper.make_node("Unique", ["x"], ["y"], sorted=1)], [("x", BF, [4])], [("y", BF, None)])
    with pytest.raises(BackendError, match="cannot exchange with onnxruntime its BFLOAT16 value 'x'"):
        convert(g, CPU)
