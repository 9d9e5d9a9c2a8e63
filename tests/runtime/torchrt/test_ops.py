"""The torch runtime's op table against onnxruntime's CPU provider, one op per graph.

Each case is a one-node ONNX model: run by onnxruntime (CPU provider) and by
:func:`gspo.runtime.torchrt.convert.convert` on torch's CPU device, with no fallback allowed.
Floats agree within gspo's criterion (rtol 1e-3, atol 1e-4), integers and booleans exactly;
dtypes and shapes exactly. Inputs wrapped in :class:`K` are initializers (known when the
model is converted, folded there); the others are fed at run time, so that shape-like inputs
are read from the data too. This module holds the harness, the zoo's ops and the coverage
lists; ``test_ops_more.py`` the rest of the table.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

torch = pytest.importorskip("torch")

import onnxruntime as ort  # noqa: E402

from gspo.ir import Node, Value, serialize  # noqa: E402
from gspo.ir.onnx_io import from_model  # noqa: E402
from gspo.ir.protos import attr_from_proto  # noqa: E402
from gspo.runtime.torchrt.convert import convert  # noqa: E402
from gspo.runtime.torchrt.ops import OPS, lookup  # noqa: E402
from gspo.runtime.torchrt.registry import Call, Unsupported  # noqa: E402
from gspo.zoo import MODELS, build  # noqa: E402

CPU = torch.device("cpu")


@dataclass(frozen=True)
class K:
    """An input known when the model is converted (an initializer)."""

    array: np.ndarray


@dataclass
class Case:
    """One node: its op, inputs (arrays fed at run time, :class:`K` initializers, ``None``
    skipped), attributes, opset and outputs (``""`` for a skipped one)."""

    op: str
    inputs: list
    attrs: dict = field(default_factory=dict)
    opset: int = 17
    outputs: int | list[str] = 1
    domain: str = ""
    name: str = ""
    strict: bool = True  # the converter checks each output against the shape the graph declares

    @property
    def id(self) -> str:
        return f"{self.op}-{self.name}" if self.name else self.op


def case(op: str, *inputs, opset: int = 17, outputs: int | list[str] = 1, domain: str = "", name: str = "",
         strict: bool = True, **attrs) -> Case:
    return Case(op, list(inputs), attrs, opset, outputs, domain, name, strict)


def rand(*shape, seed: int = 0, dtype=np.float32, low: float | None = None) -> np.ndarray:
    """Standard normal values (``low``: uniform in [low, low + 2])."""
    rng = np.random.default_rng(seed + 7 * len(shape))
    a = rng.standard_normal(shape) if low is None else rng.uniform(low, low + 2, shape)
    return np.asarray(a, dtype=dtype)


def ints(values, dtype=np.int64) -> np.ndarray:
    return np.asarray(values, dtype=dtype)


def model_of(c: Case) -> onnx.ModelProto:
    names, infos, inits = [], [], []
    for i, a in enumerate(c.inputs):
        if a is None:
            names.append("")
            continue
        name = f"in{i}"
        names.append(name)
        if isinstance(a, K):
            inits.append(numpy_helper.from_array(np.asarray(a.array), name))
        else:
            a = np.asarray(a)
            elem = helper.np_dtype_to_tensor_dtype(a.dtype)
            infos.append(helper.make_tensor_value_info(name, elem, a.shape))
    outs = [f"out{j}" for j in range(c.outputs)] if isinstance(c.outputs, int) else c.outputs
    node = helper.make_node(c.op, names, outs, domain=c.domain, **c.attrs)
    graph = helper.make_graph([node], "g", infos, [helper.make_value_info(o, onnx.TypeProto()) for o in outs if o],
                              initializer=inits)
    opsets = [helper.make_opsetid("", c.opset)] + ([helper.make_opsetid(c.domain, 1)] if c.domain else [])
    m = helper.make_model(graph, opset_imports=opsets)
    m.ir_version = 8
    m = onnx.shape_inference.infer_shapes(m)
    first = next((a.array if isinstance(a, K) else a for a in c.inputs if a is not None), None)
    for o in m.graph.output:  # an output onnx cannot infer (a function op's): typed as input 0
        if not o.type.HasField("tensor_type") and first is not None:
            o.type.CopyFrom(helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(np.asarray(first).dtype), None))
    return m


def feeds_of(c: Case) -> dict[str, np.ndarray]:
    return {f"in{i}": np.asarray(a) for i, a in enumerate(c.inputs) if a is not None and not isinstance(a, K)}


def ort_run(data: bytes, feeds) -> dict[str, np.ndarray]:
    s = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


def assert_same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, onnxruntime {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, onnxruntime {want.shape}"
    if want.dtype.kind == "f":
        tol = dict(rtol=1e-3, atol=1e-4) if want.dtype.itemsize >= 4 else dict(rtol=1e-2, atol=2e-3)
        np.testing.assert_allclose(got, want, err_msg=what, **tol)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def check(c: Case, device: torch.device = CPU) -> dict[str, np.ndarray]:
    """Run ``c`` on onnxruntime and through :func:`convert` on ``device``; compare."""
    graph = from_model(model_of(c))
    want = ort_run(serialize(graph), feeds_of(c))
    program = convert(graph, device, strict=c.strict)
    assert not program.fallbacks, [str(f) for f in program.fallbacks]
    got = program.run(feeds_of(c))
    assert set(got) == set(want)
    for name in want:
        assert_same(got[name], want[name], f"{c.id} {name}")
    return got


def check_direct(c: Case, out_types: list[int] | None = None, opset_of_domain: int = 1) -> None:
    """Run ``c`` on onnxruntime and straight through its op function (for nodes gspo keeps
    opaque, such as com.microsoft's, and for ops the converter folds, such as Shape)."""
    m = model_of(c)
    if out_types is not None:
        del m.graph.output[:]
        m.graph.output.extend(helper.make_tensor_value_info(o, t, None)
                              for o, t in zip(m.graph.node[0].output, out_types) if o)
    want = ort_run(m.SerializeToString(), feeds_of(c))
    proto = m.graph.node[0]
    types = out_types or [o.type.tensor_type.elem_type for o in m.graph.output]
    outs = tuple(Value(o, t if o else 0, None) for o, t in zip(proto.output, types))
    node = Node(proto.op_type, tuple(proto.input), outs, tuple(attr_from_proto(a) for a in proto.attribute),
                domain=proto.domain)
    consts = tuple(np.asarray(a.array) if isinstance(a, K) else None for a in c.inputs)
    call = Call(node, consts, c.opset, CPU)
    xs = [None if a is None else torch.from_numpy(np.array(a.array if isinstance(a, K) else a, ndmin=0))
          for a in c.inputs]
    got = lookup(call)(call, xs)
    for j, name in enumerate(proto.output):
        if name:
            assert_same(got[j].numpy(), want[name], f"{c.id} {name}")


# ---------------------------------------------------------------- the zoo's ops
X4 = rand(2, 3, 7, 6)
W33 = K(rand(4, 3, 3, 3, seed=1))

ZOO_CASES = [
    case("Add", rand(2, 3, 4), rand(4, seed=1), name="broadcast"),
    case("Add", rand(2, 1, 4), rand(3, 1, seed=1), name="both"),
    case("Add", ints([[1, -2], [3, 4]], np.int32), ints([7, -9], np.int32), name="int32"),
    case("Add", rand(3, 4, dtype=np.float16), rand(4, seed=1, dtype=np.float16), name="fp16"),
    case("Mul", rand(2, 3, 4), K(rand(3, 1, seed=1)), name="const"),
    case("Div", rand(2, 3), rand(3, seed=1, low=0.5), name="float"),
    case("Div", ints([7, -7, 7, -7, 0], np.int32), ints([2, 2, -2, -2, 3], np.int32), name="int-trunc"),
    case("Div", ints([7, -9, 100]), ints([-4], np.int64), name="int64"),
    case("Relu", rand(3, 5)),
    case("Relu", ints([-3, 0, 4], np.int32), name="int"),
    case("Sigmoid", rand(3, 5)),
    case("Tanh", rand(3, 5)),
    case("Erf", rand(3, 5)),
    case("Concat", rand(2, 3), rand(2, 5, seed=1), axis=-1, name="last"),
    case("Concat", rand(1, 3), K(rand(2, 3, seed=1)), rand(3, 3, seed=2), axis=0, name="three"),
    case("Flatten", X4, name="default"),
    case("Flatten", X4, axis=0, name="axis0"),
    case("Flatten", X4, axis=-1, name="axis-1"),
    case("Flatten", X4, axis=3, name="axis3"),
    case("Transpose", X4, name="reverse"),
    case("Transpose", X4, perm=[0, 2, 3, 1], name="perm"),
    case("MatMul", rand(3, 4), rand(4, 5, seed=1)),
    case("MatMul", rand(2, 1, 3, 4), rand(5, 4, 2, seed=1), name="batched"),
    case("MatMul", rand(4), rand(2, 4, 3, seed=1), name="vector-matrix"),
    case("MatMul", rand(2, 3, 4), rand(4, seed=1), name="matrix-vector"),
    case("MatMul", rand(3, 4, dtype=np.float16), rand(4, 5, seed=1, dtype=np.float16), name="fp16"),
    case("Gemm", rand(3, 4), K(rand(5, 4, seed=1)), K(rand(5, seed=2)), transB=1, name="linear"),
    case("Gemm", rand(4, 3), rand(4, 5, seed=1), rand(3, 5, seed=2), transA=1, alpha=0.5, beta=2.0, name="alpha-beta"),
    case("Gemm", rand(3, 4), rand(5, 4, seed=1), rand(1, 5, seed=2), transB=1, alpha=2.0, name="row-bias"),
    case("Gemm", rand(3, 4), rand(4, 5, seed=1), rand(3, 1, seed=2), name="column-bias"),
    case("Gemm", rand(3, 4), rand(4, 5, seed=1), K(np.float32(0.5)), name="scalar-bias"),
    case("Gemm", rand(4, 3), rand(5, 4, seed=1), transA=1, transB=1, alpha=3.0, name="no-bias"),
    case("Gemm", rand(3, 4, dtype=np.float16), K(rand(5, 4, seed=1, dtype=np.float16)),
         K(rand(5, seed=2, dtype=np.float16)), transB=1, name="fp16"),
    case("Gather", rand(5, 4), K(ints(2)), name="scalar"),
    case("Gather", rand(5, 4), K(ints(-1)), name="scalar-negative"),
    case("Gather", rand(5, 4), ints([[0, -1], [3, -5]]), name="negative"),
    case("Gather", rand(2, 5, 4), K(ints([4, 0, 4], np.int32)), axis=1, name="axis1"),
    case("Gather", rand(2, 5, 4), ints([1, -2]), axis=-1, name="axis-1"),
    case("GlobalAveragePool", X4),
    case("GlobalAveragePool", rand(2, 3, 5), name="1d"),
    case("Dropout", rand(3, 4), name="plain"),
    case("Dropout", rand(3, 4), outputs=2, name="mask"),
    case("Dropout", rand(3, 4), K(np.float32(0.3)), K(np.bool_(False)), outputs=2, name="ratio-training-off"),
    case("Dropout", rand(3, 4), opset=10, name="opset10"),
    case("BatchNormalization", X4, K(rand(3, seed=1)), K(rand(3, seed=2)), K(rand(3, seed=3)),
         K(rand(3, seed=4, low=0.5)), epsilon=1e-3),
    case("BatchNormalization", rand(4, 3), K(rand(3, seed=1)), K(rand(3, seed=2)), K(rand(3, seed=3)),
         K(rand(3, seed=4, low=0.5)), name="2d"),
    case("BatchNormalization", X4.astype(np.float16), *[K(rand(3, seed=i, low=0.5, dtype=np.float16)) for i in range(4)],
         name="fp16"),
    case("BatchNormalization", X4, rand(3, seed=1), rand(3, seed=2), rand(3, seed=3),
         rand(3, seed=4, low=0.5), opset=9, name="opset9-fed"),
    case("LayerNormalization", rand(2, 3, 8), K(rand(8, seed=1)), K(rand(8, seed=2)), epsilon=1e-5),
    case("LayerNormalization", rand(2, 3, 4), K(rand(3, 4, seed=1)), axis=1, name="axis1-no-bias"),
    case("LayerNormalization", rand(2, 3, 4), rand(3, 4, seed=1), rand(3, 4, seed=2), axis=-2, name="axis-2"),
    case("LayerNormalization", rand(2, 8, dtype=np.float16), K(rand(8, seed=1, dtype=np.float16)),
         K(rand(8, seed=2, dtype=np.float16)), name="fp16"),
    case("Reshape", X4, K(ints([2, -1])), name="infer"),
    case("Reshape", X4, K(ints([0, 0, -1])), name="zero-copies"),
    case("Reshape", X4, ints([6, 0, 14]), name="fed"),
    case("Reshape", rand(0, 3), K(ints([3, 0])), allowzero=1, opset=14, name="allowzero"),
    case("Softmax", rand(2, 3, 4), name="default-axis"),
    case("Softmax", rand(2, 3, 4), axis=1, name="axis1"),
    case("Softmax", rand(2, 3, 4), opset=11, name="opset11-coerced"),
    case("Softmax", rand(2, 3, 4), axis=-1, opset=11, name="opset11-axis-1"),
    case("Softmax", rand(2, 3, 4), axis=0, opset=12, name="opset12-axis0"),
]


def _pool_cases(op: str) -> list[Case]:
    extra = {"count_include_pad": 1} if op == "AveragePool" else {}
    return [
        case(op, X4, kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="symmetric"),
        case(op, X4, kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="symmetric-include", **extra),
        case(op, X4, kernel_shape=[3, 3], strides=[2, 2], pads=[0, 1, 1, 1], name="asymmetric"),
        case(op, X4, kernel_shape=[3, 3], strides=[2, 2], pads=[0, 1, 1, 1], name="asymmetric-include", **extra),
        case(op, X4, kernel_shape=[2, 3], strides=[2, 2], ceil_mode=1, name="ceil"),
        case(op, X4, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1, name="ceil-pads"),
        case(op, X4, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 0, 1], ceil_mode=1, name="ceil-asymmetric"),
        case(op, X4, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 0, 1], ceil_mode=1,
             name="ceil-asymmetric-include", **extra),
        # a window that would start in the end padding is dropped (onnxruntime, torch; not
        # ONNX's shape inference, hence not strict)
        case(op, X4, kernel_shape=[3, 2], strides=[3, 2], pads=[2, 0, 1, 1], ceil_mode=1, strict=False,
             name="ceil-drops-window", **extra),
        case(op, X4, kernel_shape=[3, 3], pads=[2, 2, 2, 2], name="pads-over-half-kernel"),
        case(op, X4, kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER", name="same-upper"),
        case(op, X4, kernel_shape=[2, 2], strides=[1, 1], auto_pad="SAME_LOWER", name="same-lower"),
        case(op, X4, kernel_shape=[3, 3], auto_pad="VALID", name="valid"),
        case(op, rand(2, 3, 9), kernel_shape=[3], strides=[2], pads=[1, 0], name="1d"),
        case(op, rand(1, 2, 4, 5, 6), kernel_shape=[2, 3, 2], pads=[0, 1, 1, 1, 1, 0], name="3d"),
    ]


