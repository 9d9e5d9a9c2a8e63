"""The real-world corpus carried to the GPU without weights: its skeletons, manifest and parts.

    benchmarks/realworld/.venv/bin/python benchmarks/realworld/export.py NAME ...   # the exports
    .venv/bin/python benchmarks/gpu/gpu_corpus.py NAME ...   # their skeletons and the manifest

Reads ``benchmarks/realworld/models/NAME.onnx`` (and its manifest.json: source, exporter),
writes ``benchmarks/gpu/corpus/NAME.onnx.gz`` (:mod:`skeleton`) and ``corpus/manifest.json``:
each model's source, exporter, the input shapes it runs at (dynamic axes at gspo's defaults),
node count, ops, skeleton size, the estimated seconds of its row in gpu_check's corpus step on
an H100, and the part (``corpus1``, ``corpus2``, ...) that runs it: parts are packed in the
order given so that each stays under :data:`PART_S`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
MODELS = HERE.parent / "realworld" / "models"
#: Seconds of one corpus part's step on an H100 (the environment step and the start come on top).
PART_S = 450
#: gspo optimize's time budget per corpus model (seconds): everything optimize does counts.
OPTIMIZE_BUDGET = 10.0


def estimate_s(nodes: int, weights_mib: float, budget: float = OPTIMIZE_BUDGET) -> float:
    """Seconds of one model's corpus row on an H100, conservatively: filling the weights,
    onnxruntime's CPU reference and conversion (3 s and 1 s per 10 MiB of weights),
    torch.compile reduce-overhead (:func:`compile_cost_s`), gspo optimize (its budget and 8 s of
    loading, verifying and saving: figure5's optimize of NasRNN took 3 s of its 20 s budget on the
    last H100 run) and timing (5 s: 30 interleaved runs of four runners of milliseconds)."""
    return round(3 + weights_mib / 10 + compile_cost_s(nodes, "reduce-overhead") + budget + 8 + 5)


def compile_cost_s(nodes: int, mode: str) -> float:
    """What one cold compile of ``mode`` is budgeted before it starts: 30 s and 1 s per 10 nodes
    for reduce-overhead (inductor: tracing, lowering, Triton kernels compiled on the machine's 16
    cores, CUDA-graph recording); max-autotune times each GEMM and convolution's choices: three
    times that."""
    base = 30 + nodes / 10
    return base if mode == "reduce-overhead" else 3 * base


def load_manifest(path: Path = CORPUS / "manifest.json") -> dict:
    return json.loads(Path(path).read_text()) if Path(path).exists() else {"models": []}


def parts(manifest: dict) -> dict[str, list[dict]]:
    """{part name: its models}, in manifest order."""
    out: dict[str, list[dict]] = {}
    for m in manifest.get("models", []):
        out.setdefault(m["part"], []).append(m)
    return out


def part_estimate_s(models: list[dict]) -> int:
    return int(sum(m["estimate_s"] for m in models))


def _entry(name: str, sources: dict) -> dict:
    import onnx
    import skeleton

    from gspo.ir import load

    path = MODELS / f"{name}.onnx"
    model = onnx.load(str(path))
    g = load(path)
    target = CORPUS / f"{name}.onnx.gz"
    size = skeleton.save_skeleton(skeleton.strip(model, seed=0), target)
    src = sources.get(name, {})
    return {"name": name, "source": src.get("source", ""), "exporter": src.get("exporter", ""),
            "skeleton": target.name, "skeleton_kib": round(size / 1024, 1),
            "weights_mib": round(path.stat().st_size / 2**20, 2), "nodes": len(g.nodes),
            "ops": sorted({n.op_type for n in g.nodes}),
            "input_shapes": {v.name: list(v.shape) for v in g.inputs},
            "estimate_s": estimate_s(len(g.nodes), path.stat().st_size / 2**20)}


def pack(models: list[dict], share: int = PART_S) -> None:
    """Give each model a part, in order, each part's estimates adding up to at most ``share``."""
    k, used = 1, 0
    for m in models:
        if used and used + m["estimate_s"] > share:
            k, used = k + 1, 0
        m["part"], used = f"corpus{k}", used + m["estimate_s"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="+", help="exported corpus models, in the order the parts take them")
    args = ap.parse_args(argv)
    missing = [n for n in args.names if not (MODELS / f"{n}.onnx").exists()]
    if missing:
        print(f"gpu_corpus.py: not exported: {', '.join(missing)} (run benchmarks/realworld/export.py)", file=sys.stderr)
        return 2
    sources_path = MODELS / "manifest.json"
    sources = json.loads(sources_path.read_text()) if sources_path.exists() else {}
    CORPUS.mkdir(exist_ok=True)
    models = []
    for name in args.names:
        models.append(_entry(name, sources))
        m = models[-1]
        print(f"{name}: {m['nodes']} nodes, {m['weights_mib']} MiB -> {m['skeleton_kib']} KiB, ~{m['estimate_s']} s",
              flush=True)
    pack(models)
    manifest = {"version": 1, "description": "Skeletons of benchmarks/realworld exports (benchmarks/gpu/skeleton.py): "
                "graphs without their weights, filled from a seed on the GPU machine.", "seed": 0,
                "optimize_budget_s": OPTIMIZE_BUDGET, "part_s": PART_S, "models": models}
    (CORPUS / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    for part, ms in parts(manifest).items():
        print(f"{part}: {len(ms)} models, ~{part_estimate_s(ms)} s")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.exit(main())
