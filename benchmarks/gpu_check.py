"""Check gspo's whole CUDA path on a machine with an NVIDIA GPU, in one command, into a JSON report.

    python benchmarks/gpu_check.py [-o gpu_check.json] [--device-id 0]

Checks, each recorded with its numbers and a pass/fail:
  1. the providers each session really uses (CUDAExecutionProvider first, for every piece);
  2. outputs of the CPU, CUDA on one stream and CUDA on Nimble's streams equal within the stated
     tolerance (gspo's verify criterion), TF32 off;
  3. the multi-stream outputs over 100 repeats: the same each time (within the tolerance; whether
     bit-identical is reported too);
  4. per-piece timings from CUDA events, and the overlap of the streams from the event times;
  5. ``gspo calibrate --gpu NAME --budget 4 --passes 1`` runs and writes a profile;
  6. ``gspo bench`` of a branched zoo model at 1 stream, auto and Nimble's streams (capped at 4);
  7. the ``cuda`` placement backend: its runner computes what the CPU does, and ``gspo optimize
     --backends ort,cuda`` of that model (each piece and the whole model timed on the CPU and
     on the GPU) writes a model that ``gspo run`` runs as placed;
  8. ``gspo optimize --device cuda`` (with the profile of step 5) of each branched zoo model, joint
     and as the ablations rules-only (``--no-streams``) and streams-only (``--no-rules``): what was
     chosen (streams, rules), then one interleaved ``gspo bench --device cuda`` of the model and
     the three outputs, each on one stream and on its saved schedule: the speedup over
     onnxruntime's CUDA provider alone (the model as given, one session) and over one stream
     (the same output without its schedule), the table of the paper's Figure 5.
Exit 0 when all pass, 1 when one fails, 2 (one line) on a machine where CUDA cannot run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODELS = ("inception_v3", "nasnet_mobile", "nasrnn")  # branched zoo models, tiny size
REPEATS = 100
STREAMS = 4  # Nimble's streams capped as in the bench below


def environment(config) -> dict:
    from importlib import metadata

    from gspo.runtime.cuda.common import check, import_cudart, import_ort

    ort, cudart = import_ort(), import_cudart()
    props = check(cudart.cudaGetDeviceProperties(config.device_id), "cudaGetDeviceProperties")
    name = props.name.decode(errors="replace") if isinstance(props.name, bytes) else str(props.name)
    versions = {}
    for dist in ("onnxruntime-gpu", "cuda-python", "cuda-bindings", "numpy", "onnx"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    return {"gpu": name.rstrip("\x00"), "compute_capability": f"{props.major}.{props.minor}",
            "driver_cuda": check(cudart.cudaDriverGetVersion(), "cudaDriverGetVersion"),
            "runtime_cuda": check(cudart.cudaRuntimeGetVersion(), "cudaRuntimeGetVersion"),
            "onnxruntime_build_cuda": getattr(ort, "cuda_version", None), "versions": versions}


def check_model(name: str, config) -> dict:
    """Providers, CPU vs CUDA equality, repeats, event timings and overlap for one zoo model."""
    import numpy as np

    from gspo.ir import serialize
    from gspo.runtime import compare_outputs, make_session, random_inputs, run
    from gspo.runtime.backends import load_runner
    from gspo.runtime.cuda import CudaExecutor, stream_overlap
    from gspo.runtime.verify import Tolerance
    from gspo.streams import Schedule, assign_streams
    from gspo.zoo import build

    g = build(name, "tiny")
    feeds = random_inputs(g)
    tol = Tolerance()

    def compare(ref, got):
        return compare_outputs(ref, got, tol.rtol, tol.atol, tol.ntol)

    cpu = run(make_session(g), feeds)
    row: dict = {"model": name, "tolerance": {"rtol": tol.rtol, "atol": tol.atol, "ntol": tol.ntol}, "tf32": config.tf32}
    with CudaExecutor(g, Schedule.single(g), config) as one, CudaExecutor(g, assign_streams(g, max_streams=STREAMS), config) as multi:
        row["providers"] = {"one_stream": one.providers(), "multi_stream": multi.providers()}
        row["providers_ok"] = all(p[0] == "CUDAExecutionProvider" for p in one.providers() + multi.providers())
        got_one, got_multi = one.run(feeds), multi.run(feeds)
        row["streams"], row["pieces"] = multi.num_streams, len(multi.plan.segments)
        names = [v.name for v in g.outputs]
        placed = dict(zip(names, load_runner("cuda", serialize(g)).run(names, feeds)))
        diffs = {"cuda_one_vs_cpu": compare(cpu, got_one), "cuda_multi_vs_cpu": compare(cpu, got_multi),
                 "cuda_backend_runner_vs_cpu": compare(cpu, placed)}
        row["equal"] = {k: {"ok": v.equivalent, "max_abs": max(d.max_abs for d in v.outputs)} for k, v in diffs.items()}
        values = multi.upload(feeds)
        worst, identical = 0.0, True
        for _ in range(REPEATS):
            out = multi.run_device(values)
            again = {k: out[k].numpy() for k in multi.outputs}
            identical &= all(np.array_equal(again[k], got_multi[k]) for k in again)
            same = compare(got_multi, again)
            worst = max(worst, max(d.max_abs for d in same.outputs))
            if not same.equivalent:
                row["repeats_ok"] = False
        row.setdefault("repeats_ok", True)
        row["repeats"] = {"runs": REPEATS, "bit_identical": identical, "max_abs_vs_first": worst}
        for _ in range(10):  # warm-up (cuDNN picks its algorithms on the first runs)
            multi.time_run(values)
        total, pieces = multi.time_run(values)
        row["event_timing"] = {"total_ms": total * 1e3, "overlap_ms": stream_overlap(pieces),
                               "pieces": [vars(p) for p in pieces]}
    return row


def gspo_cli(*args: str, timeout: float = 900) -> dict:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "gspo", *args], capture_output=True, text=True, timeout=timeout)
    return {"args": list(args), "exit": done.returncode, "seconds": round(time.perf_counter() - start, 1),
            "stdout": done.stdout[-4000:], "stderr": done.stderr[-2000:]}


def check_cli(tmp: Path, device_id: int) -> dict:
    if device_id:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(device_id)  # the CLI uses device 0
    calib = gspo_cli("calibrate", "--gpu", "gpu-check", "--budget", "4", "--passes", "1",
                     "-o", str(tmp / "gpu-check.json"), "--db", str(tmp / "calibration.sqlite"))
    calib["profile_written"] = (tmp / "gpu-check.json").exists()
    model = tmp / "nasnet_mobile.onnx"
    zoo = gspo_cli("zoo", "nasnet_mobile", "-o", str(model))
    bench = gspo_cli("bench", str(model), "--device", "cuda", "--streams", "1,auto,4", "--runs", "50", "--json")
    if bench["exit"] == 0:
        bench["result"] = json.loads(bench["stdout"])
    placed, report = tmp / "placed.onnx", tmp / "placed.json"
    optimize = gspo_cli("optimize", str(model), "-o", str(placed), "--backends", "ort,cuda", "--time-budget", "120",
                        "--report", str(report))
    if optimize["exit"] == 0:
        optimize["placement"] = json.loads(report.read_text())["placement"]
    run_placed = gspo_cli("run", str(placed))
    return {"calibrate": calib, "zoo": zoo, "bench": bench, "optimize_placed": optimize, "run_placed": run_placed,
            "ok": calib["exit"] == 0 and calib["profile_written"] and zoo["exit"] == 0 and bench["exit"] == 0
            and optimize["exit"] == 0 and run_placed["exit"] == 0}


ABLATIONS = {"joint": (), "rules_only": ("--no-streams",), "streams_only": ("--no-rules",)}


def optimize_model(tmp: Path, name: str, profile: Path) -> dict:
    """Step 8 for one zoo model: the three optimizations, then one bench of all of them."""
    model = tmp / f"{name}.onnx"
    row: dict = {"model": name, "zoo": gspo_cli("zoo", name, "-o", str(model), "--force")}
    outputs = {}
    for kind, flags in ABLATIONS.items():
        out, rep = tmp / f"{name}.{kind}.onnx", tmp / f"{name}.{kind}.json"
        done = gspo_cli("optimize", str(model), "-o", str(out), "--device", "cuda", "--profile", str(profile),
                        "--report", str(rep), "--time-budget", "120", "--force", *flags)
        if done["exit"] == 0:
            r = json.loads(rep.read_text())
            done["chosen"] = {"option": r["chosen"], "streams": r["streams"], "syncs": r["syncs"],
                              "rules": r["substitutions"], "speedup_in_optimize": r["speedup"],
                              "device": r.get("device")}
            outputs[kind] = out
        row[kind] = done
    bench = gspo_cli("bench", str(model), *(str(o) for o in outputs.values()), "--device", "cuda",
                     "--streams", "1,auto", "--runs", "50", "--json")
    row["bench"] = bench
    if bench["exit"] == 0:
        rows = json.loads(bench["stdout"])["rows"]  # per model: [1 stream], [saved schedule]
        base = rows[0]["median_ms"]  # the model as given, one session: onnxruntime's CUDA provider alone
        for k, kind in enumerate(outputs, start=1):
            one, scheduled = rows[2 * k]["median_ms"], rows[2 * k + 1]["median_ms"]
            row[kind]["speedup_over_ort_cuda"] = base / scheduled
            row[kind]["speedup_over_one_stream"] = one / scheduled
    row["ok"] = row["zoo"]["exit"] == 0 and len(outputs) == len(ABLATIONS) and bench["exit"] == 0
    return row


def check_optimize(tmp: Path) -> dict:
    """Step 8: ``gspo optimize --device cuda`` on the branched zoo models, with the ablations."""
    profile = tmp / "gpu-check.json"
    if not profile.exists():
        return {"ok": False, "skipped": "no GPU profile: the calibration step failed"}
    rows = [optimize_model(tmp, name, profile) for name in MODELS]
    figure5 = {r["model"]: {k: r[k].get("speedup_over_ort_cuda") for k in ABLATIONS} for r in rows}
    return {"models": rows, "figure5_speedup_over_ort_cuda": figure5, "ok": all(r["ok"] for r in rows)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", default="gpu_check.json")
    parser.add_argument("--device-id", type=int, default=0)
    args = parser.parse_args()
    from gspo.runtime.cuda import CudaConfig, gpu_status

    config = CudaConfig(device_id=args.device_id, tf32=False)
    ok, why = gpu_status(config)
    if not ok:
        print(f"gpu_check: no usable CUDA GPU here: {why}", file=sys.stderr)
        return 2
    report: dict = {"status": why, "environment": environment(config), "models": []}
    for name in MODELS:
        report["models"].append(check_model(name, config))
    with tempfile.TemporaryDirectory() as d:
        report["cli"] = check_cli(Path(d), args.device_id)
        report["optimize_cuda"] = check_optimize(Path(d))
    checks = [m[k] for m in report["models"] for k in ("providers_ok", "repeats_ok")]
    checks += [e["ok"] for m in report["models"] for e in m["equal"].values()] + [report["cli"]["ok"], report["optimize_cuda"]["ok"]]
    report["ok"] = all(checks)
    Path(args.output).write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(f"gpu_check: {'all checks passed' if report['ok'] else 'a check FAILED'}; report in {args.output}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