def _conv_cases() -> list[Case]:
    return [
        case("Conv", X4, W33, K(rand(4, seed=2)), pads=[1, 1, 1, 1], name="bias"),
        case("Conv", X4, W33, name="no-pads-no-bias"),
        case("Conv", X4, W33, pads=[0, 1, 2, 1], strides=[2, 1], name="asymmetric"),
        case("Conv", X4, W33, dilations=[2, 1], strides=[1, 2], pads=[2, 1, 2, 1], name="dilated"),
        case("Conv", X4, W33, auto_pad="SAME_UPPER", strides=[2, 2], name="same-upper"),
        case("Conv", X4, K(rand(4, 3, 2, 2, seed=1)), auto_pad="SAME_LOWER", name="same-lower"),
        case("Conv", X4, W33, auto_pad="VALID", strides=[2, 2], name="valid"),
        case("Conv", rand(1, 4, 5, 5), K(rand(6, 2, 3, 3, seed=1)), K(rand(6, seed=2)), group=2, pads=[1, 1, 1, 1],
             name="group"),
        case("Conv", rand(1, 4, 5, 5), K(rand(4, 1, 3, 3, seed=1)), group=4, pads=[1, 0, 1, 0], name="depthwise"),
        case("Conv", rand(2, 3, 9), K(rand(4, 3, 3, seed=1)), K(rand(4, seed=2)), pads=[1, 2], strides=[2], name="1d"),
        case("Conv", rand(1, 2, 4, 5, 3), K(rand(3, 2, 2, 3, 2, seed=1)), pads=[1, 0, 1, 0, 1, 1], name="3d"),
        case("Conv", X4, rand(4, 3, 3, 3, seed=1), rand(4, seed=2), pads=[1, 1, 1, 1], name="fed-weights"),
        case("Conv", X4.astype(np.float16), K(rand(4, 3, 3, 3, seed=1, dtype=np.float16)), pads=[0, 1, 1, 0],
             name="fp16"),
    ]


