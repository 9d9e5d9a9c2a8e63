"""Reduced precision within an accuracy budget: gspo against the best fp32 backend and the peers.

Usage (the real-world corpus exported: ``make -C benchmarks/realworld models``; OpenVINO installed)::

    .venv/bin/python benchmarks/precision/run.py
    .venv/bin/python benchmarks/precision/run.py --models resnet50 bert --time-budget 120 --budget nmse=1e-3
    .venv/bin/python benchmarks/precision/run.py --models bert_base vit_b16 gpt2_kv_small --precision int8 \\
        --samples 8 --time-budget 300

Per model, in a fresh process of its own, nothing else running on the machine:

1. Calibration and validation samples are written as ``.npz`` folders (``--samples`` each, 16 by
   default, disjoint seeds; random normal images, random token ids: the corpus has random
   weights, there is no real data).
2. ``gspo optimize --precision PRECISION --max-error BUDGET --calibration cal/ --validation val/
   --time-budget S`` (the Python API, the same options; ``--precision`` is ``bf16,int8`` unless
   given, ``int8`` for the weight-bound decoding step, :data:`MODEL_PRECISION`), its own wall
   time recorded beside the budget.
3. Interleaved (rotating order, 3 warm-up rounds, each sample a 5 ms pause, one untimed call,
   then enough calls for 10 ms; medians of ``--runs`` rounds): the source in onnxruntime as gspo
   runs it, in onnxruntime as installed (its own defaults: spinning threads) and in OpenVINO f32
   at its own, 1 and 2 threads (the fastest of these is the fp32 baseline); gspo's output
   through ``gspo.InferenceSession``; and the peers as their users get them: onnxruntime
   ``quantize_static`` with its defaults (QDQ, MinMax, calibrated on the same calibration
   samples) and ``quantize_dynamic`` with its defaults, both on onnxruntime, OpenVINO with
   its own default precision on this CPU (bf16), and NNCF on the OpenVINO model
   (``nncf_peer.py``: ``nncf.quantize``, the transformer preset on a transformer, and
   ``nncf.quantize_with_accuracy_control`` with the budget as its ``max_drop``, in a process of
   its own stopped after ``--nncf-timeout`` seconds), each compiled at OpenVINO's default
   precision and at f32, each quantization's wall time recorded.
   Then, in rounds of their own with the fp32 runs again (their many sessions kept out of the
   rounds above): every reduced-precision kind gspo builds for the precisions asked, from the
   source with every piece reduced, at each thread count gspo times, the budget ignored: what a
   budget lets gspo reach, short of its rewrites and the timing's noise.
4. Every contender's error against the source on held-out test samples (``--samples`` more, seeds
   of their own: neither gspo's fit nor NNCF's accuracy control, which both judge on the
   validation samples, sees them; gspo's accuracy metrics), and whether it holds the same budget.

The models: :data:`DEFAULT_MODELS` (a few minutes each on 2 cores), and the full-size rows
:data:`FULL_SIZE` (``benchmarks/realworld/export.py bert_base vit_b16 gpt2_kv_small``; named with
``--models``): BERT-base at sequence 128, ViT-B/16 and a GPT-2 small decoding step with a 127-token
KV cache, each about 20-25 minutes on 2 cores (estimated, not yet measured: gspo's
``--time-budget``, up to ``--nncf-timeout`` of NNCF's accuracy control, NNCF's and onnxruntime's
quantizations of 400 MB models, and the timed rounds at 100-300 ms a call).

Every row is marked with the CPU it ran on (its model name, cores and the instruction-set flags
that decide reduced precision's speed, :func:`cpu_record`); rows of one CPU are not comparable
with another's. A run merges its rows into the existing ``results.json`` (:func:`merged`): a row
replaces the earlier one of the same model, budget, precision and CPU; the rows of other CPUs
stay. Writes ``results.json`` and ``RESULTS.md`` beside this file (or into ``--out``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import nncf_peer
from nncf_peer import ov_runner
from report import CEILING, PRECISION, SAMPLES, cpu_record, markdown, merged

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
#: The full-size rows, named with ``--models`` (about 20-25 minutes each: see the module docstring).
FULL_SIZE = ("bert_base", "vit_b16", "gpt2_kv_small")
#: A model's own precisions where they are not :data:`PRECISION`: the GPT-2 decoding step is
#: weight-bound (a KV cache, one token), the case of the weight-only int8 kinds.
MODEL_PRECISION = {"gpt2_kv_small": "int8"}
#: The models whose row notes the weight-only kinds gspo's report names (or that it names none).
WEIGHT_BOUND = ("gpt2_kv_small",)
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
    try:  # OpenVINO as its users run it: the latency hint and its own precision (bf16 on this CPU)
        runners["openvino default (bf16)"] = ov_runner(path)
    except Exception as e:  # noqa: BLE001
        failed["openvino default (bf16)"] = first_line(e)
    return runners, failed


def _ceiling(path: Path, calibration: list[dict], precision: str) -> tuple[dict, dict]:
    """Runners (``run(names, feeds)``) of every reduced-precision kind gspo builds for
    ``precision`` (``bf16,int8``), each with every piece reduced, at each thread count gspo times
    it at (``@N``: N threads; none: the backend's default); and why a kind could not be built."""
    from gspo.precision.search import thread_settings
    from gspo.precision.variants import kinds, plain
    from gspo.runtime.executor import make_executor
    from gspo.runtime.quantize import activation_ranges
    from gspo.runtime.settings import RunSettings, with_settings
    from gspo.streams import node_id

    base = plain(load(path))
    every = frozenset(node_id(n) for n in base.nodes)
    asked = [p.strip() for p in precision.split(",") if p.strip()]
    found, _ = kinds(base, asked, ["ort", "openvino"], lambda: activation_ranges(base, calibration),
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


def _outputs_on(runner, names: list[str], samples: list[dict]) -> list[dict]:
    """``runner``'s outputs (by name) on each sample."""
    return [dict(zip(names, runner.run(names, s))) for s in samples]


def _errors(runners: dict, names: list[str], validation: list[dict], budget: ErrorBudget,
            reference: list[dict]) -> dict:
    out = {}
    for label, r in runners.items():
        acc = measure(reference, _outputs_on(r, names, validation), budget)
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


def _gspo(path: Path, precision: str, budget: ErrorBudget, tmp: Path, args) -> tuple:
    """gspo's optimize on the samples in ``tmp``: its result, its own wall time and the saved model."""
    began = time.perf_counter()
    result = optimize(str(path), precision=precision, max_error=str(budget), calibration=str(tmp / "cal"),
                      validation=str(tmp / "val"), time_budget=args.time_budget, seed=0)
    optimize_s = time.perf_counter() - began
    return result, optimize_s, result.save(tmp / "out.onnx")


def _one(name: str, path: Path, args, budget: ErrorBudget) -> dict:
    graph = load(path)
    precision = args.precision or MODEL_PRECISION.get(name, PRECISION)
    names = graph.output_names()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        calibration = _write_samples(graph, tmp / "cal", range(args.samples))
        validation = _write_samples(graph, tmp / "val", range(1000, 1000 + args.samples))
        # held out: neither gspo's fit nor NNCF's accuracy control sees these (both judge on validation)
        test = [random_inputs(graph, seed=s) for s in range(2000, 2000 + args.samples)]
        result, optimize_s, out_path = _gspo(path, precision, budget, tmp, args)
        runners, failed = _contenders(path, out_path, calibration)
        reference = _outputs_on(runners["fp32 onnxruntime"], names, validation)
        tested = _outputs_on(runners["fp32 onnxruntime"], names, test)
        more, more_failed, nncf = nncf_peer.contenders(path, graph, calibration, validation, reference, budget,
                                                       args.nncf_timeout, tmp)
        runners.update(more)
        failed.update(more_failed)
        errors = _errors(runners, names, test, budget, tested)
        timings = _timed(runners, names, validation[0], args.runs)
        runners["gspo"].close()
        # the ceiling apart, with the fp32 runs again: its many sessions and thread counts do not
        # share the rounds that compare gspo, the peers and fp32
        fp32_runners = {k: r for k, r in runners.items() if k.startswith("fp32")}
        del runners, more
        more, more_failed = _ceiling(path, calibration, precision)
        failed.update(more_failed)
        errors.update(_errors(more, names, test, budget, tested))
        ceiling = _timed({**fp32_runners, **more}, names, validation[0], args.runs)
        for r in more.values():
            r.close()
    measured = SimpleNamespace(optimize_s=optimize_s, timings=timings, ceiling=ceiling, errors=errors, failed=failed,
                               nncf=nncf, precision=precision, skipped=result.report.get("skipped") or [])
    return _row(name, result.report.get("precision") or {}, measured, budget, args)


def _row(name: str, block: dict, m, budget: ErrorBudget, args) -> dict:
    """A row of ``results.json``: the model, what was asked, gspo's choice, each contender's time,
    speedup and error (``m``: what :func:`_one` measured) and the CPU. ``block`` is the precision
    block of gspo's report (empty, or its validation ``None``, where the time budget skipped them:
    the row keeps what the peers measured)."""
    speedup = _speedups(m.timings)
    speedup.update({k: v for k, v in _speedups(m.ceiling).items() if k.startswith(CEILING)})
    timings = dict(m.timings)
    timings.update({k: v for k, v in m.ceiling.items() if k.startswith(CEILING)})
    fp32 = min(v for k, v in timings.items() if k.startswith("fp32"))
    kinds = [{k: v for k, v in kind.items() if k in ("kind", "pieces_reduced", "dropped", "median_ms", "threads")}
             for kind in block.get("kinds", [])]
    return {"model": name, "budget": str(budget), "precision": m.precision, "samples": args.samples,
            "cpu": cpu_record()["id"], "time_budget": args.time_budget, "optimize_s": round(m.optimize_s, 1),
            "chosen": block.get("chosen", "fp32 (no precision block in gspo's report)"), "skipped": m.skipped,
            "gspo_validation": (block.get("validation") or {}).get("outputs"),
            "fp32_best_ms": round(fp32, 3), "timings_ms": {k: round(v, 3) for k, v in timings.items()},
            "speedup_over_fp32": speedup,
            "ceiling_fp32_best_ms": round(min(v for k, v in m.ceiling.items() if k.startswith("fp32")), 3),
            "errors": m.errors, "failed": m.failed, "nncf": m.nncf,
            "chosen_threads": next((k.get("threads", 0) for k in kinds if k["kind"] == block.get("chosen")), 0),
            "kinds": kinds, "weight_only_kinds": [k for k in kinds if "weight" in k["kind"].lower()],
            "notes": list(block.get("notes", [])), "pieces": block.get("pieces")}


def _in_own_process(name: str, path: Path, args, budget: ErrorBudget) -> dict:
    """:func:`_one` in a fresh process: the sessions, thread pools and OpenVINO state the models
    measured before leave nothing behind (in one process, CRNN's fp32 runs after nine other
    models were 1.5x slower than in a process of its own)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_one, name, path, args, budget).result()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=list(DEFAULT_MODELS),
                        help=f"default: {' '.join(DEFAULT_MODELS)}; also the full-size {' '.join(FULL_SIZE)}")
    parser.add_argument("--time-budget", type=float, default=120.0)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--budget", "--max-error", dest="budget", default="nmse=1e-3", help="gspo's --max-error")
    parser.add_argument("--precision", default=None,
                        help=f"gspo's --precision (default {PRECISION}; "
                             + ", ".join(f"{m}: {p}" for m, p in MODEL_PRECISION.items()) + ")")
    parser.add_argument("--samples", type=int, default=SAMPLES, help="calibration and validation samples, each")
    parser.add_argument("--nncf-timeout", type=float, default=300.0,
                        help="seconds NNCF's accuracy control may run before it is stopped")
    parser.add_argument("--out", type=Path, default=HERE, help="the folder of results.json and RESULTS.md")
    return parser


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.samples < 1:
        print("--samples must be at least 1", file=sys.stderr)
        return 2
    budget = ErrorBudget.parse(args.budget)
    cpu = cpu_record()
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
        print(f"{name}: chose {r['chosen']} in {r['optimize_s']:.0f} s (budget {args.time_budget:g} s); "
              + ", ".join(f"{k} {v:.2f}x" for k, v in r["speedup_over_fp32"].items()), flush=True)
    command = "python benchmarks/precision/run.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    run = {"date": datetime.date.today().isoformat(), "machine": device_description("cpu"),
           "onnxruntime": runtime_version(), "command": command}
    path = args.out / "results.json"
    results = merged(json.loads(path.read_text()) if path.exists() else None, rows, cpu, run,
                     order=DEFAULT_MODELS + FULL_SIZE)
    path.write_text(json.dumps(results, indent=1) + "\n")
    (args.out / "RESULTS.md").write_text(markdown(results, WEIGHT_BOUND))
    return 0


if __name__ == "__main__":
    sys.exit(main())
