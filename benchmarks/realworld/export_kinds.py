"""Export the corpus's further kinds: the models users make with the usual tools besides torch.

Each is derived, by the tool users use, from a float32 export of ``export.py`` (which must have
written it first) or built from scikit-learn on random data; nothing is downloaded:

- static QDQ int8 (``onnxruntime.quantization.quantize_static``, QDQ format, random calibration);
- dynamic int8 (``onnxruntime.quantization.quantize_dynamic``: DynamicQuantizeLinear, MatMulInteger);
- float16 (``onnxconverter_common.float16``);
- onnxruntime's transformer optimizer output (com.microsoft Attention, SkipLayerNormalization, ...);
- scikit-learn pipelines through skl2onnx, with ZipMap (a sequence of maps) and without, a tree
  ensemble among them;
- a decoder MLP stack past protobuf's 2 GB, saved with external data (built with onnx.helper).

Usage (the export environment, ``make -C benchmarks/realworld env``)::

    benchmarks/realworld/.venv/bin/python benchmarks/realworld/export_kinds.py            # every kind
    benchmarks/realworld/.venv/bin/python benchmarks/realworld/export_kinds.py rf_zipmap  # some

Writes ``models/<name>.onnx`` and adds each to ``models/manifest.json``, as export.py does.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
MODELS_DIR = HERE / "models"


@dataclass
class Kind:
    """One derived corpus model: its source, the tool, and how it is made."""

    name: str
    source: str
    exporter: str  # the tool that wrote it
    make: object = field(repr=False)  # (path) -> None
    base: str = ""  # the export.py model it is derived from
    note: str = ""


# ------------------------------------------------------------------ quantized
class _RandomReader:
    """Calibration data for quantize_static: a few random inputs of the model's shapes."""

    def __init__(self, model_path: Path, count: int = 4):
        model = onnx.load(str(model_path), load_external_data=False)
        weights = {t.name for t in model.graph.initializer}
        rng = np.random.default_rng(0)
        self._feeds = []
        for _ in range(count):
            feed = {}
            for vi in model.graph.input:
                if vi.name in weights:
                    continue
                dims = [d.dim_value or 1 for d in vi.type.tensor_type.shape.dim]
                feed[vi.name] = rng.standard_normal(dims).astype(np.float32)
            self._feeds.append(feed)
        self._it = iter(self._feeds)

    def get_next(self):
        return next(self._it, None)

    def rewind(self):
        self._it = iter(self._feeds)


def static_qdq(base: str):
    def make(path: Path) -> None:
        from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

        src = MODELS_DIR / f"{base}.onnx"
        quantize_static(str(src), str(path), _RandomReader(src), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, per_channel=True)

    return make


def dynamic_int8(base: str):
    def make(path: Path) -> None:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(str(MODELS_DIR / f"{base}.onnx"), str(path), weight_type=QuantType.QInt8)

    return make


# ------------------------------------------------------------ half, fused
def float16(base: str):
    def make(path: Path) -> None:
        from onnxconverter_common import float16 as f16

        model = onnx.load(str(MODELS_DIR / f"{base}.onnx"))
        onnx.save(f16.convert_float_to_float16(model, keep_io_types=False), str(path))

    return make


def ort_transformer(base: str, model_type: str, heads: int, hidden: int):
    def make(path: Path) -> None:
        from onnxruntime.transformers.optimizer import optimize_model

        opt = optimize_model(str(MODELS_DIR / f"{base}.onnx"), model_type=model_type, num_heads=heads,
                             hidden_size=hidden, opt_level=1)
        opt.save_model_to_file(str(path))

    return make


# ------------------------------------------------------------- scikit-learn
def sklearn_pipeline(estimator: str, zipmap: bool):
    def make(path: Path) -> None:
        from skl2onnx import to_onnx
        from sklearn.datasets import make_classification
        from sklearn.ensemble import RandomForestClassifier
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler
        from sklearn.svm import SVC

        x, y = make_classification(n_samples=400, n_features=16, n_informative=8, n_classes=3, random_state=0)
        clf = {"rf": RandomForestClassifier(n_estimators=20, max_depth=8, random_state=0),
               "svc": SVC(probability=True, random_state=0)}[estimator]
        pipe = make_pipeline(StandardScaler(), clf).fit(x, y)
        options = None if zipmap else {id(clf): {"zipmap": False}}
        model = to_onnx(pipe, x[:1].astype(np.float32), options=options, target_opset={"": 17, "ai.onnx.ml": 3})
        onnx.save(model, str(path))

    return make