def _slice_cases() -> list[Case]:
    big, low = 2**62, -(2**63) + 1
    x = rand(5, 6, 4)
    return [
        case("Slice", x, K(ints([1, 0])), K(ints([4, 5])), K(ints([0, 1])), name="basic"),
        case("Slice", x, K(ints([-3])), K(ints([big])), K(ints([1])), name="negative-start-large-end"),
        case("Slice", x, K(ints([-1])), K(ints([low])), K(ints([0])), K(ints([-1])), name="reverse"),
        case("Slice", x, K(ints([4, 5])), K(ints([0, -7])), K(ints([0, -2])), K(ints([-2, -3])), name="negative-steps"),
        case("Slice", x, K(ints([0, 1])), K(ints([6, 3])), K(ints([-1, 0])), K(ints([2, 2])), name="steps"),
        case("Slice", x, ints([1]), ints([-1]), ints([2]), ints([2]), name="fed"),
        case("Slice", x, K(ints([3])), K(ints([1])), name="empty"),
        case("Slice", x, K(ints([10])), K(ints([-10])), K(ints([1])), K(ints([-1])), name="clamped-reverse"),
        case("Slice", x, starts=[1, -2], ends=[3, 100], axes=[0, 2], opset=9, name="opset9"),
    ]


def _pad_cases() -> list[Case]:
    x = rand(2, 3, 4, 5)
    return [
        case("Pad", x, K(ints([0, 0, 1, 2, 0, 0, 2, 1])), K(np.float32(1.5)), name="constant"),
        case("Pad", x, K(ints([0, 1, -1, 0, 1, 0, 0, -2])), name="negative"),
        case("Pad", x, ints([0, 0, 1, 2, 0, 0, 2, 1]), np.array(-2.0, np.float32), name="fed"),
        case("Pad", x, K(ints([0, 0, 2, 3, 0, 0, 1, 4])), mode="reflect", name="reflect"),
        case("Pad", x, K(ints([1, 0, 2, 3, 0, 2, 1, 4])), mode="edge", name="edge"),
        case("Pad", x, K(ints([0, 0, -1, 2, 0, 0, 2, -1])), mode="edge", name="edge-negative"),
        case("Pad", x, K(ints([0, 0, 2, 3, 0, 0, 1, 4])), mode="wrap", opset=19, name="wrap"),
        case("Pad", x, K(ints([1, 2, 3, 4])), None, K(ints([-1, 1])), opset=18, name="axes"),
        case("Pad", x, K(ints([1, 1, 2, 2])), K(np.float32(3.0)), K(ints([2, 3])), mode="reflect", opset=18,
             name="axes-reflect"),
        case("Pad", x, pads=[0, 0, 1, 2, 0, 0, 2, 1], value=0.5, opset=10, name="opset10"),
        case("Pad", ints([[1, 2], [3, 4]], np.int32), K(ints([1, 1, 0, 2])), K(ints(7, np.int32)), name="int"),
    ]


