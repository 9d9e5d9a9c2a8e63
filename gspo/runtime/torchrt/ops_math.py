"""Elementwise ops of the torch runtime: arithmetic, activations, comparisons, logic, Cast, Clip, Where.

ONNX broadcasting (multidirectional) is numpy's, and torch's. ONNX gives both operands of a
binary op the same element type, so torch's type promotion never changes a result's type.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from gspo.runtime.torchrt.helpers import arg, known_dtype
from gspo.runtime.torchrt.registry import Call, op

_UNARY = {
    "Abs": torch.abs, "Neg": torch.neg, "Exp": torch.exp, "Log": torch.log, "Sqrt": torch.sqrt,
    "Reciprocal": torch.reciprocal, "Floor": torch.floor, "Ceil": torch.ceil,
    "Round": torch.round,  # half to even, as ONNX
    "Sign": torch.sign, "Sin": torch.sin, "Cos": torch.cos, "Tan": torch.tan, "Asin": torch.asin,
    "Acos": torch.acos, "Atan": torch.atan, "Sinh": torch.sinh, "Cosh": torch.cosh, "Asinh": torch.asinh,
    "Acosh": torch.acosh, "Atanh": torch.atanh, "Erf": torch.erf, "Sigmoid": torch.sigmoid,
    "Tanh": torch.tanh, "Relu": torch.relu, "Softsign": F.softsign, "Softplus": F.softplus,
    "Mish": F.mish, "HardSwish": F.hardswish, "Not": torch.logical_not, "IsNaN": torch.isnan,
    "BitwiseNot": torch.bitwise_not,
}
_BINARY = {
    "Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Equal": torch.eq, "Less": torch.lt,
    "LessOrEqual": torch.le, "Greater": torch.gt, "GreaterOrEqual": torch.ge, "And": torch.logical_and,
    "Or": torch.logical_or, "Xor": torch.logical_xor, "BitwiseAnd": torch.bitwise_and,
    "BitwiseOr": torch.bitwise_or, "BitwiseXor": torch.bitwise_xor,
}


def _unary(fn):
    return lambda c, x: [fn(x[0])]


def _binary(fn):
    return lambda c, x: [fn(x[0], x[1])]


for _name, _fn in _UNARY.items():
    op(_name)(_unary(_fn))
for _name, _fn in _BINARY.items():
    op(_name)(_binary(_fn))


@op("Identity")
def _identity(c: Call, x):
    return [x[0]]


@op("Div")
def _div(c: Call, x):
    a, b = x[0], x[1]
    if a.dtype.is_floating_point:
        return [a / b]
    return [torch.div(a, b, rounding_mode="trunc")]  # C's integer division, as onnxruntime


@op("Pow")
def _pow(c: Call, x):
    a, b = x[0], x[1]
    if a.dtype.is_floating_point:
        y = torch.pow(a, b)
    else:  # onnxruntime: std::pow in double, truncated to the base's type
        y = torch.pow(a.double(), b.double())
    return [y if y.dtype == a.dtype else y.to(a.dtype)]


def _mod_check(c: Call) -> str | None:
    if c.out_dtype().is_floating_point and not c.attr("fmod", 0):
        return "fmod=0 on floating point inputs (ONNX requires fmod=1)"
    return None


@op("Mod", check=_mod_check)
def _mod(c: Call, x):
    if c.attr("fmod", 0):
        return [torch.fmod(x[0], x[1])]  # the dividend's sign, as C's fmod / %
    return [torch.remainder(x[0], x[1])]  # the divisor's sign, as Python's %


@op("BitShift")
def _bitshift(c: Call, x):
    if c.attr("direction") == "LEFT":
        return [torch.bitwise_left_shift(x[0], x[1])]
    return [torch.bitwise_right_shift(x[0], x[1])]


def _variadic(fn):
    return lambda c, x: [functools.reduce(fn, [t for t in x if t is not None])]


op("Max")(_variadic(torch.maximum))
op("Min")(_variadic(torch.minimum))
op("Sum")(_variadic(torch.add))


@op("Mean")
def _mean(c: Call, x):
    ts = [t for t in x if t is not None]
    return [functools.reduce(torch.add, ts) / len(ts)]


@op("IsInf")
def _isinf(c: Call, x):
    neg, pos = c.attr("detect_negative", 1), c.attr("detect_positive", 1)
    if neg and pos:
        return [torch.isinf(x[0])]
    if pos:
        return [torch.isposinf(x[0])]
    if neg:
        return [torch.isneginf(x[0])]
    return [torch.zeros_like(x[0], dtype=torch.bool)]


@op("Where")
def _where(c: Call, x):
    return [torch.where(x[0], x[1], x[2])]


@op("Clip")
def _clip(c: Call, x):
    if c.opset < 11:
        lo, hi = c.attr("min"), c.attr("max")
    else:
        lo, hi = arg(x, 1), arg(x, 2)
    if lo is None and hi is None:
        return [x[0]]
    return [torch.clamp(x[0], lo, hi)]  # min > max gives max everywhere, as ONNX


@op("Cast", check=known_dtype)
def _cast(c: Call, x):
    return [x[0].to(c.out_dtype())]


@op("CastLike", check=known_dtype)
def _cast_like(c: Call, x):
    return [x[0].to(x[1].dtype)]


# ---------------------------------------------------------------- activations with attributes
@op("LeakyRelu")
def _leaky_relu(c: Call, x):
    return [F.leaky_relu(x[0], c.attr("alpha", 0.01))]


@op("Elu")
def _elu(c: Call, x):
    return [F.elu(x[0], c.attr("alpha", 1.0))]


@op("Selu")
def _selu(c: Call, x):
    alpha = c.attr("alpha", 1.67326319217681884765625)
    gamma = c.attr("gamma", 1.05070102214813232421875)
    return [F.elu(x[0], alpha) * gamma]


@op("Celu")
def _celu(c: Call, x):
    return [F.celu(x[0], c.attr("alpha", 1.0))]


@op("ThresholdedRelu")
def _thresholded_relu(c: Call, x):
    return [F.threshold(x[0], c.attr("alpha", 1.0), 0.0)]


@op("HardSigmoid")
def _hard_sigmoid(c: Call, x):
    return [(x[0] * c.attr("alpha", 0.2) + c.attr("beta", 0.5)).clamp(0.0, 1.0)]


@op("PRelu")
def _prelu(c: Call, x):
    return [torch.where(x[0] < 0, x[0] * x[1], x[0])]


@op("Shrink")
def _shrink(c: Call, x):
    lambd, bias = c.attr("lambd", 0.5), c.attr("bias", 0.0)
    t = x[0]
    return [torch.where(t < -lambd, t + bias, torch.where(t > lambd, t - bias, torch.zeros_like(t)))]


def _gelu_check(c: Call) -> str | None:
    approx = c.attr("approximate", "none")
    return None if approx in ("none", "tanh") else f"approximate={approx!r}"


@op("Gelu", check=_gelu_check)
def _gelu(c: Call, x):
    return [F.gelu(x[0], approximate=c.attr("approximate", "none"))]
