"""A model carried without its weights: its "skeleton", and the model filled back from a seed.

    python benchmarks/gpu/skeleton.py strip MODEL.onnx SKELETON.onnx.gz [--seed 0]
    python benchmarks/gpu/skeleton.py fill SKELETON.onnx.gz MODEL.onnx

The GPU machines cannot export the real-world corpus and a run carries at most 64 MiB, so each
corpus graph travels as a skeleton: the ONNX model (graph, attributes, shapes, dtypes, opset)
with every large weight replaced by a record (name, dtype, shape, and the statistics of the
weight it replaces: mean, standard deviation, min, max), gzip'd. What random values would break
is kept verbatim: integer and bool tensors of at most :data:`KEEP_INT_BYTES` (Reshape shapes,
Gather indices, Slice starts, masks, position ids), any tensor of at most :data:`KEEP_BYTES`,
and float tensors holding non-finite values or at most two distinct values (attention masks).

Filling is deterministic across machines: tensor ``name`` is drawn from
``numpy.random.default_rng([seed, crc32(name)])`` (PCG64: the same bits on every platform), as
``mean + std * N(0, 1)`` clipped to the recorded [min, max] (the export's own random
initialisation's scale, so activations stay where the export had them: a BatchNorm variance
stays positive, a LayerNorm scale of ones stays ones); 8-bit integer weights (quantized models)
uniformly in their recorded range. The corpus' weights are random anyway; equivalence is judged
against onnxruntime's CPU provider on the same filled model.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import zlib
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto, numpy_helper

#: A tensor of at most this many bytes is kept verbatim.
KEEP_BYTES = 4096
#: An integer or bool tensor of at most this many bytes is kept verbatim (indices, shapes, masks).
KEEP_INT_BYTES = 4 << 20
#: Where the records live: the skeleton's metadata_props key.
KEY = "gspo.skeleton"
_FILLED_INTS = (TensorProto.INT8, TensorProto.UINT8, TensorProto.INT4, TensorProto.UINT4)


def _tensors(graph: onnx.GraphProto, path: str = ""):
    """(path, container, index, tensor) of every initializer and Constant value, subgraphs included."""
    for k, t in enumerate(graph.initializer):
        yield f"{path}init:{t.name}", graph.initializer, k, t
    for n, node in enumerate(graph.node):
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR and node.op_type == "Constant":
                yield f"{path}const:{n}:{node.name}:{a.name}", None, (node, a), a.t
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _tensors(a.g, f"{path}{n}/{a.name}/")
            for j, g in enumerate(a.graphs):
                yield from _tensors(g, f"{path}{n}/{a.name}{j}/")


def _keep(array: np.ndarray, dtype: int) -> bool:
    """Whether a tensor must travel verbatim (random values there would break the model)."""
    if array.nbytes <= KEEP_BYTES:
        return True
    if array.dtype.kind in "iub" and dtype not in _FILLED_INTS:
        return array.nbytes <= KEEP_INT_BYTES
    if array.dtype.kind == "f":
        wide = array.astype(np.float32, copy=False)
        return not np.isfinite(wide).all() or np.unique(wide[:4096]).size <= 2 and np.unique(wide).size <= 2
    return array.dtype.kind not in "iu"


def _record(key: str, t: TensorProto, array: np.ndarray) -> dict:
    wide = array.astype(np.float64)
    return {"key": key, "name": t.name, "dtype": int(t.data_type), "dims": [int(d) for d in t.dims],
            "mean": float(wide.mean()), "std": float(wide.std()), "min": float(wide.min()), "max": float(wide.max())}


def strip(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """The skeleton of ``model`` (a copy; ``model`` is left as it is)."""
    skel = onnx.ModelProto()
    skel.CopyFrom(model)
    records = []
    for key, _, _, t in list(_tensors(skel.graph)):
        if t.data_location == TensorProto.EXTERNAL:
            raise ValueError(f"{t.name!r} has external data: load the model with its data first")
        array = numpy_helper.to_array(t)
        if _keep(array, t.data_type):
            continue
        records.append(_record(key, t, array))
        name, dtype, dims = t.name, t.data_type, list(t.dims)
        t.Clear()
        t.name, t.data_type = name, dtype
        t.dims.extend(dims)
    meta = {m.key: m for m in skel.metadata_props}
    entry = meta.get(KEY) or skel.metadata_props.add()
    entry.key, entry.value = KEY, json.dumps({"version": 1, "seed": seed, "tensors": records})
    return skel


def draw(record: dict, seed: int) -> np.ndarray:
    """The filled value of one record: deterministic in (seed, name), on every machine."""
    rng = np.random.default_rng([seed, zlib.crc32(record["key"].encode())])
    dims = tuple(record["dims"])
    np_type = onnx.helper.tensor_dtype_to_np_dtype(record["dtype"])
    lo, hi = record["min"], record["max"]
    if record["dtype"] in _FILLED_INTS:
        return rng.integers(int(lo), int(hi) + 1, size=dims, dtype=np.int64).astype(np_type)
    values = record["mean"] + record["std"] * rng.standard_normal(dims, dtype=np.float64)
    return np.clip(values, lo, hi).astype(np.float32).astype(np_type)


def fill(skel: onnx.ModelProto, seed: int | None = None) -> onnx.ModelProto:
    """The model a skeleton stands for, its weights drawn from the seed (the skeleton's own by
    default); ``skel`` is left as it is."""
    meta = {m.key: m.value for m in skel.metadata_props}
    if KEY not in meta:
        raise ValueError("not a skeleton: no gspo.skeleton metadata")
    data = json.loads(meta[KEY])
    seed = data["seed"] if seed is None else seed
    model = onnx.ModelProto()
    model.CopyFrom(skel)
    records = {r["key"]: r for r in data["tensors"]}
    for key, _, _, t in _tensors(model.graph):
        r = records.get(key)
        if r is None:
            continue
        filled = numpy_helper.from_array(draw(r, seed), t.name)
        filled.data_type = r["dtype"]
        t.CopyFrom(filled)
    props = [m for m in model.metadata_props if m.key != KEY]
    del model.metadata_props[:]
    model.metadata_props.extend(props)
    return model


def save_skeleton(skel: onnx.ModelProto, path: Path) -> int:
    """Write a skeleton gzip'd (deterministic bytes: no file name or time in the header); its size."""
    data = gzip.compress(skel.SerializeToString(), compresslevel=9, mtime=0)
    Path(path).write_bytes(data)
    return len(data)


def load_skeleton(path: Path) -> onnx.ModelProto:
    return onnx.load_from_string(gzip.decompress(Path(path).read_bytes()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("strip", help="a model -> its skeleton (.onnx.gz)")
    s.add_argument("model")
    s.add_argument("skeleton")
    s.add_argument("--seed", type=int, default=0)
    f = sub.add_parser("fill", help="a skeleton -> a model with weights drawn from its seed")
    f.add_argument("skeleton")
    f.add_argument("model")
    args = ap.parse_args(argv)
    src, dst = (args.model, args.skeleton) if args.cmd == "strip" else (args.skeleton, args.model)
    if Path(dst).exists():
        print(f"skeleton.py: {dst} exists: not overwritten", file=sys.stderr)
        return 2
    try:
        if args.cmd == "strip":
            size = save_skeleton(strip(onnx.load(src), args.seed), Path(dst))
            print(f"{dst}: {size / 2**10:.1f} KiB")
        else:
            onnx.save(fill(load_skeleton(Path(src))), dst)
    except (OSError, ValueError, DecodeError) as e:  # one line, never a traceback
        print(f"skeleton.py: {src}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