def _split_cases() -> list[Case]:
    x = rand(6, 5)
    return [
        case("Split", x, outputs=3, name="equal"),
        case("Split", x, K(ints([2, 3])), axis=-1, outputs=2, name="sizes"),
        case("Split", x, ints([1, 4, 1]), outputs=3, name="fed-sizes"),
        case("Split", x, split=[4, 2], outputs=2, opset=11, name="opset11-attr"),
        case("Split", rand(7, 2), num_outputs=3, outputs=3, opset=18, name="num-outputs-uneven"),
        case("Split", x, axis=1, num_outputs=5, outputs=5, opset=18, name="num-outputs"),
    ]


CONV_POOL_CASES = _pool_cases("MaxPool") + _pool_cases("AveragePool") + _conv_cases() + [
    case("MaxPool", X4, kernel_shape=[2, 2], dilations=[2, 1], pads=[1, 0, 1, 0], name="dilated"),
    case("MaxPool", X4, kernel_shape=[3, 3], dilations=[1, 2], pads=[0, 0, 1, 2], ceil_mode=1,
         name="dilated-asymmetric-ceil"),
    case("AveragePool", X4, kernel_shape=[3, 3], strides=[2, 2], opset=10, name="opset10"),
    case("MaxPool", X4.astype(np.float16), kernel_shape=[2, 2], pads=[0, 0, 1, 1], name="fp16"),
    case("AveragePool", X4.astype(np.float16), kernel_shape=[2, 2], pads=[0, 0, 1, 1], name="fp16"),
    case("AveragePool", X4, kernel_shape=[2, 2], ceil_mode=1, strides=[2, 2], opset=19, name="opset19"),
]

