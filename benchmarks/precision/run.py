"""Reduced precision within an accuracy budget: gspo against the best fp32 backend and the peers.

Usage (the real-world corpus exported: ``make -C benchmarks/realworld models``; OpenVINO installed)::

    .venv/bin/python benchmarks/precision/run.py
    .venv/bin/python benchmarks/precision/run.py --models resnet50 bert --time-budget 120 --budget nmse=1e-3

Per model, in a fresh process of its own, nothing else running on the machine:

1. Calibration and validation samples are written as ``.npz`` folders (16 each, disjoint seeds;
   random normal images, random token ids: the corpus has random weights, there is no real data).
2. ``gspo optimize --precision bf16,int8 --max-error BUDGET --calibration cal/ --validation val/``
   (the Python API, the same options).
3. Interleaved (rotating order, 3 warm-up rounds, each sample a 5 ms pause, one untimed call,
   then enough calls for 10 ms; medians of ``--runs`` rounds): the source in onnxruntime as gspo
   runs it, in onnxruntime as installed (its own defaults: spinning threads) and in OpenVINO f32
   at its own, 1 and 2 threads (the fastest of these is the fp32 baseline); gspo's output
   through ``gspo.InferenceSession``; and the peers as their users get them: onnxruntime
   ``quantize_static`` with its defaults (QDQ, MinMax, calibrated on the same calibration
   samples) and ``quantize_dynamic`` with its defaults, both on onnxruntime, and OpenVINO with
   its own default precision on this CPU (bf16).
   Then, in rounds of their own with the fp32 runs again (their many sessions kept out of the
   rounds above): every reduced-precision kind gspo builds, from the source with every piece
   reduced, at each thread count gspo times, the budget ignored: what a budget lets gspo reach,
   short of its rewrites and the timing's noise.
4. Every contender's error against the source on the validation samples (gspo's accuracy
   metrics), and whether it holds the same budget.

Writes ``results.json`` and ``RESULTS.md`` beside this file.
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from gspo.costmodel import device_description
from gspo.errors import GspoError, first_line
from gspo.ir import load
from gspo.precision.accuracy import ErrorBudget, measure
from gspo.runtime import (
    SessionConfig,
    calls_per_sample,
    interleaved,
    make_session,
    random_inputs,
    runtime_version,
    warm_sample,
)
from gspo.runtime.backends import load_runner
from gspo.runtime.deploy import InferenceSession
from gspo.runtime.npz import write_npz
from gspo.search import optimize

HERE = Path(__file__).resolve().parent
CORPUS = HERE.parent / "realworld" / "models"
#: The CNNs, transformers, a dense-prediction model (segmentation), two detectors and an OCR
#: recognizer.
DEFAULT_MODELS = ("resnet50", "mobilenetv3_large", "densenet121", "inception_v3", "vit_tiny", "bert", "distilbert",
                  "lraspp_mobilenet", "fcos_resnet50", "ssdlite_mobilenet", "crnn")
SAMPLES = 16
MIN_SAMPLE_S = 0.01
#: The pause before each block of calls, as deployed models are called (onnxruntime as installed
#: spins its idle threads for a while after a call: without it the next runner pays for them).
PAUSE_S = 0.005


def _write_samples(graph, folder: Path, seeds) -> list[dict]:
    folder.mkdir()
    samples = []
    for seed in seeds:
        feeds = random_inputs(graph, seed=seed)
        with open(folder / f"s{seed:04d}.npz", "wb") as f:
            write_npz(f, feeds)
        samples.append(feeds)
    return samples


def _peer_static(path: Path, calibration: list[dict]) -> bytes | str:
    """onnxruntime's quantize_static with its defaults, calibrated on ``calibration``."""
    from onnxruntime.quantization import CalibrationDataReader, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(calibration)

        def get_next(self):
            return next(self.it, None)

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "q.onnx"
        try:
            quantize_static(str(path), str(out), Reader())
        except Exception as e:  # noqa: BLE001 - the peer's own failure is a result
            return f"quantize_static failed: {first_line(e)}"
        return out.read_bytes()


