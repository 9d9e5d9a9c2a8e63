"""The torch runtime's op table beyond the zoo's ops, against onnxruntime's CPU provider (the
harness is in ``test_ops.py``): elementwise ops, shapes, indexing, reductions, normalizations,
ConvTranspose, Resize, quantization and onnxruntime's fused ops."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

torch = pytest.importorskip("torch")

from tests.runtime.torchrt.test_ops import ALL_ZOO, K, case, check, check_direct, ints, rand  # noqa: E402

B = np.array([[True, False, True], [False, False, True]])
HALVES = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4, -2.6, 0.0], np.float32)
UNIT = rand(3, 4, low=-1) * 0.9  # inside (-1, 1)
POS = rand(3, 4, low=0.1)  # inside (0.1, 2.1)


def _unary_cases() -> list:
    x = rand(3, 4)
    plain = ["Abs", "Neg", "Exp", "Floor", "Ceil", "Sign", "Sin", "Cos", "Tan", "Atan", "Sinh", "Cosh", "Asinh",
             "Softsign", "Softplus", "HardSwish", "Identity"]
    out = [case(op, x) for op in plain]
    out += [case(op, UNIT) for op in ("Asin", "Acos", "Atanh")]
    out += [case(op, POS) for op in ("Log", "Sqrt", "Reciprocal")]
    out += [
        case("Acosh", POS + 1),
        case("Round", HALVES, name="half-to-even"),
        case("Abs", ints([-3, 0, 5], np.int32), name="int"),
        case("Neg", ints([-3, 0, 5]), name="int"),
        case("Sign", ints([-3, 0, 5], np.int32), name="int"),
        case("Mish", x, opset=18),
        case("Not", B),
        case("IsNaN", np.array([1.0, np.nan, np.inf], np.float32)),
        case("BitwiseNot", ints([0, 5, -6], np.int32), opset=18),
        case("Identity", ints([1, 2]), opset=19, name="opset19"),
        case("Exp", rand(3, 4, dtype=np.float16), name="fp16"),
        case("Sigmoid", rand(3, 4, dtype=np.float16), name="fp16"),
    ]
    return out


def _binary_cases() -> list:
    a, b = rand(2, 3), rand(3, seed=1)
    eq = np.array([[1, 2, 3], [3, 2, 1]], np.float32)
    out = [case("Sub", a, b), case("Sub", ints([5, -3], np.int32), ints([7, 2], np.int32), name="int")]
    out += [case(op, eq, np.array([2, 2, 2], np.float32)) for op in ("Equal", "Less", "LessOrEqual", "Greater",
                                                                      "GreaterOrEqual")]
    out += [case("Equal", ints([1, 2, 3]), ints([1, 0, 3]), name="int"), case("Equal", B, B[::-1], name="bool")]
    out += [case(op, B, B[::-1]) for op in ("And", "Or", "Xor")]
    out += [case(op, ints([12, -7, 5], np.int32), ints([10, 3, -1], np.int32), opset=18)
            for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor")]
    out += [
        case("Pow", POS, rand(3, 4, seed=1), name="float"),
        case("Pow", a, K(np.float32(2.0)), name="square"),
        case("Pow", a, K(ints(3)), name="int-exponent"),
        case("Pow", ints([2, 3, -2], np.int32), ints([3, 0, 3], np.int32), name="int"),
        case("Pow", ints([2, 3, 4]), np.array([0.5, 2.0, -1.0], np.float32), name="int-base-float-exponent"),
        case("Mod", ints([7, -7, 7, -7], np.int32), ints([3, 3, -3, -3], np.int32), name="int"),
        case("Mod", ints([7, -7, 7, -7]), ints([3, 3, -3, -3]), fmod=1, name="int-fmod"),
        case("Mod", np.array([5.5, -5.5, 3.0], np.float32), np.array([2.0, 2.0, -2.5], np.float32), fmod=1,
             name="float"),
        case("BitShift", ints([1, 2, 255], np.uint8), ints([1, 3, 1], np.uint8), direction="LEFT", name="left"),
        case("BitShift", ints([16, 255, 7], np.uint8), ints([1, 3, 0], np.uint8), direction="RIGHT", name="right"),
        case("Max", rand(2, 3), rand(3, seed=1), rand(2, 1, seed=2), name="three"),
        case("Min", rand(2, 3), rand(3, seed=1), rand(2, 1, seed=2), name="three"),
        case("Max", ints([1, 5, -3], np.int32), ints([2, 4, -9], np.int32), name="int"),
        case("Min", ints([1, 5, -3]), ints([2, 4, -9]), name="int"),
        case("Sum", rand(2, 3), rand(3, seed=1), rand(2, 1, seed=2), name="three"),
        case("Sum", rand(2, 3), name="one"),
        case("Mean", rand(2, 3), rand(3, seed=1), rand(2, 1, seed=2), name="three"),
        case("Where", B, rand(2, 3), rand(3, seed=1)),
        case("Where", B[:1], ints([[1], [2]]), ints([7, 8, 9]), name="int-broadcast"),
    ]
    return out


def _misc_math_cases() -> list:
    x = rand(3, 4) * 3
    inf = np.array([1.0, np.inf, -np.inf, np.nan], np.float32)
    return [
        case("IsInf", inf), case("IsInf", inf, detect_negative=0, name="positive"),
        case("IsInf", inf, detect_positive=0, name="negative"),
        case("Clip", x, K(np.float32(-1.0)), K(np.float32(2.0)), name="both"),
        case("Clip", x, None, K(np.float32(0.5)), name="max-only"),
        case("Clip", x, np.float32(-0.5), name="fed-min"),
        case("Clip", x, name="none"),
        case("Clip", x, K(np.float32(1.0)), K(np.float32(-1.0)), name="min-over-max"),
        case("Clip", ints([-5, 0, 9], np.int32), K(ints(-2, np.int32)), K(ints(3, np.int32)), name="int"),
        case("Clip", x, min=-1.0, max=1.5, opset=10, name="opset10"),
        case("Cast", x, to=TensorProto.INT32, name="float-int32"),
        case("Cast", x, to=TensorProto.FLOAT16, name="float-fp16"),
        case("Cast", x, to=TensorProto.BOOL, name="float-bool"),
        case("Cast", B, to=TensorProto.FLOAT, name="bool-float"),
        case("Cast", ints([1, -200, 300]), to=TensorProto.INT8, name="int64-int8"),
        case("Cast", ints([1, 2], np.int32), to=TensorProto.DOUBLE, name="int32-double"),
        case("Cast", x, to=TensorProto.INT64, opset=19, saturate=1, name="opset19"),
        case("CastLike", x, ints([1], np.int32)),
        case("LeakyRelu", x), case("LeakyRelu", x, alpha=0.3, name="alpha"),
        case("Elu", x), case("Elu", x, alpha=0.5, name="alpha"),
        case("Selu", x), case("Selu", x, alpha=1.5, gamma=0.8, name="attrs"),
        case("Celu", x, alpha=2.0, opset=12),
        case("ThresholdedRelu", x), case("ThresholdedRelu", x, alpha=0.5, name="alpha"),
        case("HardSigmoid", x), case("HardSigmoid", x, alpha=0.3, beta=0.4, name="attrs"),
        case("PRelu", rand(2, 3, 2, 2), K(rand(3, 1, 1, seed=1)), name="channel"),
        case("PRelu", x, rand(4, seed=1), name="fed"),
        case("Shrink", x, lambd=1.0, bias=0.5),
        case("Gelu", x, opset=20), case("Gelu", x, approximate="tanh", opset=20, name="tanh"),
    ]


def _shape_cases() -> list:
    x = rand(2, 1, 3, 1)
    return [
        case("Squeeze", x, name="all"),
        case("Squeeze", x, K(ints([1, -1])), name="axes"),
        case("Squeeze", x, ints([3]), name="fed"),
        case("Squeeze", x, axes=[1], opset=11, name="opset11"),
        # onnxruntime squeezes every axis of size 1; ONNX's shape inference none (hence not strict)
        case("Squeeze", x, K(ints([], np.int64)), strict=False, name="empty-axes"),
        case("Unsqueeze", rand(2, 3), K(ints([0, -1])), name="axes"),
        case("Unsqueeze", rand(2, 3), ints([1, 3]), name="fed"),
        case("Unsqueeze", rand(2, 3), axes=[-1, 0], opset=11, name="opset11"),
        case("Expand", rand(3, 1), K(ints([2, 1, 4])), name="grow"),
        case("Expand", rand(2, 3, 4), ints([3, 1]), name="ones-keep"),
        case("Tile", rand(2, 3), K(ints([2, 1]))),
        case("Tile", ints([[1, 2]]), ints([3, 2]), name="fed"),
        case("Constant", value=helper.make_tensor("v", TensorProto.FLOAT, [2, 2], [1, 2, 3, 4]), name="tensor"),
        case("Constant", value_float=1.5, name="float"),
        case("Constant", value_floats=[1.5, 2.0], name="floats"),
        case("Constant", value_int=7, name="int"),
        case("Constant", value_ints=[7, -1], name="ints"),
        case("ConstantOfShape", ints([2, 3]), name="default"),
        case("ConstantOfShape", K(ints([3])), value=helper.make_tensor("v", TensorProto.INT64, [1], [5]), name="int"),
        case("ConstantOfShape", ints([2, 1]), value=helper.make_tensor("v", TensorProto.BOOL, [1], [1]), name="bool"),
        case("Range", K(ints(1)), K(ints(10)), K(ints(3)), name="int"),
        case("Range", ints(10, np.int32), ints(1, np.int32), ints(-2, np.int32), name="fed-negative"),
        case("Range", np.float32(0.5), np.float32(2.0), np.float32(0.25), name="float"),
        case("EyeLike", rand(3, 4)), case("EyeLike", rand(4, 3), k=-1, dtype=TensorProto.INT32, name="k"),
        case("DepthToSpace", rand(1, 8, 2, 3), blocksize=2, name="dcr"),
        case("DepthToSpace", rand(1, 8, 2, 3), blocksize=2, mode="CRD", name="crd"),
        case("SpaceToDepth", rand(1, 2, 4, 6), blocksize=2),
    ]


def _index_cases() -> list:
    data = rand(3, 4)
    return [
        case("GatherElements", data, ints([[0, -1], [2, 1], [1, 0]]), axis=1),
        case("GatherElements", data, K(ints([[2, 0, 1, -3]], np.int32)), name="axis0"),
        case("GatherND", data, ints([[0, 1], [2, -1]]), name="elements"),
        case("GatherND", rand(2, 3, 4), K(ints([[1], [0]])), name="slices"),
        case("GatherND", rand(2, 3, 4), ints([[[1, 2]], [[0, -1]]]), batch_dims=1, name="batch"),
        case("ScatterElements", data, ints([[1, 0], [3, 2], [0, 2]]), rand(3, 2, seed=1), axis=1),  # no duplicates: ONNX leaves their order open
        case("ScatterElements", data, ints([[-1, 0]]), rand(1, 2, seed=1), axis=1, name="negative"),
        *[case("ScatterElements", data, ints([[1, 1], [0, 0]]), rand(2, 2, seed=1), reduction=r, opset=18, name=r)
          for r in ("add", "mul", "max", "min")],
        case("Scatter", data, ints([[1, 0, 2]]), rand(1, 3, seed=1), opset=10),
        case("ScatterND", rand(4, 3), ints([[1], [3]]), rand(2, 3, seed=1), name="rows"),
        case("ScatterND", rand(4, 3), ints([[1, 2], [-1, 0]]), rand(2, seed=1), name="elements"),
        case("ScatterND", rand(4, 3), ints([[1, 2], [1, 2], [0, 0]]), rand(3, seed=1), reduction="mul", opset=18,
             name="elements-mul"),
        *[case("ScatterND", rand(4, 3), ints([[1], [1], [2]]), rand(3, 3, seed=1), reduction=r, opset=18, name=r)
          for r in ("add", "mul", "max", "min")],
        case("OneHot", ints([0, 2, -1, 5]), K(ints(4)), K(np.array([0.0, 1.0], np.float32))),
        case("OneHot", ints([[1, 0, -3]]), np.float32(3), ints([-1, 9], np.int32), axis=0, name="axis0"),
        case("NonZero", np.array([[1, 0, 2], [0, 0, 3]], np.float32)),
        case("NonZero", B, name="bool"),
        case("Trilu", rand(2, 4, 5)),
        case("Trilu", rand(4, 5), K(ints(1)), upper=0, name="lower-k"),
        case("Trilu", rand(4, 5), ints(-2), name="fed-k"),
        case("Einsum", rand(2, 3), rand(3, 4, seed=1), equation="ij,jk->ik"),
        case("Einsum", rand(2, 2, 3), rand(2, 4, 3, seed=1), equation="bij, bkj -> bik", name="batched"),
        case("Einsum", rand(2, 3, 4), equation="...ij->...ji", name="ellipsis"),
    ]


def _reduce_cases() -> list:
    x = rand(2, 3, 4)
    out = []
    ops = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
           "ReduceSumSquare", "ReduceLogSumExp"]
    for op in ops:
        out += [
            case(op, x, K(ints([1, -1])), opset=18, name="axes"),
            case(op, x, ints([0]), keepdims=0, opset=18, name="fed-no-keepdims"),
            case(op, x, opset=18, name="all"),
            case(op, x, K(ints([], np.int64)), noop_with_empty_axes=1, opset=18, name="noop"),
            case(op, x, axes=[-2], keepdims=0, opset=13 if op != "ReduceSum" else 11, name="attr"),
        ]
    out += [
        case("ReduceLogSum", POS, K(ints([1])), opset=18),
        case("ReduceSum", x, K(ints([1])), opset=13, name="opset13"),
        case("ReduceSum", ints([[1, 2], [3, 4]], np.int32), K(ints([1])), name="int32"),
        case("ReduceMean", ints([[1, 2], [-3, -6]], np.int32), K(ints([1])), opset=18, name="int32"),
        case("ReduceMax", ints([[1, 2], [3, -4]]), K(ints([0])), opset=18, name="int64"),
        case("ReduceProd", ints([[1, 2], [3, -4]], np.int32), opset=18, name="int-all"),
    ]
    ties = np.array([[1, 3, 3, 0], [2, 2, 1, 2]], np.float32)
    for op in ("ArgMax", "ArgMin"):
        out += [case(op, x, axis=1), case(op, ties, axis=1, keepdims=0, name="ties"),
                case(op, ties, axis=-1, select_last_index=1, name="last"), case(op, ties, name="default-axis")]
    out += [
        case("TopK", x, K(ints([2])), outputs=2, name="largest"),
        case("TopK", x, ints([2]), axis=1, largest=0, outputs=2, name="smallest-fed"),
        case("TopK", ties, K(ints([3])), outputs=2, name="ties"),
        case("TopK", ints([[4, 1, 4, 4]], np.int32), K(ints([2])), largest=0, outputs=2, name="ties-smallest"),
        case("TopK", x, k=2, opset=9, outputs=2, name="opset9"),
        case("CumSum", x, K(ints(1))),
        case("CumSum", x, ints(-1), exclusive=1, name="exclusive"),
        case("CumSum", x, K(ints(0)), reverse=1, name="reverse"),
        case("CumSum", ints([[1, 2, 3]], np.int32), K(ints(1, np.int32)), exclusive=1, reverse=1, name="int-both"),
    ]
    return out


def _nn_cases() -> list:
    x = rand(2, 4, 3, 5)
    return [
        case("InstanceNormalization", x, K(rand(4, seed=1)), K(rand(4, seed=2)), epsilon=1e-3),
        case("GroupNormalization", x, K(rand(4, seed=1)), K(rand(4, seed=2)), num_groups=2, opset=21),
        case("LpNormalization", x, axis=1, name="l2"), case("LpNormalization", x, p=1, name="l1"),
        case("LRN", x, size=3), case("LRN", x, size=5, alpha=0.01, beta=0.5, bias=2.0, name="attrs"),
        case("RMSNormalization", rand(2, 3, 8), K(rand(8, seed=1)), opset=23),
        case("RMSNormalization", rand(2, 3, 4), K(rand(3, 4, seed=1)), axis=1, epsilon=1e-3, opset=23, name="axis1"),
        case("GlobalMaxPool", x),
        case("LogSoftmax", x), case("LogSoftmax", x, axis=1, opset=11, name="opset11"),
        case("Hardmax", np.array([[1, 3, 3], [0, -1, -2]], np.float32)),
        case("Hardmax", x, opset=11, name="opset11"),
        case("ConvTranspose", x, K(rand(4, 3, 3, 3, seed=1)), K(rand(3, seed=2)), name="plain"),
        case("ConvTranspose", x, K(rand(4, 3, 3, 3, seed=1)), strides=[2, 2], pads=[1, 1, 1, 1],
             output_padding=[1, 0], name="strided"),
        case("ConvTranspose", x, K(rand(4, 3, 3, 3, seed=1)), K(rand(3, seed=2)), strides=[2, 3], pads=[0, 1, 2, 1],
             name="asymmetric"),
        case("ConvTranspose", x, K(rand(4, 3, 3, 3, seed=1)), K(rand(3, seed=2)), strides=[2, 2],
             output_padding=[1, 1], pads=[0, 1, 0, 0], name="asymmetric-output-padding"),
        case("ConvTranspose", x, K(rand(4, 1, 2, 2, seed=1)), group=2, dilations=[2, 1], auto_pad="VALID",
             name="group-dilated"),
        case("ConvTranspose", rand(1, 2, 5), K(rand(2, 3, 3, seed=1)), strides=[3], pads=[1, 1], name="1d"),
    ]


def _resize_cases() -> list:
    x = rand(1, 2, 3, 5)
    out = []
    for ctm in ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nn"):
        # align_corners measures with the unrounded length scale * size, where onnxruntime takes the
        # rounded one: compared with onnxruntime at scales whose lengths are whole (the standard's own
        # cases, test_onnx_node_cases.py, hold the others)
        whole = ctm == "align_corners"
        scales_up = K(np.array([1, 1, 2.0, 1.6 if whole else 1.5], np.float32))
        scales_down = K(np.array([1, 1, 1 / 3 if whole else 0.6, 0.6 if whole else 0.7], np.float32))
        for nm in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
            out.append(case("Resize", x, None, scales_up, coordinate_transformation_mode=ctm, nearest_mode=nm,
                            name=f"nearest-{ctm}-{nm}"))
        out.append(case("Resize", x, None, scales_down, coordinate_transformation_mode=ctm, name=f"nearest-down-{ctm}"))
        if ctm != "tf_half_pixel_for_nn":
            out.append(case("Resize", x, None, scales_up, mode="linear", coordinate_transformation_mode=ctm,
                            name=f"linear-{ctm}"))
            out.append(case("Resize", x, None, None, K(ints([1, 2, 2, 1])), mode="linear",
                            coordinate_transformation_mode=ctm, name=f"linear-down-sizes-{ctm}"))
    out += [
        case("Resize", x, None, None, ints([1, 2, 7, 4]), name="fed-sizes"),
        case("Resize", x, None, K(np.array([2, 1.5], np.float32)), axes=[2, 3], opset=18, name="axes"),
        case("Resize", x, None, None, K(ints([5, 4])), axes=[3, 2], mode="linear", opset=18, name="axes-sizes"),
        case("Resize", x, None, None, K(ints([1, 2, 6, 6])), keep_aspect_ratio_policy="not_larger", opset=18,
             name="not-larger"),
        case("Resize", x, None, None, K(ints([6, 6])), axes=[2, 3], keep_aspect_ratio_policy="not_smaller",
             opset=18, mode="linear", name="not-smaller"),
        case("Resize", x, None, K(np.array([1, 1, 2.0, 1.5], np.float32)), mode="linear",
             coordinate_transformation_mode="half_pixel_symmetric", opset=19, name="half-pixel-symmetric"),
        case("Resize", x, None, K(np.array([1, 1, 2.0, 1.5], np.float32)), mode="cubic", name="cubic"),
        case("Resize", x, None, K(np.array([1, 1, 0.6, 0.7], np.float32)), mode="cubic", cubic_coeff_a=-0.5,
             exclude_outside=1, name="cubic-down-exclude"),
        case("Resize", x, None, None, K(ints([1, 2, 4, 9])), mode="cubic", coordinate_transformation_mode="asymmetric",
             name="cubic-sizes-asymmetric"),
        case("Resize", x, K(np.zeros(0, np.float32)), np.array([1, 1, 2, 2], np.float32), mode="nearest",
             coordinate_transformation_mode="asymmetric", nearest_mode="floor", opset=11, name="opset11-fed"),
        case("Resize", x, np.array([1, 1, 2, 3], np.float32), opset=10, name="opset10"),
        case("Resize", x, np.array([1, 1, 0.5, 0.6], np.float32), opset=10, name="opset10-down"),
        case("Resize", x, K(np.array([1, 1, 1.5, 2], np.float32)), mode="linear", opset=10, name="opset10-linear"),
        case("Upsample", x, K(np.array([1, 1, 2, 2], np.float32)), opset=9),
        case("Upsample", x, K(np.array([1, 1, 2, 3], np.float32)), mode="linear", opset=9, name="linear"),
        case("Upsample", x, scales=[1.0, 1.0, 2.0, 2.0], opset=7, name="opset7"),
        case("Resize", rand(1, 2, 3, 4, dtype=np.float16), None, K(np.array([1, 1, 2.0, 1.5], np.float32)),
             mode="linear", name="linear-fp16"),
    ]
    return out


def _quant_cases() -> list:
    x = np.array([[-1.0, -0.25, 0.0, 0.25], [0.75, 1.25, 100.0, -100.0]], np.float32)
    scale = K(np.float32(0.5))
    return [
        case("QuantizeLinear", x, scale, K(np.uint8(10)), name="uint8"),
        case("QuantizeLinear", x, scale, K(np.int8(-3)), name="int8"),
        case("QuantizeLinear", x, scale, name="no-zero-point"),
        case("QuantizeLinear", x, K(np.array([0.5, 0.25], np.float32)), K(np.array([1, -1], np.int8)), axis=0,
             name="per-axis"),
        case("QuantizeLinear", x, np.float32(0.1), np.uint8(128), name="fed"),
        case("DequantizeLinear", ints([[0, 10, 255]], np.uint8), scale, K(np.uint8(10)), name="uint8"),
        case("DequantizeLinear", ints([[-128, 0, 127]], np.int8), K(np.array([0.5, 1, 2], np.float32)),
             K(ints([1, 0, -1], np.int8)), axis=-1, name="per-axis"),
        case("DequantizeLinear", ints([-5, 70000], np.int32), scale, name="int32"),
        case("DynamicQuantizeLinear", rand(3, 4), outputs=3),
        case("DynamicQuantizeLinear", rand(3, 4, low=0.5), outputs=3, name="positive"),
        case("DynamicQuantizeLinear", np.zeros((2, 2), np.float32), outputs=3, name="zeros"),
        case("MatMulInteger", ints(np.arange(12).reshape(3, 4) * 20, np.uint8), K(ints(np.arange(20).reshape(4, 5) * 9,
                                                                                     np.uint8)),
             K(np.uint8(3)), K(ints([1, 2, 3, 4, 5], np.uint8)), name="uint8"),
        case("MatMulInteger", ints(np.arange(-6, 6).reshape(2, 3, 2) * 20, np.int8),
             ints(np.arange(-4, 4).reshape(2, 4) * 30, np.int8), name="int8-batched"),
        case("ConvInteger", ints(np.arange(50).reshape(1, 2, 5, 5) * 5, np.uint8),
             K(ints(np.arange(36).reshape(2, 2, 3, 3) * 7, np.uint8)), K(np.uint8(7)), pads=[1, 1, 0, 0]),
    ]


def _rnn_cases() -> list:
    seq, batch, inp, hid = 4, 3, 5, 6
    x = rand(seq, batch, inp)
    out = []
    for op, gates, n_out in (("LSTM", 4, 3), ("GRU", 3, 2), ("RNN", 1, 2)):
        w1, r1, b1 = (K(rand(1, gates * hid, inp, seed=1) * 0.5), K(rand(1, gates * hid, hid, seed=2) * 0.5),
                      K(rand(1, 2 * gates * hid, seed=3) * 0.5))
        w2, r2, b2 = (K(rand(2, gates * hid, inp, seed=1) * 0.5), K(rand(2, gates * hid, hid, seed=2) * 0.5),
                      K(rand(2, 2 * gates * hid, seed=3) * 0.5))
        h0 = rand(2, batch, hid, seed=4)
        out += [
            case(op, x, w1, r1, b1, hidden_size=hid, outputs=n_out, name="forward"),
            case(op, x, w1, r1, hidden_size=hid, direction="reverse", outputs=2, name="reverse-no-bias"),
            case(op, x, w2, r2, b2, None, h0, *([h0 * 0.5] if op == "LSTM" else []), hidden_size=hid,
                 direction="bidirectional", outputs=n_out, name="bidirectional-initial"),
            case(op, x, w2, r2, b2, ints([4, 2, 1], np.int32), hidden_size=hid, direction="bidirectional",
                 outputs=n_out, name="sequence-lens"),
        ]
    out += [
        case("GRU", x, K(rand(1, 3 * hid, inp, seed=1)), K(rand(1, 3 * hid, hid, seed=2)),
             K(rand(1, 6 * hid, seed=3)), hidden_size=hid, linear_before_reset=1, outputs=2, name="linear-before-reset"),
        case("LSTM", x, K(rand(1, 4 * hid, inp, seed=1)), K(rand(1, 4 * hid, hid, seed=2)),
             K(rand(1, 8 * hid, seed=3)), None, None, None, K(rand(1, 3 * hid, seed=5)), hidden_size=hid,
             outputs=3, name="peepholes"),
    ]
    return out


MORE = _rnn_cases() + _unary_cases() + _binary_cases() + _misc_math_cases() + _shape_cases() + _index_cases() + \
    _reduce_cases() + _nn_cases() + _resize_cases() + _quant_cases()


@pytest.mark.parametrize("c", MORE, ids=[c.id for c in MORE])
def test_op(c):
    check(c)


DIRECT = [
    (case("Shape", rand(2, 3, 4), name="all"), None),
    (case("Shape", rand(2, 3, 4), start=1, end=-1, opset=15, name="start-end"), None),
    (case("Shape", rand(2, 3, 4), start=-5, end=10, opset=15, name="clamped"), None),
    (case("Size", rand(2, 3, 4)), None),
    (case("GroupNormalization", rand(2, 4, 3), K(rand(2, seed=1)), K(rand(2, seed=2)), num_groups=2, opset=18,
          name="opset18"), None),
    # onnxruntime registers it in the default domain, where the ONNX checker (and so gspo's
    # loader) refuses it: a converter that builds the node itself reaches it
    (case("SimplifiedLayerNormalization", rand(2, 3, 8), K(rand(8, seed=1)), epsilon=1e-5), [TensorProto.FLOAT]),
    (case("SimplifiedLayerNormalization", rand(2, 3, 4), rand(3, 4, seed=1), axis=1, name="axis1"),
     [TensorProto.FLOAT]),
]
MS = "com.microsoft"
FUSED = [
    case("Gelu", rand(3, 4), domain=MS),
    case("BiasGelu", rand(3, 4), K(rand(4, seed=1)), domain=MS),
    case("FastGelu", rand(3, 4), domain=MS),
    case("FastGelu", rand(3, 4), K(rand(4, seed=1)), domain=MS, name="bias"),
    case("QuickGelu", rand(3, 4), alpha=1.5, domain=MS),
    case("FusedMatMul", rand(2, 4, 3), rand(2, 5, 4, seed=1), transA=1, transB=1, alpha=0.5, domain=MS),
    case("SkipLayerNormalization", rand(2, 3, 8), rand(2, 3, 8, seed=1), K(rand(8, seed=2)), K(rand(8, seed=3)),
         K(rand(8, seed=4)), epsilon=1e-5, domain=MS),
    case("SkipLayerNormalization", rand(2, 3, 8), rand(2, 3, 8, seed=1), K(rand(8, seed=2)),
         outputs=["out0", "", "", "out3"], domain=MS, name="sum-output"),
    case("SkipSimplifiedLayerNormalization", rand(2, 3, 8), rand(2, 3, 8, seed=1), K(rand(8, seed=2)),
         epsilon=1e-5, domain=MS),
]


@pytest.mark.parametrize("c,types", DIRECT, ids=[c.id for c, _ in DIRECT])
def test_op_direct(c, types):
    check_direct(c, types)


@pytest.mark.parametrize("c", FUSED, ids=[c.id for c in FUSED])
def test_onnxruntime_fused_op(c):
    check(c)  # gspo loads the node opaque; the table runs it, its attributes read from the bytes


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
def test_every_case_on_cuda():
    """Every case above on the GPU (onnxruntime's CPU provider the reference), failures together."""
    cuda = torch.device("cuda")
    failed = []
    for c in ALL_ZOO + MORE + FUSED:
        try:
            check(c, cuda)
        except Exception as e:  # noqa: BLE001 - every failure is listed
            failed.append(f"{c.id}: {str(e).strip().splitlines()[0][:300]}")
    assert not failed, "\n".join(failed)