ALL_ZOO = ZOO_CASES + CONV_POOL_CASES + _slice_cases() + _pad_cases() + _split_cases()


@pytest.mark.parametrize("c", ALL_ZOO, ids=[c.id for c in ALL_ZOO])
def test_zoo_op(c: Case):
    check(c)


def test_zoo_ops_are_covered():
    needed = {"Split"}
    for name in MODELS:
        needed |= {(n.op_type) for n in build(name, "tiny").nodes}
    missing = sorted(op for op in needed if ("", op) not in OPS)
    assert not missing
    for name in MODELS:
        g = build(name, "tiny")
        for node in g.nodes:
            consts = tuple(np.asarray(g.weights[i].evaluate(g.store)) if i in g.weights else None for i in node.inputs)
            lookup(Call(node, consts, g.opset, CPU))  # raises Unsupported if a check refuses it
    tested = {c.op for c in ALL_ZOO}
    assert needed <= tested, sorted(needed - tested)


# ---------------------------------------------------------------- real models' ops
#: The ops real exports use: torch's TorchScript and dynamo exporters on ResNet, MobileNetV3,
#: EfficientNet, ConvNeXt, Swin, ViT, BERT, DistilBERT, GPT-2, Llama/Qwen2 decoders with a KV
#: cache, Whisper, YOLO, DETR, CLIP and a diffusion VAE; QDQ-quantized and dynamically
#: quantized models (onnxruntime's quantizer), fp16 models, and BERT as onnxruntime's
#: transformer optimizer fuses it ("com.microsoft." ops).
CORPUS_OPS = [
    # convolutional networks
    "Conv", "ConvTranspose", "BatchNormalization", "Relu", "MaxPool", "AveragePool", "GlobalAveragePool",
    "GlobalMaxPool", "Flatten", "Gemm", "Add", "Mul", "Sigmoid", "HardSigmoid", "HardSwish", "Clip", "Dropout",
    "ReduceMean", "Concat", "Split", "Resize", "Upsample", "Pad", "LeakyRelu", "Softplus", "Mish",
    "InstanceNormalization", "GroupNormalization", "DepthToSpace",
    # transformers and their shape arithmetic
    "MatMul", "Softmax", "LogSoftmax", "LayerNormalization", "Gelu", "Erf", "Tanh", "Pow", "Sqrt", "Reciprocal",
    "Div", "Sub", "Neg", "Exp", "Log", "Abs", "Sin", "Cos", "Floor", "Ceil", "Round", "Max", "Min", "Mod",
    "Transpose", "Reshape", "Squeeze", "Unsqueeze", "Shape", "Size", "Gather", "GatherElements", "GatherND",
    "Slice", "Expand", "Tile", "Range", "ConstantOfShape", "Constant", "Identity", "Cast", "CastLike", "Where",
    "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or", "IsNaN", "IsInf", "Trilu",
    "CumSum", "ScatterND", "ScatterElements", "Einsum", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",
    "ReduceL2", "ArgMax", "ArgMin", "TopK", "NonZero", "OneHot", "Sign", "Sum", "Mean",
    # opset 23's fused ops (dynamo exporter)
    "RMSNormalization", "RotaryEmbedding", "Attention",
    # detection heads and control flow
    "NonMaxSuppression", "RoiAlign", "If", "Loop",
    # recurrent networks
    "LSTM", "GRU", "RNN",
    # quantized models
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger",
    "QLinearConv", "QLinearMatMul",
    # onnxruntime's fused ops
    "com.microsoft.Gelu", "com.microsoft.FastGelu", "com.microsoft.BiasGelu", "com.microsoft.QuickGelu",
    "com.microsoft.FusedMatMul", "com.microsoft.SkipLayerNormalization",
    "com.microsoft.SkipSimplifiedLayerNormalization", "SimplifiedLayerNormalization",
    "com.microsoft.Attention", "com.microsoft.MultiHeadAttention", "com.microsoft.EmbedLayerNormalization",
    "com.microsoft.BiasAdd", "com.microsoft.BiasSoftmax", "com.microsoft.RotaryEmbedding",
    "com.microsoft.GroupQueryAttention", "com.microsoft.DynamicQuantizeMatMul", "com.microsoft.MatMulIntegerToFloat",
    "com.microsoft.QOrderedMatMul",
]