def _peer_dynamic(path: Path) -> bytes | str:
    from onnxruntime.quantization import quantize_dynamic

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "q.onnx"
        try:
            quantize_dynamic(str(path), str(out))
        except Exception as e:  # noqa: BLE001
            return f"quantize_dynamic failed: {first_line(e)}"
        return out.read_bytes()


def _openvino_default(data: bytes):
    """OpenVINO as its users run it: the latency hint and its own precision (bf16 on this CPU)."""
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(core.read_model(io.BytesIO(data)), "CPU", {"PERFORMANCE_HINT": "LATENCY"})
    request = compiled.create_infer_request()

    def run(names, feeds):
        result = request.infer(feeds)
        by_name = {p.get_any_name(): result[p] for p in compiled.outputs}
        return [np.array(by_name[n]) for n in names]

    return SimpleNamespace(run=run)


def _contenders(path: Path, out_path: Path, calibration: list[dict]) -> tuple[dict, dict]:
    """Runners by label (``run(names, feeds)``) and why a peer could not be built."""
    data = path.read_bytes()
    runners, failed = {}, {}
    runners["fp32 onnxruntime"] = make_session(data, SessionConfig())
    import onnxruntime

    # as installed: onnxruntime's own defaults (its idle threads spin), which help a lone small model
    runners["fp32 onnxruntime as installed"] = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    for threads in (0, 1, 2):  # OpenVINO's own thread count, and each fixed one gspo also tries
        label = "fp32 openvino" + (f"@{threads}" if threads else "")
        try:
            runners[label] = load_runner("openvino", data, SessionConfig(intra_op_threads=threads))
        except GspoError as e:
            failed[label] = first_line(e)
    runners["gspo"] = InferenceSession(str(out_path))
    for label, made in (("ort quantize_static", _peer_static(path, calibration)),
                        ("ort quantize_dynamic", _peer_dynamic(path))):
        if isinstance(made, str):
            failed[label] = made
            continue
        try:
            runners[label] = make_session(made, SessionConfig())
        except GspoError as e:
            failed[label] = first_line(e)
    try:
        runners["openvino default (bf16)"] = _openvino_default(data)
    except Exception as e:  # noqa: BLE001
        failed["openvino default (bf16)"] = first_line(e)
    return runners, failed


#: The label prefix of the reduced-precision builds of the source, every piece reduced, the budget
#: ignored: the fastest of them bounds what a budget lets gspo reach here, short of its rewrites.
CEILING = "any error: "


def _ceiling(path: Path, calibration: list[dict]) -> tuple[dict, dict]:
    """Runners (``run(names, feeds)``) of every reduced-precision kind gspo builds, each with every
    piece reduced, at each thread count gspo times it at (``@N``: N threads; none: the backend's
    default); and why a kind could not be built."""
    from gspo.precision.search import thread_settings
    from gspo.precision.variants import kinds, plain
    from gspo.runtime.executor import make_executor
    from gspo.runtime.quantize import activation_ranges
    from gspo.runtime.settings import RunSettings, with_settings
    from gspo.streams import node_id

    base = plain(load(path))
    every = frozenset(node_id(n) for n in base.nodes)
    found, _ = kinds(base, ["bf16", "int8"], ["ort", "openvino"], lambda: activation_ranges(base, calibration),
                     calibration=calibration)
    runners, failed = {}, {}
    for kind in found:
        try:
            built = kind.build(every)
            for t in thread_settings(built):
                ex = make_executor(with_settings(built, RunSettings(t)), None, "cpu")
                runners[CEILING + kind.name + (f"@{t}" if t else "")] = SimpleNamespace(run=_outputs(ex), close=ex.close)
        except GspoError as e:
            failed[CEILING + kind.name] = first_line(e)
    return runners, failed


def _outputs(executor):
    """``run(names, feeds)`` of an executor: one run, the outputs named."""
    def run(names, feeds):
        out = executor.run(feeds)
        return [out[n] for n in names]

    return run


def _errors(runners: dict, names: list[str], validation: list[dict], budget: ErrorBudget) -> dict:
    reference = [dict(zip(names, runners["fp32 onnxruntime"].run(names, s))) for s in validation]
    out = {}
    for label, r in runners.items():
        got = [dict(zip(names, r.run(names, s))) for s in validation]
        acc = measure(reference, got, budget)
        out[label] = {"holds": acc.holds, "broken": list(acc.broken), "outputs": acc.to_json()["outputs"]}
    return out


