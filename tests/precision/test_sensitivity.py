"""The one-run ranking: each piece's added error from the kind with every piece reduced and with
none, the pieces' boundary tensors exposed, on placed and QDQ builds alike."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

from gspo.ir import load_bytes
from gspo.precision import sensitivity
from gspo.precision.accuracy import ErrorBudget
from gspo.precision.search import cpu_executor
from gspo.precision.sensitivity import boundaries, exposed, harm, read_as
from tests.precision.test_search import BASE, PIECES, chain, data


def test_the_examples_in_the_docstrings_hold():
    assert doctest.testmod(sensitivity).failed == 0


def test_a_pieces_boundary_is_what_another_piece_or_the_output_reads():
    outs, ins = boundaries(BASE, PIECES.ops)
    assert outs == {0: {"r0"}, 1: {"r1"}, 2: {"y"}}  # m0, m1: read inside their piece only
    assert ins == {0: set(), 1: {"r0"}, 2: {"r1"}}
    g = exposed(BASE, ["r1", "y", "missing", "r0"])
    assert g.output_names() == ("y", "r1", "r0")


def _cpu_kinds():
    from gspo.precision.variants import cpu_kinds
    from gspo.runtime.quantize import activation_ranges

    d = data()
    found, _ = cpu_kinds(BASE, ("bf16", "int8"), ("ort", "openvino"), lambda: activation_ranges(BASE, d.calibration),
                         probe=lambda model: None)
    return found


def test_a_qdq_tensor_is_compared_as_the_next_piece_reads_it():
    static = next(k for k in _cpu_kinds() if k.name == "int8 on onnxruntime")
    q = static.build(PIECES.union(range(3)))
    # onnxruntime folds each Relu into the QuantizeLinear after it and names the MatMul's output r0
    assert read_as(q, ["r0", "r1", "y", "m0"]) == {"r0": "r0_DequantizeLinear_Output",
                                                    "r1": "r1_DequantizeLinear_Output", "y": "y"}


def test_the_exposed_builds_run_on_every_cpu_kind_placed_or_quantized():
    d = data()
    found = _cpu_kinds()
    assert {"int8 on onnxruntime", "int8-dynamic on onnxruntime", "int8 on openvino"} <= {k.name for k in found}
    for kind in found:
        measured = harm(kind.build(PIECES.union(range(3))), BASE, PIECES.ops, d.calibration[:2], cpu_executor)
        assert set(measured.errors) == {"r0", "r1", "y"}, kind.name
        assert all(v is not None and np.isfinite(v) and v >= 0 for v in measured.added.values()), kind.name
        assert 0 < measured.errors["y"] < 1e-2, kind.name


def test_one_samples_tensors_are_held_at_a_time():
    d, calls = data(), []

    def logged(graph):
        ex, which = cpu_executor(graph), "rest" if graph.key == sensitivity.exposed(BASE, ["r0", "r1"]).key else "reduced"

        class Logged:
            def run(self, sample):
                calls.append(which)
                return ex.run(sample)

            def close(self):
                calls.append(f"close {which}")
                ex.close()

        return Logged()

    harm(load_bytes(chain((1e-2, 0.0, 0.0))), BASE, PIECES.ops, d.calibration, logged)
    assert calls == ["rest", "reduced"] * 4 + ["close reduced", "close rest"]


def test_a_piece_whose_outputs_the_reduced_build_lacks_has_no_harm():
    import dataclasses

    reduced = load_bytes(chain((1e-2, 0.0, 0.0)))
    renamed = dataclasses.replace(reduced, nodes=tuple(
        n.replace(outputs=(dataclasses.replace(n.outputs[0], name="r1_renamed"),)) if n.outputs[0].name == "r1"
        else n.replace(inputs=tuple("r1_renamed" if i == "r1" else i for i in n.inputs)) for n in reduced.nodes))
    measured = harm(renamed, BASE, PIECES.ops, data().calibration, cpu_executor)
    assert measured.added[1] is None and "r1" not in measured.errors
    assert measured.added[0] == pytest.approx(measured.errors["r0"])  # nothing before it
    assert measured.added[2] == pytest.approx(max(0.0, measured.errors["y"]))  # its input not measured: from 0


def normed(eps=(0.0, 0.0, 0.0)) -> bytes:
    """x[1, 16] -> MatMul(w0) -> a -> MatMul(w1) -> LayerNormalization -> c -> MatMul(w2) -> y: w0
    scaled by 1 + eps[0] (an error the LayerNormalization takes out), w1 and w2 moved by eps[i]
    times a random matrix (errors it cannot)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = [(rng.standard_normal((16, 16)) / 4).astype(np.float32) for _ in range(3)]
    noise = [(rng.standard_normal((16, 16)) / 4).astype(np.float32) for _ in range(3)]
    w = [w[0] * np.float32(1 + eps[0])] + [w[i] + np.float32(eps[i]) * noise[i] for i in (1, 2)]
    inits = [numpy_helper.from_array(a, f"w{i}") for i, a in enumerate(w)]
    inits += [numpy_helper.from_array(np.ones(16, np.float32), "g"), numpy_helper.from_array(np.zeros(16, np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["a"]), helper.make_node("MatMul", ["a", "w1"], ["m1"]),
             helper.make_node("LayerNormalization", ["m1", "g", "b"], ["c"]), helper.make_node("MatMul", ["c", "w2"], ["y"])]
    g = helper.make_graph(nodes, "normed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


def test_a_piece_after_one_whose_error_a_normalization_takes_out_is_still_blamed_for_its_own():
    """The error its outputs carry less the largest on its inputs would call piece 1 harmless: its
    input carries piece 0's scale error (nmse 0.25), which its LayerNormalization takes out, and
    its output only its own (1e-4). Fed the rest's inputs, it is measured at that."""
    from gspo.precision.search import Pieces, fit, outputs_of
    from gspo.precision.variants import Kind

    base = load_bytes(normed())
    pieces = Pieces((frozenset({"a"}), frozenset({"m1", "c"}), frozenset({"y"})), base)
    eps = (0.5, 0.03, 1e-4)
    measured = harm(load_bytes(normed(eps)), base, pieces.ops, data().calibration, cpu_executor)
    assert measured.errors["a"] == pytest.approx(0.25, rel=1e-3)
    assert 1e-5 < measured.added[1] < 1e-2 and measured.added[2] < measured.added[1] < measured.added[0]

    def build(reduced):
        return load_bytes(normed(tuple(e if pieces.ops[i] <= reduced else 0.0 for i, e in enumerate(eps))))

    d = data()
    ref = {which: outputs_of(base, getattr(d, which)) for which in ("calibration", "validation")}
    fitted = fit(Kind("normed", "int8", "ort", lambda ops: True, build), pieces, d, ref,
                 ErrorBudget.parse("nmse=1e-5"), None)
    assert fitted.reduced == (2,) and fitted.validation.holds  # pieces 0 and 1 back, not every piece
