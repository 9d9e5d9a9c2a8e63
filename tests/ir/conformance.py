"""Round trip of every model the onnx wheel ships through gspo.ir, checked with onnxruntime.

For each case: run the original with onnxruntime (a case it cannot run, or runs to outputs other
than the reference, is skipped with that reason); load and save it through ``gspo.ir``; run the
saved model on the same inputs. It passes when the saved model's outputs are identical to the
original's and match the reference within the case's tolerance.

``python -m tests.ir.conformance`` prints the pass/skip counts by reason (quoted in the README).
"""

from __future__ import annotations

import os
import warnings
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from gspo import ir
from gspo.errors import GspoError, InputShapeError, ModelLoadError, UnsupportedModelError
from gspo.runtime import SessionConfig, make_session, run

DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
CONFIG = SessionConfig(intra_op_threads=1)


@dataclass(frozen=True)
class Case:
    source: str
    name: str
    model: bytes
    feeds: tuple[tuple[str, object], ...]
    expected: tuple[object, ...] | None
    rtol: float
    atol: float
    base_dir: str | None = None


class Skip(Exception):
    pass


def _first(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0][:160] if lines else type(e).__name__


def _real_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


def _read_pb(path: Path):
    t = onnx.TensorProto()
    t.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(t)


def _as_array(x):
    """Tensors as arrays; sequences (lists) and optionals (None) stay as they are."""
    if isinstance(x, onnx.TensorProto):
        return numpy_helper.to_array(x)
    if isinstance(x, np.generic):
        return np.asarray(x)
    return x


def _disk_case(source: str, model_dir: Path, rtol: float, atol: float) -> Case | None:
    path = model_dir / "model.onnx"
    model = onnx.load(str(path), load_external_data=False)
    sets = sorted(model_dir.glob("test_data_set_*"))
    if not sets:
        return None
    names = [vi.name for vi in _real_inputs(model)]
    if any(not vi.type.HasField("tensor_type") for vi in _real_inputs(model)) or any(
        not vi.type.HasField("tensor_type") for vi in model.graph.output
    ):
        feeds, expected = (), None
    else:
        ins = sorted(sets[0].glob("input_*.pb"), key=lambda p: int(p.stem.split("_")[1]))
        outs = sorted(sets[0].glob("output_*.pb"), key=lambda p: int(p.stem.split("_")[1]))
        feeds = tuple((n, _read_pb(p)) for n, p in zip(names, ins))
        expected = tuple(_read_pb(p) for p in outs)
    return Case(source, model_dir.name, path.read_bytes(), feeds, expected, rtol, atol, str(model_dir))


def _light_cases() -> list[Case]:
    cases = []
    for path in sorted((DATA / "light").glob("light_*.onnx")):
        model = onnx.load(str(path))
        feeds = []
        for vi in _real_inputs(model):
            shape = [d.dim_value or 1 for d in vi.type.tensor_type.shape.dim]
            n = int(np.prod(shape))
            feeds.append((vi.name, (np.arange(n).reshape(shape) / n).astype(np.float32)))
        outs = [path.with_name(f"{path.stem}_output_{i}.pb") for i in range(len(model.graph.output))]
        expected = tuple(_read_pb(p) for p in outs) if all(p.exists() for p in outs) else None
        cases.append(Case("light", path.stem, path.read_bytes(), tuple(feeds), expected, 1e-3, 1e-5))
    return cases


@cache
def collect(source: str) -> tuple[Case, ...]:
    """All cases of one source: light, simple, pytorch-converted, pytorch-operator, node, model."""
    if source == "light":
        return tuple(_light_cases())
    if source in ("simple", "pytorch-converted", "pytorch-operator"):
        out = []
        for d in sorted((DATA / source).iterdir()):
            if (d / "model.onnx").exists():
                c = _disk_case(source, d, 1e-3, 1e-5)
                if c is not None:
                    out.append(c)
        return tuple(out)
    if source in ("node", "model"):
        import onnx.backend.test.case.model as model_cases
        import onnx.backend.test.case.node as node_cases

        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            raw = node_cases.collect_testcases(None) if source == "node" else model_cases.collect_testcases()
        out = []
        for tc in raw:
            if tc.model is None or not tc.data_sets:
                continue
            inputs, outputs = (tuple(_as_array(x) for x in xs) for xs in tc.data_sets[0])
            names = [vi.name for vi in _real_inputs(tc.model)]
            tensor_io = all(isinstance(x, np.ndarray) for x in list(inputs) + list(outputs))
            feeds = tuple(zip(names, inputs)) if tensor_io else ()
            expected = tuple(outputs) if tensor_io else None
            out.append(Case(source, tc.name, tc.model.SerializeToString(), feeds, expected, tc.rtol, tc.atol))
        return tuple(out)
    raise ValueError(source)