def _timed(runners: dict, names: list[str], feeds: dict, runs: int) -> dict[str, float]:
    """Median milliseconds of each runner, interleaved (see the module docstring)."""
    fns = [(label, (lambda r=r: r.run(names, feeds))) for label, r in runners.items()]
    calls = calls_per_sample([fn for _, fn in fns], MIN_SAMPLE_S)
    return {t.label: t.median * 1e3 for t in interleaved([(lb, warm_sample(fn, calls)) for lb, fn in fns],
                                                        runs, 3, pause=PAUSE_S)}


def _speedups(timings: dict[str, float]) -> dict[str, float]:
    """Each runner's speedup over the fastest fp32 run timed in the same rounds."""
    fp32 = min(v for k, v in timings.items() if k.startswith("fp32"))
    return {k: round(fp32 / v, 3) for k, v in timings.items()}


def _one(name: str, path: Path, args, budget: ErrorBudget) -> dict:
    graph = load(path)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        calibration = _write_samples(graph, tmp / "cal", range(SAMPLES))
        validation = _write_samples(graph, tmp / "val", range(1000, 1000 + SAMPLES))
        began = time.perf_counter()
        result = optimize(str(path), precision="bf16,int8", max_error=str(budget), calibration=str(tmp / "cal"),
                          validation=str(tmp / "val"), time_budget=args.time_budget, seed=0)
        optimize_s = time.perf_counter() - began
        out_path = result.save(tmp / "out.onnx")
        runners, failed = _contenders(path, out_path, calibration)
        names = graph.output_names()
        errors = _errors(runners, names, validation, budget)
        timings = _timed(runners, names, validation[0], args.runs)
        runners["gspo"].close()
        # the ceiling apart, with the fp32 runs again: its many sessions and thread counts do not
        # share the rounds that compare gspo, the peers and fp32
        fp32_runners = {k: r for k, r in runners.items() if k.startswith("fp32")}
        more, more_failed = _ceiling(path, calibration)
        failed.update(more_failed)
        errors.update(_errors({"fp32 onnxruntime": runners["fp32 onnxruntime"], **more}, names, validation, budget))
        ceiling = _timed({**fp32_runners, **more}, names, validation[0], args.runs)
        for r in more.values():
            r.close()
    speedup = _speedups(timings)
    speedup.update({k: v for k, v in _speedups(ceiling).items() if k.startswith(CEILING)})
    timings.update({k: v for k, v in ceiling.items() if k.startswith(CEILING)})
    fp32 = min(v for k, v in timings.items() if k.startswith("fp32"))
    block = result.report["precision"]
    return {"model": name, "budget": str(budget), "optimize_s": round(optimize_s, 1), "chosen": block["chosen"],
            "gspo_validation": block["validation"]["outputs"], "fp32_best_ms": round(fp32, 3),
            "timings_ms": {k: round(v, 3) for k, v in timings.items()},
            "speedup_over_fp32": speedup, "ceiling_fp32_best_ms": round(min(v for k, v in ceiling.items()
                                                                             if k.startswith("fp32")), 3),
            "errors": errors, "failed": failed,
            "chosen_threads": next((k.get("threads", 0) for k in block["kinds"] if k["kind"] == block["chosen"]), 0),
            "kinds": [{k: v for k, v in kind.items() if k in ("kind", "pieces_reduced", "dropped", "median_ms", "threads")}
                      for kind in block["kinds"]], "pieces": block["pieces"]}