#: Corpus ops the table leaves to onnxruntime's CPU provider, and why.
RUN_ON_ORT = {
    "If": "control flow with subgraphs (gspo keeps the node opaque)",
    "Loop": "control flow with subgraphs (gspo keeps the node opaque)",
    "NonMaxSuppression": "data-dependent box selection; torch has no NMS of its own (torchvision's orders ties "
                         "differently)",
    "RoiAlign": "torch has no RoiAlign of its own (torchvision's samples differently from onnxruntime's)",
    "QLinearConv": "requantization of onnxruntime's fixed-point kernels is not reproduced bit for bit",
    "QLinearMatMul": "requantization of onnxruntime's fixed-point kernels is not reproduced bit for bit",
    "com.microsoft.Attention": "onnxruntime's fused attention (packed QKV, mask formats) is not implemented",
    "com.microsoft.MultiHeadAttention": "onnxruntime's fused attention is not implemented",
    "com.microsoft.GroupQueryAttention": "onnxruntime's fused attention with its KV cache is not implemented",
    "com.microsoft.EmbedLayerNormalization": "onnxruntime's fused embedding (mask index output) is not implemented",
    "com.microsoft.BiasAdd": "not implemented (rare: the transformer optimizer's diffusion UNet fusion)",
    "com.microsoft.BiasSoftmax": "not implemented (rare)",
    "com.microsoft.RotaryEmbedding": "onnxruntime's rotary embedding (position ids, interleaving) is not implemented",
    "com.microsoft.DynamicQuantizeMatMul": "onnxruntime's quantized kernels are not reproduced bit for bit",
    "com.microsoft.MatMulIntegerToFloat": "onnxruntime's quantized kernels are not reproduced bit for bit",
    "com.microsoft.QOrderedMatMul": "CUDA-only onnxruntime op with its own memory order",
}


