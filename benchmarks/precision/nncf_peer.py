"""NNCF's post-training quantization as an OpenVINO user runs it: the precision benchmark's NNCF columns.

On the OpenVINO model of the source (``openvino.Core().read_model`` of the ``.onnx``):

* ``nncf quantize``: ``nncf.quantize(model, nncf.Dataset(calibration), subset_size=len(calibration))``,
  with ``model_type=nncf.ModelType.TRANSFORMER`` where the graph is a transformer (a Softmax fed
  by a MatMul, :func:`is_transformer`), NNCF's default otherwise; in the benchmark's process.
* ``nncf accuracy control``: ``nncf.quantize_with_accuracy_control`` with the same calibration
  samples, the validation samples and a ``validation_fn`` that is minus gspo's metric of the
  budget (:func:`validation_fn`: for one lower-is-better limit, its value, e.g. the worst nmse of
  the outputs against the source's; else the budget's excess), so that ``max_drop`` (absolute) is
  the budget. In a child process with a time cap: NNCF's accuracy control ran 15+ minutes on
  BERT-base; a capped run is recorded as stopped after the cap.

Each quantized model is compiled as OpenVINO's users do (``PERFORMANCE_HINT=LATENCY``) at its
default inference precision (bf16 where the CPU has it) and with ``INFERENCE_PRECISION_HINT=f32``
(:data:`HINTS`). nncf is imported only here and only when used: without it the columns say so
in one line (:func:`missing`).
"""

from __future__ import annotations

import importlib.util
import json
import math
import multiprocessing
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from gspo.errors import first_line
from gspo.precision.accuracy import ErrorBudget, measure

__all__ = ["HINTS", "QUANTIZE", "ACCURACY_CONTROL", "accuracy_control", "contenders", "is_transformer", "missing",
           "ov_runner", "quantize", "validation_fn"]

#: The labels of the two NNCF contenders (a compile hint's suffix added, see :data:`HINTS`).
QUANTIZE, ACCURACY_CONTROL = "nncf quantize", "nncf accuracy control"
#: The label suffix and the OpenVINO inference precision each NNCF model is compiled at
#: (``None``: OpenVINO's default on this CPU).
HINTS = (("", None), (", f32", "f32"))
#: The ops attention puts between the scores' MatMul and the Softmax (scale, mask, casts, views).
_BETWEEN = frozenset({"Add", "Sub", "Mul", "Div", "Where", "Cast", "Reshape", "Transpose", "Identity"})
#: How many ops back from a Softmax :func:`is_transformer` looks for the MatMul.
_STEPS = 6


def missing() -> str | None:
    """Why the NNCF columns cannot be measured here (one line), ``None`` when nncf is installed."""
    if importlib.util.find_spec("nncf") is None:
        return "nncf is not installed (pip install nncf; OpenVINO's post-training quantization)"
    return None


def is_transformer(graph) -> bool:
    """Whether ``graph`` (:class:`gspo.ir.Graph`) has attention: a Softmax whose input a MatMul
    computes, directly or through scaling, masking, casts and reshapes (at most a few ops)."""
    producers = graph.producers
    return any(_fed_by_matmul(node.inputs[0], producers) for node in graph.nodes if node.op_type == "Softmax")


def _fed_by_matmul(value: str, producers: Mapping) -> bool:
    frontier = [value]
    for _ in range(_STEPS):
        found = [producers[v][0] for v in frontier if v in producers]
        if any(node.op_type == "MatMul" for node in found):
            return True
        frontier = [i for node in found if node.op_type in _BETWEEN for i in node.inputs if i]
    return False


def _model_type(transformer: bool) -> dict:
    import nncf

    return {"model_type": nncf.ModelType.TRANSFORMER} if transformer else {}


def quantize(path: Path, calibration: Sequence[dict], transformer: bool):
    """``nncf.quantize`` of the source's OpenVINO model on ``calibration`` (all of it): the
    quantized ``openvino.Model`` (or why it failed, one line) and the seconds ``nncf.quantize``
    took (reading the model not counted)."""
    import nncf
    import openvino as ov

    model = ov.Core().read_model(str(path))
    began = time.perf_counter()
    try:
        q = nncf.quantize(model, nncf.Dataset(list(calibration)), subset_size=len(calibration),
                          **_model_type(transformer))
    except Exception as e:  # noqa: BLE001 - the peer's own failure is a result
        return f"nncf.quantize failed: {first_line(e)}", time.perf_counter() - began
    return q, time.perf_counter() - began


def validation_fn(budget: ErrorBudget):
    """NNCF's ``validation_fn`` for ``budget`` and the ``max_drop`` that matches it: the metric is
    minus the error of the model's outputs against the reference outputs each data item carries
    (``(feeds, reference)``): with one lower-is-better limit (``nmse=1e-3``) its value on the worst
    output, and ``max_drop`` its bound; otherwise the budget's excess (:attr:`Accuracy.excess`, at
    most 1 exactly when it holds) and ``max_drop`` 1. The source scores about 0, so an absolute
    drop within ``max_drop`` is the budget held (on the items NNCF validates on)."""
    lone = budget.limits[0] if len(budget.limits) == 1 and budget.limits[0].lower_is_better else None
    scale = lone.bound if lone is not None else 1.0

    def fn(compiled, items) -> float:
        reference, got = [], []
        for feeds, expected in items:
            result = compiled(feeds)
            by_name = {n: np.array(result[p]) for p in compiled.outputs for n in p.get_names()}
            reference.append(expected)
            got.append({n: by_name[n] for n in expected})
        excess = measure(reference, got, budget).excess
        return -(excess if math.isfinite(excess) else 1e9) * scale

    return fn, scale