def _markdown(rows: list[dict], meta: dict) -> str:
    order = ["gspo", "ort quantize_static", "ort quantize_dynamic", "openvino default (bf16)"]
    lines = ["# Reduced precision within an accuracy budget", "",
             "; then ".join(f"`{c}`" for c in meta["commands"])
             + f" (a later command measured again the models it names) on {meta['machine']}, {meta['date']} "
             f"(onnxruntime {meta['onnxruntime']}). "
             "Each cell: speedup over the fastest fp32 run of the source (onnxruntime as gspo runs it, as installed, "
             "or OpenVINO f32 at its own, 1 or 2 threads), "
             "and whether the contender holds the model's budget (`--max-error`) on the 16 validation samples "
             "(ok / BREAKS). *Fastest at any error*: the fastest of the reduced-precision builds gspo makes of the "
             "source (every kind, every piece reduced, at the backend's default threads or `@N` threads), the "
             "budget ignored, timed in rounds of its own against the fp32 runs timed again: what a budget lets gspo "
             "reach here, short of its rewrites and the timing's noise. "
             "gspo's pick runs at its backend's default threads unless it names a count.", "",
             "| model | budget | fp32 best ms | gspo pick | " + " | ".join(order) + " | fastest at any error |",
             "|---|---|---|---|" + "---|" * (len(order) + 1)]
    for r in rows:
        cells = []
        for label in order:
            if label not in r["timings_ms"]:
                cells.append("n/a")
                continue
            ok = "ok" if r["errors"][label]["holds"] else "BREAKS"
            cells.append(f"{r['speedup_over_fp32'][label]:.2f}x {ok}")
        cells.append(_fastest_any_error(r))
        budget = r.get("budget", meta.get("budget"))
        threads = r.get("chosen_threads") or 0
        pick = r["chosen"] + (f", {threads} thread{'s' if threads > 1 else ''}" if threads else "")
        lines.append(f"| {r['model']} | {budget} | {r['fp32_best_ms']:.2f} | {pick} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _fastest_any_error(row: dict) -> str:
    """The fastest reduced build of the whole model with the budget ignored (the ceiling), its kind
    and whether it holds the budget; n/a where the row was measured without them."""
    ceiling = {k: v for k, v in row["speedup_over_fp32"].items() if k.startswith(CEILING)}
    if not ceiling:
        return "n/a"
    label = max(ceiling, key=ceiling.get)
    ok = "ok" if row["errors"][label]["holds"] else "BREAKS"
    return f"{ceiling[label]:.2f}x {ok} ({label[len(CEILING):]})"


def _in_own_process(name: str, path: Path, args, budget: ErrorBudget) -> dict:
    """:func:`_one` in a fresh process: the sessions, thread pools and OpenVINO state the models
    measured before leave nothing behind (in one process, CRNN's fp32 runs after nine other
    models were 1.5x slower than in a process of its own)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_one, name, path, args, budget).result()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=list(DEFAULT_MODELS))
    parser.add_argument("--time-budget", type=float, default=120.0)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--budget", default="nmse=1e-3")
    args = parser.parse_args(argv)
    budget = ErrorBudget.parse(args.budget)
    rows = []
    for name in args.models:
        path = CORPUS / f"{name}.onnx"
        if not path.exists():
            print(f"{name}: not exported (make -C benchmarks/realworld models)", file=sys.stderr)
            continue
        try:
            rows.append(_in_own_process(name, path, args, budget))
        except GspoError as e:
            print(f"{name}: {first_line(e)}", file=sys.stderr)
            continue
        r = rows[-1]
        print(f"{name}: chose {r['chosen']}; " + ", ".join(f"{k} {v:.2f}x" for k, v in r["speedup_over_fp32"].items()),
              flush=True)
    command = "python benchmarks/precision/run.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    meta = {"date": datetime.date.today().isoformat(), "machine": device_description("cpu"),
            "onnxruntime": runtime_version(), "commands": [command]}
    path = HERE / "results.json"
    if args.models != list(DEFAULT_MODELS) and path.exists():  # measured again: the models named replace theirs
        earlier = json.loads(path.read_text())
        again = {(r["model"], r["budget"]) for r in rows}
        kept = [dict(r, budget=r.get("budget") or earlier["meta"].get("budget")) for r in earlier["rows"]]
        rows = [r for r in kept if (r["model"], r["budget"]) not in again] + rows
        rows.sort(key=lambda r: (list(DEFAULT_MODELS).index(r["model"]) if r["model"] in DEFAULT_MODELS else 99,
                                 r["budget"]))
        meta["commands"] = earlier["meta"].get("commands", []) + [command]
    path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    (HERE / "RESULTS.md").write_text(_markdown(rows, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