def _key(name: str) -> tuple[str, str]:
    return ("com.microsoft", name.rsplit(".", 1)[1]) if name.startswith("com.microsoft.") else ("", name)


def test_corpus_ops_are_run_or_explained():
    unexplained = [op for op in CORPUS_OPS if _key(op) not in OPS and op not in RUN_ON_ORT]
    assert not unexplained, f"neither in the op table nor in RUN_ON_ORT: {unexplained}"
    stale = [op for op in RUN_ON_ORT if _key(op) in OPS]
    assert not stale, f"in the op table now, still listed in RUN_ON_ORT: {stale}"
    assert set(RUN_ON_ORT) <= set(CORPUS_OPS)


def test_opaque_nodes_with_subgraphs_or_no_entry_are_refused():
    attr = helper.make_attribute("body", helper.make_graph([], "b", [], []))
    proto = helper.make_node("If", ["c"], ["y"], then_branch=attr.g, else_branch=attr.g)
    node = Node("If", ("c",), (Value("y", 1, None),), opaque=proto.SerializeToString())
    with pytest.raises(Unsupported, match="subgraph"):
        lookup(Call(node, (None,), 17, CPU))
    proto = helper.make_node("Attention", ["x"], ["y"], domain="com.microsoft", num_heads=2)
    node = Node("Attention", ("x",), (Value("y", 1, None),), domain="com.microsoft", opaque=proto.SerializeToString())
    with pytest.raises(Unsupported, match="outside gspo's op set"):
        lookup(Call(node, (None,), 17, CPU))
    proto = helper.make_node("QuickGelu", ["x"], ["y"], domain="com.microsoft", alpha=1.5)
    node = Node("QuickGelu", ("x",), (Value("y", 1, None),), domain="com.microsoft", opaque=proto.SerializeToString())
    call = Call(node, (None,), 17, CPU)
    assert lookup(call) is OPS[("com.microsoft", "QuickGelu")][0] and call.attr("alpha") == 1.5