# ------------------------------------------------------------------ past 2 GB
def decoder_mlp_stack(layers: int = 4, hidden: int = 4096, inner: int = 11008):
    """A stack of SwiGLU MLP blocks with residuals (an LLM decoder's MLPs): ~0.54 GB a block at
    these sizes, 2.2 GB for four; saved with external data (one file), as exporters save them."""

    def make(path: Path) -> None:
        from onnx import TensorProto, helper, numpy_helper

        rng = np.random.default_rng(0)
        nodes, inits, x = [], [], "x"
        for i in range(layers):
            for w, shape in ((f"gate{i}", (hidden, inner)), (f"up{i}", (hidden, inner)), (f"down{i}", (inner, hidden))):
                inits.append(numpy_helper.from_array((rng.standard_normal(shape, np.float32) * 0.02), w))
            nodes += [helper.make_node("MatMul", [x, f"gate{i}"], [f"g{i}"]),
                      helper.make_node("MatMul", [x, f"up{i}"], [f"u{i}"]),
                      helper.make_node("Sigmoid", [f"g{i}"], [f"s{i}"]),
                      helper.make_node("Mul", [f"g{i}", f"s{i}"], [f"silu{i}"]),
                      helper.make_node("Mul", [f"silu{i}", f"u{i}"], [f"h{i}"]),
                      helper.make_node("MatMul", [f"h{i}", f"down{i}"], [f"d{i}"]),
                      helper.make_node("Add", [x, f"d{i}"], [f"r{i}"])]
            x = f"r{i}"
        io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", 16, hidden]) for n in ("x", x)]
        g = helper.make_graph(nodes, "decoder_mlp", io[:1], io[1:], initializer=inits)
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        onnx.save_model(model, str(path), save_as_external_data=True, location=path.name + ".data")

    return make


KINDS: list[Kind] = [
    Kind("mobilenetv3_qdq", "timm mobilenetv3_large_100, static QDQ int8", "onnxruntime.quantization",
         static_qdq("mobilenetv3_large"), "mobilenetv3_large"),
    Kind("resnet50_qdq", "torchvision resnet50, static QDQ int8", "onnxruntime.quantization",
         static_qdq("resnet50"), "resnet50"),
    Kind("distilbert_int8", "transformers DistilBertModel, dynamic int8", "onnxruntime.quantization",
         dynamic_int8("distilbert"), "distilbert"),
    Kind("efficientnet_b0_fp16", "timm efficientnet_b0, float16", "onnxconverter-common", float16("efficientnet_b0"),
         "efficientnet_b0"),
    Kind("bert_ort_fused", "transformers BertModel through onnxruntime's transformer optimizer",
         "onnxruntime.transformers", ort_transformer("bert", "bert", 4, 256), "bert"),
    Kind("rf_zipmap", "scikit-learn scaler + random forest, ZipMap output", "skl2onnx", sklearn_pipeline("rf", True)),
    Kind("rf_tensor", "scikit-learn scaler + random forest, tensor output", "skl2onnx", sklearn_pipeline("rf", False)),
    Kind("svc_zipmap", "scikit-learn scaler + SVC, ZipMap output", "skl2onnx", sklearn_pipeline("svc", True)),
    Kind("decoder_mlp_2gb", "4 SwiGLU MLP blocks (hidden 4096, inner 11008), 2.2 GB external data", "onnx.helper",
         decoder_mlp_stack()),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="Kinds to export (default: all).")
    ap.add_argument("--force", action="store_true", help="Export again even if the file exists.")
    args = ap.parse_args(argv)
    unknown = set(args.names) - {k.name for k in KINDS}
    if unknown:
        print(f"export_kinds.py: unknown model(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    MODELS_DIR.mkdir(exist_ok=True)
    manifest_path = MODELS_DIR / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    failed = 0
    for k in (k for k in KINDS if not args.names or k.name in args.names):
        path = MODELS_DIR / f"{k.name}.onnx"
        if path.exists() and not args.force and k.name in manifest:
            print(f"{k.name}: exists", flush=True)
            continue
        if k.base and not (MODELS_DIR / f"{k.base}.onnx").exists():
            failed += 1
            print(f"{k.name}: needs {k.base}.onnx first (export.py {k.base})", flush=True)
            continue
        start = time.perf_counter()
        try:
            k.make(path)
        except Exception as ex:  # one model's failure must not stop the others
            failed += 1
            print(f"{k.name}: export FAILED: {type(ex).__name__}: {str(ex).splitlines()[0] if str(ex) else ''}", flush=True)
            continue
        size = path.stat().st_size + sum(p.stat().st_size for p in path.parent.glob(path.name + ".data"))
        manifest[k.name] = {"name": k.name, "source": k.source, "exporter": k.exporter, "base": k.base,
                            "file": path.name, "export_s": round(time.perf_counter() - start, 1),
                            "mb": round(size / 2**20, 2), "note": k.note, "dynamic": {}}
        manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        print(f"{k.name}: {manifest[k.name]['mb']} MB, {manifest[k.name]['export_s']} s ({k.exporter})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