SOURCES = ("light", "simple", "pytorch-converted", "pytorch-operator", "node", "model")


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind in "fc":
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))


def _close(ref, got, rtol, atol) -> bool:
    ref, got = np.asarray(ref), np.asarray(got)
    if ref.shape != got.shape:
        return False
    if ref.dtype.kind in "fc":
        return bool(np.allclose(got, ref, rtol=rtol, atol=atol, equal_nan=True))
    if ref.dtype.kind == "O":
        return bool(np.array_equal(ref.astype(str), got.astype(str)))
    return bool(np.array_equal(ref, got))


def _ort_reason(message: str) -> str:
    if "ValidateOpsetForDomain" in message:
        return "its opset is newer than onnxruntime supports"
    if "NOT_IMPLEMENTED" in message or "not a registered function/op" in message:
        return "onnxruntime has no kernel for one of its ops"
    if "Numpy_type" in message:
        return "onnxruntime's Python API cannot feed an input of this element type"
    if "StringNormalizer" in message or "locale" in message:
        return "onnxruntime needs a locale this machine lacks"
    return "other onnxruntime load or run error"


def _runnable(model: bytes) -> bytes:
    """The original with its IR version lowered to what onnxruntime reads, if it was above.

    onnx 1.23 stamps the conformance models it generates with IR 14, which onnxruntime 1.31
    refuses; the IR version does not change what the operators compute.
    """
    proto = onnx.ModelProto.FromString(model)
    if proto.ir_version <= ir.onnx_io.MAX_IR_VERSION:
        return model
    proto.ir_version = ir.onnx_io.MAX_IR_VERSION
    return proto.SerializeToString()


def check(case: Case) -> None:
    """Raise :class:`Skip` (with a reason) or ``AssertionError``; return when the case passes."""
    if case.expected is None:
        raise Skip("non-tensor inputs or outputs (sequences/optionals): not runnable as plain feeds")
    feeds = dict(case.feeds)
    reference_model = _runnable(case.model)
    try:
        original = run(make_session(reference_model, CONFIG), feeds)
    except GspoError as e:
        raise Skip(f"onnxruntime cannot run the original: {_ort_reason(str(e))}") from None
    got_original = list(original.values())
    if len(got_original) != len(case.expected) or not all(
        _close(r, g, case.rtol, case.atol) for r, g in zip(case.expected, got_original)
    ):
        raise Skip("onnxruntime's own output differs from the reference")
    try:
        pins = {name: tuple(np.shape(x)) for name, x in feeds.items()}
        graph = ir.load_bytes(case.model, pins, base_dir=case.base_dir, label=case.name)
    except (UnsupportedModelError, InputShapeError) as e:
        raise Skip(f"gspo refuses the model: {_first(e).split(': ', 1)[-1]}") from None
    except ModelLoadError as e:
        if "fails the ONNX checker" not in str(e):
            raise  # anything else gspo refuses in a model onnxruntime runs is a bug, not a skip
        raise Skip(f"gspo refuses the model: {_first(e).split(': ', 1)[-1]}") from None
    saved = ir.serialize(graph)
    again = run(make_session(saved, CONFIG), feeds)
    assert list(again) == list(original), f"{case.name}: outputs renamed {list(original)} -> {list(again)}"
    for name in original:
        assert _same(original[name], again[name]), f"{case.name}: output {name} changed by the round trip"
    assert ir.load_bytes(saved, pins, base_dir=case.base_dir).key == graph.key, f"{case.name}: structure changed"


def report() -> Counter:
    counts: Counter = Counter()
    for source in SOURCES:
        for case in collect(source):
            try:
                check(case)
                counts[(source, "pass")] += 1
            except Skip as s:
                counts[(source, f"skip: {s}")] += 1
            except AssertionError as e:
                counts[(source, f"FAIL: {e}")] += 1
    return counts


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    for (source, status), n in sorted(report().items()):
        print(f"{source:<18} {n:>5}  {status}")