def _accuracy_control_child(path: str, calibration, validation, references, budget: str, transformer: bool,
                            out: str) -> None:
    """The child of :func:`accuracy_control`: writes ``ac.xml`` (the model) and ``ac.json``
    (``seconds``, or ``failed``: why) into ``out``."""
    import nncf
    import openvino as ov

    fn, max_drop = validation_fn(ErrorBudget.parse(budget))
    model = ov.Core().read_model(path)
    began = time.perf_counter()
    try:
        q = nncf.quantize_with_accuracy_control(
            model, nncf.Dataset(list(calibration)), nncf.Dataset(list(zip(validation, references)), lambda item: item[0]),
            fn, max_drop=max_drop, drop_type=nncf.DropType.ABSOLUTE, subset_size=len(calibration),
            **_model_type(transformer))
    except Exception as e:  # noqa: BLE001
        Path(out, "ac.json").write_text(json.dumps({"failed": f"nncf.quantize_with_accuracy_control failed: "
                                                               f"{first_line(e)}"}))
        return
    seconds = time.perf_counter() - began
    ov.save_model(q, str(Path(out, "ac.xml")), compress_to_fp16=False)
    Path(out, "ac.json").write_text(json.dumps({"seconds": seconds}))


def accuracy_control(path: Path, calibration, validation, references, budget: ErrorBudget, transformer: bool,
                     timeout: float, out: Path) -> dict:
    """``nncf.quantize_with_accuracy_control`` in a fresh process of its own, stopped after
    ``timeout`` seconds (counted from the process's start: its imports and reading the model
    count against it). Returns ``{"seconds": the wall time of the call itself, "model": the path
    of the quantized model}``, or ``{"stopped_after_s": N}`` (capped: when it was stopped), or
    ``{"failed": why}``."""
    began = time.perf_counter()
    child = multiprocessing.get_context("spawn").Process(
        target=_accuracy_control_child,
        args=(str(path), list(calibration), list(validation), list(references), str(budget), transformer, str(out)))
    child.start()
    child.join(timeout)
    if child.is_alive():
        child.terminate()
        child.join(10)
        if child.is_alive():  # SIGTERM not heeded (inside a native call): SIGKILL
            child.kill()
            child.join()
        return {"stopped_after_s": round(time.perf_counter() - began, 1)}
    done = Path(out, "ac.json")
    if not done.exists():
        return {"failed": f"nncf.quantize_with_accuracy_control: the process ended with code {child.exitcode}"}
    result = json.loads(done.read_text())
    if "failed" in result:
        return result
    return {"seconds": round(result["seconds"], 1), "model": str(Path(out, "ac.xml"))}


def ov_runner(model, precision: str | None = None):
    """``run(names, feeds)`` of ``model`` (an ``openvino.Model`` or a model file's path) compiled
    on the CPU as OpenVINO's users do (the latency hint), at ``precision`` (``INFERENCE_PRECISION_HINT``;
    ``None``: OpenVINO's default on this CPU)."""
    import openvino as ov

    core = ov.Core()
    config = {"PERFORMANCE_HINT": "LATENCY"}
    if precision is not None:
        config["INFERENCE_PRECISION_HINT"] = precision
    compiled = core.compile_model(model if not isinstance(model, (str, Path)) else core.read_model(str(model)),
                                  "CPU", config)
    request = compiled.create_infer_request()

    def run(names, feeds):
        result = request.infer(feeds)
        by_name = {n: result[p] for p in compiled.outputs for n in p.get_names()}  # every alias (GPT-2's outputs have two)
        return [np.array(by_name[n]) for n in names]

    return SimpleNamespace(run=run)


def _runners(label: str, model, failed: dict) -> dict:
    """The runners of ``model`` at each of :data:`HINTS` (why one failed: into ``failed``)."""
    out = {}
    for suffix, precision in HINTS:
        try:
            out[label + suffix] = ov_runner(model, precision)
        except Exception as e:  # noqa: BLE001
            failed[label + suffix] = f"OpenVINO cannot compile it: {first_line(e)}"
    return out


def contenders(path: Path, graph, calibration, validation, references, budget: ErrorBudget, timeout: float,
               tmp: Path) -> tuple[dict, dict, dict]:
    """NNCF's contenders: runners by label (``run(names, feeds)``), why one could not be built
    (by label), and what each quantization took (``{label: {"seconds"| "stopped_after_s": N,
    "model_type": ...}}``). ``references`` are the source's outputs (by name) on ``validation``."""
    why = missing()
    if why:
        return {}, {QUANTIZE: why, ACCURACY_CONTROL: why}, {}
    transformer = is_transformer(graph)
    kind = {"model_type": "transformer" if transformer else "default"}
    runners, failed, info = {}, {}, {}
    model, seconds = quantize(path, calibration, transformer)
    info[QUANTIZE] = dict(kind, seconds=round(seconds, 1))
    if isinstance(model, str):
        failed[QUANTIZE] = model
    else:
        runners.update(_runners(QUANTIZE, model, failed))
    del model
    (tmp / "nncf_ac").mkdir()
    result = accuracy_control(path, calibration, validation, references, budget, transformer, timeout, tmp / "nncf_ac")
    info[ACCURACY_CONTROL] = dict(kind, **{k: v for k, v in result.items() if k != "model"})
    if "model" in result:
        runners.update(_runners(ACCURACY_CONTROL, result["model"], failed))
    else:
        failed[ACCURACY_CONTROL] = result.get("failed") or f"stopped after {result['stopped_after_s']:.0f} s " \
                                                             f"(--nncf-timeout {timeout:g})"
    return runners, failed, info