def test_zoo_models_run_like_onnxruntime():
    """Two whole tiny zoo models, converted, against onnxruntime."""
    for name in ("squeezenet", "bert"):
        g = build(name, "tiny")
        rng = np.random.default_rng(0)
        feeds = {}
        for v in g.inputs:
            if v.dtype == onnx.TensorProto.INT64:
                feeds[v.name] = rng.integers(0, 4, v.shape).astype(np.int64)
            else:
                feeds[v.name] = rng.standard_normal(v.shape).astype(np.float32)
        want = ort_run(serialize(g), feeds)
        program = convert(g, CPU, strict=True)
        assert not program.fallbacks
        got = program.run(feeds)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-3, atol=1e-4, err_msg=f"{name} {k}")


REFUSED = [
    case("MaxPool", X4, kernel_shape=[2, 2], outputs=2, name="indices"),
    case("MaxPool", X4, kernel_shape=[2, 2], storage_order=1, name="storage-order"),
    case("AveragePool", X4, kernel_shape=[2, 2], dilations=[2, 2], opset=19, name="dilations"),
    case("LayerNormalization", rand(2, 4), K(rand(4)), outputs=2, name="mean"),
    case("Dropout", rand(3, 4), K(np.float32(0.3)), K(np.bool_(True)), opset=13, name="training"),
    case("Dropout", rand(3, 4), K(np.float32(0.3)), np.bool_(False), opset=13, name="training-unknown"),
    case("Dropout", rand(3, 4), outputs=2, opset=10, name="mask-opset10"),
    case("BatchNormalization", X4, *[K(rand(3, low=0.5, seed=i)) for i in range(4)], training_mode=1,
         outputs=3, opset=15, name="training"),
    case("ConvTranspose", X4, K(rand(3, 2, 3, 3)), output_shape=[9, 8], name="output-shape"),
    case("ConvTranspose", X4, K(rand(3, 2, 3, 3)), auto_pad="SAME_UPPER", name="same"),
    case("Resize", X4, None, K(np.array([1, 1, 2, 2], np.float32)), mode="linear", antialias=1, opset=18,
         name="antialias"),
    case("Resize", X4, None, K(np.array([1, 1, 2, 2], np.float32)), coordinate_transformation_mode="tf_crop_and_resize",
         name="crop"),
    case("Mod", rand(3), rand(3, seed=1), name="float-fmod0"),
    case("LpNormalization", X4, p=3, name="p3"),
    case("QuantizeLinear", X4, K(rand(3, 2, 7, 3, low=0.5)), K(np.zeros((3, 2, 7, 3), np.uint8)), block_size=2,
         axis=1, opset=21, name="blocked"),
    case("LSTM", rand(2, 1, 3), K(rand(1, 8, 3)), K(rand(1, 8, 2)), hidden_size=2, layout=1, outputs=1,
         name="layout"),
    case("GRU", rand(2, 1, 3), K(rand(1, 6, 3)), K(rand(1, 6, 2)), hidden_size=2, clip=1.0, outputs=1, name="clip"),
    case("Cast", rand(3), to=onnx.TensorProto.STRING, name="string"),
    case("Constant", value_string="text", name="string"),
]


@pytest.mark.parametrize("c", REFUSED, ids=[c.id for c in REFUSED])
def test_refusals_name_the_case(c: Case):
    graph = from_model(model_of(c))
    node = graph.nodes[0]
    consts = tuple(np.asarray(graph.weights[i].evaluate(graph.store)) if i in graph.weights else None
                   for i in node.inputs)
    with pytest.raises(Unsupported, match=f"^{c.op}: "):
        lookup(Call(node, consts, graph.opset, CPU))


def test_unknown_op_is_unsupported():
    node = Node("NoSuchOp", ("x",), (Value("y", 1, (1,)),))
    with pytest.raises(Unsupported, match="NoSuchOp is not in the torch runtime's op table"):
        lookup(Call(node, (None,), 17, CPU))
