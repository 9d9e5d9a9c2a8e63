"""Export the real-world corpus: models as users export them, with random weights.

Every model is built in code from its library's own definition (timm, torchvision, Hugging Face
transformers with small configs, plain torch for the recurrent ones) with ``torch.manual_seed(0)``
and exported by torch's TorchScript exporter, its dynamo exporter, or both; some with dynamic
batch / sequence axes, as deployment exports usually have. Nothing is downloaded: no pretrained
weights, no hub.

Usage (the export environment has torch, which gspo itself does not need)::

    make -C benchmarks/realworld env        # benchmarks/realworld/.venv: torch 2.14.1, timm, transformers
    benchmarks/realworld/.venv/bin/python benchmarks/realworld/export.py            # every model
    benchmarks/realworld/.venv/bin/python benchmarks/realworld/export.py bert gpt2  # some

Writes ``benchmarks/realworld/models/<name>.onnx`` (git-ignored) and ``models/manifest.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
MODELS_DIR = HERE / "models"


@dataclass
class Entry:
    """One corpus model: how it is built and exported."""

    name: str
    source: str  # library and architecture, e.g. "timm mobilenetv3_large_100"
    exporter: str  # "torchscript" | "dynamo"
    build: object = field(repr=False)  # () -> (module, example args tuple, input names, output names)
    #: input name -> {axis: symbolic name}: dimensions exported dynamic.
    dynamic: dict = field(default_factory=dict)
    opset: int = 17
    note: str = ""


# ------------------------------------------------------------------------ builders
def _image(size=224, batch=1):
    return torch.randn(batch, 3, size, size)


def timm_model(arch, size=224, **kw):
    def build():
        import timm

        m = timm.create_model(arch, pretrained=False, **kw).eval()
        return m, (_image(size),), ["input"], ["logits"]

    return build


def torchvision_model(arch, size=224, outputs=("logits",), **kw):
    def build():
        import torchvision

        m = getattr(torchvision.models, arch)(weights=None, **kw).eval()
        return m, (_image(size),), ["input"], list(outputs)

    return build


class _Outputs(torch.nn.Module):
    """A library model with the outputs a deployment takes from it: ``pick(model, x)``."""

    def __init__(self, inner, pick):
        super().__init__()
        self.inner, self.pick = inner, pick

    def forward(self, x):
        return self.pick(self.inner, x)


def torchvision_segmentation(arch, size=224):
    def build():
        import torchvision

        inner = getattr(torchvision.models.segmentation, arch)(weights=None, weights_backbone=None).eval()
        return _Outputs(inner, lambda m, x: m(x)["out"]).eval(), (_image(size),), ["input"], ["mask"]

    return build


def _raw_head(m, x):
    """A torchvision detector's per-anchor class scores and box offsets, before decoding and NMS."""
    head = m.head(list(m.backbone(x).values()))
    return head["cls_logits"], head["bbox_regression"]


def torchvision_detector(arch, size=320):
    """A detector as deployed: backbone, feature pyramid and head, the raw per-anchor class scores
    and box offsets out; decoding the boxes and NMS stay outside the model."""
    def build():
        import torchvision

        inner = getattr(torchvision.models.detection, arch)(weights=None, weights_backbone=None).eval()
        return _Outputs(inner, _raw_head).eval(), (_image(size),), ["input"], ["scores", "boxes"]

    return build


SEQ = 128


def _token_inputs(vocab, batch=1, seq=SEQ):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    return ids, mask


def hf_bert(full=False):
    """BERT (4 layers, hidden 256; ``full``: BERT-base as transformers configures it, 12 layers,
    hidden 768, 30522 tokens, 110M parameters)."""
    from transformers import BertConfig, BertModel

    cfg = BertConfig() if full else BertConfig(vocab_size=8000, hidden_size=256, num_hidden_layers=4,
                                               num_attention_heads=4, intermediate_size=1024,
                                               max_position_embeddings=512, type_vocab_size=2)
    m = BertModel(cfg).eval()
    ids, mask = _token_inputs(cfg.vocab_size)
    types = torch.zeros_like(ids)

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.m(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.last_hidden_state, out.pooler_output

    return Wrap().eval(), (ids, mask, types), ["input_ids", "attention_mask", "token_type_ids"], ["last_hidden_state", "pooler_output"]


def hf_distilbert():
    from transformers import DistilBertConfig, DistilBertModel

    cfg = DistilBertConfig(vocab_size=8000, dim=256, n_layers=4, n_heads=4, hidden_dim=1024)
    m = DistilBertModel(cfg).eval()
    ids, mask = _token_inputs(cfg.vocab_size)

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    return Wrap().eval(), (ids, mask), ["input_ids", "attention_mask"], ["last_hidden_state"]


def _decoder(m, vocab):
    """A decoder-only model as exported: token ids in, the last hidden state out, no cache."""
    ids, _ = _token_inputs(vocab)

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            return self.m(input_ids=input_ids, use_cache=False).last_hidden_state

    return Wrap().eval(), (ids,), ["input_ids"], ["last_hidden_state"]


def hf_gpt2():
    from transformers import GPT2Config, GPT2Model

    cfg = GPT2Config(vocab_size=8000, n_embd=256, n_layer=4, n_head=4, n_positions=512, use_cache=False,
                     bos_token_id=0, eos_token_id=0)
    return _decoder(GPT2Model(cfg).eval(), cfg.vocab_size)


def hf_gpt2_kv(layers=4, past=127, full=False):
    """GPT-2 as a decoding step is exported: one new token, each layer's cached keys and values
    in (``past`` earlier tokens), the hidden state and the grown cache out (``full``: GPT-2 small
    as transformers configures it, 12 layers, hidden 768, 124M parameters)."""
    from transformers import DynamicCache, GPT2Config, GPT2Model

    if full:
        layers = 12
    cfg = GPT2Config() if full else GPT2Config(vocab_size=8000, n_embd=256, n_layer=layers, n_head=4,
                                               n_positions=512, bos_token_id=0, eos_token_id=0)
    m = GPT2Model(cfg).eval()
    ids = _token_inputs(cfg.vocab_size, seq=1)[0]
    kv = tuple(torch.randn(1, cfg.n_head, past, cfg.n_embd // cfg.n_head) for _ in range(2 * layers))

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, input_ids, *kv):
            cache = DynamicCache()
            for i in range(layers):
                cache.update(kv[2 * i], kv[2 * i + 1], i)
            out = self.m(input_ids=input_ids, past_key_values=cache, use_cache=True)
            present = []
            for layer in out.past_key_values.layers:
                present += [layer.keys, layer.values]
            return (out.last_hidden_state, *present)

    names = [f"past_{kind}_{i}" for i in range(layers) for kind in ("key", "value")]
    return Wrap().eval(), (ids, *kv), ["input_ids", *names], ["last_hidden_state", *[n.replace("past", "present")
                                                                                        for n in names]]


def hf_vit():
    """ViT-B/16 as transformers configures it (224 px, 12 layers, hidden 768, 86M parameters), the
    last hidden state and the pooled output."""
    from transformers import ViTConfig, ViTModel

    m = ViTModel(ViTConfig()).eval()

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, pixel_values):
            out = self.m(pixel_values=pixel_values)
            return out.last_hidden_state, out.pooler_output

    return Wrap().eval(), (_image(),), ["pixel_values"], ["last_hidden_state", "pooler_output"]


def hf_llama():
    from transformers import LlamaConfig, LlamaModel

    cfg = LlamaConfig(vocab_size=8000, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, use_cache=False)
    return _decoder(LlamaModel(cfg).eval(), cfg.vocab_size)


def hf_t5_encoder():
    from transformers import T5Config, T5EncoderModel

    cfg = T5Config(vocab_size=8000, d_model=256, d_kv=64, d_ff=1024, num_layers=4, num_heads=4)
    m = T5EncoderModel(cfg).eval()
    ids, mask = _token_inputs(cfg.vocab_size)

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    return Wrap().eval(), (ids, mask), ["input_ids", "attention_mask"], ["last_hidden_state"]


def hf_whisper_encoder():
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    cfg = WhisperConfig(d_model=256, encoder_layers=4, encoder_attention_heads=4, encoder_ffn_dim=1024,
                        num_mel_bins=80, max_source_positions=1500)
    m = WhisperEncoder(cfg).eval()
    feats = torch.randn(1, 80, 3000)

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, input_features):
            return self.m(input_features).last_hidden_state

    return Wrap().eval(), (feats,), ["input_features"], ["last_hidden_state"]


def crnn():
    """A CRNN text recognizer as OCR pipelines export it: a small conv backbone, a BiLSTM, a
    per-column classifier (CTC head)."""

    class CRNN(torch.nn.Module):
        def __init__(self, classes=97):
            super().__init__()

            def block(i, o, pool):
                return [torch.nn.Conv2d(i, o, 3, padding=1), torch.nn.BatchNorm2d(o), torch.nn.ReLU(), torch.nn.MaxPool2d(pool)]

            self.cnn = torch.nn.Sequential(*block(3, 32, 2), *block(32, 64, 2), *block(64, 128, (2, 1)),
                                           *block(128, 128, (2, 1)), torch.nn.Conv2d(128, 256, (2, 1)), torch.nn.ReLU())
            self.rnn = torch.nn.LSTM(256, 128, num_layers=2, bidirectional=True, batch_first=True)
            self.fc = torch.nn.Linear(256, classes)

        def forward(self, x):
            f = self.cnn(x).squeeze(2).permute(0, 2, 1)
            y, _ = self.rnn(f)
            return self.fc(y).log_softmax(-1)

    return CRNN().eval(), (torch.randn(1, 3, 32, 320),), ["image"], ["logprobs"]


def vad_gru():
    """A small voice-activity detector: framed features, two GRU layers, a sigmoid per frame."""

    class VAD(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(40, 64)
            self.gru = torch.nn.GRU(64, 64, num_layers=2, batch_first=True)
            self.out = torch.nn.Linear(64, 1)

        def forward(self, x):
            y, _ = self.gru(torch.relu(self.proj(x)))
            return torch.sigmoid(self.out(y))

    return VAD().eval(), (torch.randn(1, 100, 40),), ["features"], ["speech_prob"]


def vad_if():
    """A voice-activity detector with an ``If`` on the sample rate, scripted as such models are
    (the TorchScript exporter writes the ``if`` as an ONNX ``If``, each branch with its own
    encoder and LSTM): 512 samples at 16 kHz, the same window averaged to 256 at any other rate;
    the LSTM state in and out as ``[2, batch, 128]``."""

    class VAD(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.enc16 = torch.nn.Linear(512, 128)
            self.enc8 = torch.nn.Linear(256, 128)
            self.lstm16 = torch.nn.LSTM(128, 128)
            self.lstm8 = torch.nn.LSTM(128, 128)
            self.out = torch.nn.Linear(128, 1)

        def forward(self, x, state, sr):
            h0, c0 = state[0:1], state[1:2]
            if bool(sr == 16000):
                y, (h, c) = self.lstm16(torch.relu(self.enc16(x)).unsqueeze(0), (h0, c0))
            else:
                half = torch.nn.functional.avg_pool1d(x.unsqueeze(1), 2).squeeze(1)
                y, (h, c) = self.lstm8(torch.relu(self.enc8(half)).unsqueeze(0), (h0, c0))
            return torch.sigmoid(self.out(y[0])), torch.cat([h, c], 0)

    args = (torch.randn(1, 512), torch.zeros(2, 1, 128), torch.tensor(16000))
    return torch.jit.script(VAD().eval()), args, ["input", "state", "sr"], ["speech_prob", "state_out"]


def rnn_loop():
    """A recurrent cell (tanh of two projections) stepped over time in a scripted ``for`` loop:
    an ONNX ``Loop`` whose body reads the projections' weights from the outer scope and
    appends each step's output to a sequence."""

    class Steps(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.wx = torch.nn.Linear(64, 64)
            self.wh = torch.nn.Linear(64, 64, bias=False)
            self.out = torch.nn.Linear(64, 16)

        def forward(self, x, h):
            ys = []
            for t in range(x.size(1)):
                h = torch.tanh(self.wx(x[:, t]) + self.wh(h))
                ys.append(self.out(h))
            return torch.stack(ys, 1), h

    return torch.jit.script(Steps().eval()), (torch.randn(1, 20, 64), torch.zeros(1, 64)), ["x", "h0"], ["y", "h"]


BATCH = {0: "batch"}
TOKENS = {0: "batch", 1: "sequence"}

CORPUS: list[Entry] = [
    Entry("mobilenetv3_large", "timm mobilenetv3_large_100", "torchscript", timm_model("mobilenetv3_large_100"),
          {"input": BATCH}),
    Entry("efficientnet_b0", "timm efficientnet_b0", "torchscript", timm_model("efficientnet_b0")),
    Entry("efficientnet_b0_dynamo", "timm efficientnet_b0", "dynamo", timm_model("efficientnet_b0"), opset=18),
    Entry("mixnet_s", "timm mixnet_s", "torchscript", timm_model("mixnet_s")),
    Entry("ghostnet", "timm ghostnet_100", "torchscript", timm_model("ghostnet_100")),
    Entry("regnety_002", "timm regnety_002", "dynamo", timm_model("regnety_002"), {"input": BATCH}, opset=18),
    Entry("convnext_atto", "timm convnext_atto", "torchscript", timm_model("convnext_atto")),
    Entry("vit_tiny", "timm vit_tiny_patch16_224", "dynamo", timm_model("vit_tiny_patch16_224"), opset=18),
    Entry("swin_tiny", "timm swin_tiny_patch4_window7_224 (shifted windows)", "torchscript",
          timm_model("swin_tiny_patch4_window7_224")),
    Entry("resnest14d", "timm resnest14d (split attention)", "torchscript", timm_model("resnest14d")),
    Entry("nasnetalarge", "timm nasnetalarge", "torchscript", timm_model("nasnetalarge", size=331)),
    Entry("resnet50", "torchvision resnet50", "torchscript", torchvision_model("resnet50"), {"input": BATCH}),
    Entry("resnet50_dynamo", "torchvision resnet50", "dynamo", torchvision_model("resnet50"), {"input": BATCH}, opset=18),
    Entry("inception_v3", "torchvision inception_v3", "torchscript",
          torchvision_model("inception_v3", size=299, aux_logits=False, init_weights=True)),
    Entry("googlenet", "torchvision googlenet (Inception-v1)", "torchscript",
          torchvision_model("googlenet", aux_logits=False, init_weights=True)),
    Entry("densenet121", "torchvision densenet121", "torchscript", torchvision_model("densenet121")),
    Entry("squeezenet", "torchvision squeezenet1_1", "torchscript", torchvision_model("squeezenet1_1")),
    Entry("shufflenet_v2", "torchvision shufflenet_v2_x1_0", "torchscript", torchvision_model("shufflenet_v2_x1_0")),
    Entry("lraspp_mobilenet", "torchvision lraspp_mobilenet_v3_large (segmentation)", "torchscript",
          torchvision_segmentation("lraspp_mobilenet_v3_large")),
    Entry("fcos_resnet50", "torchvision fcos_resnet50_fpn (detector: raw head outputs, NMS outside)", "torchscript",
          torchvision_detector("fcos_resnet50_fpn")),
    Entry("ssdlite_mobilenet", "torchvision ssdlite320_mobilenet_v3_large (detector: raw head outputs, NMS outside)",
          "torchscript", torchvision_detector("ssdlite320_mobilenet_v3_large")),
    Entry("bert", "transformers BertModel (4 layers, hidden 256)", "torchscript", hf_bert,
          {"input_ids": TOKENS, "attention_mask": TOKENS, "token_type_ids": TOKENS}),
    Entry("bert_dynamo", "transformers BertModel (4 layers, hidden 256)", "dynamo", hf_bert, opset=18),
    Entry("distilbert", "transformers DistilBertModel (4 layers, hidden 256)", "torchscript", hf_distilbert),
    Entry("gpt2", "transformers GPT2Model (4 layers, hidden 256)", "dynamo", hf_gpt2, opset=18),
    Entry("gpt2_kv", "transformers GPT2Model, one decoding step with a KV cache (4 layers, 127 cached tokens)",
          "torchscript", hf_gpt2_kv),
    Entry("llama", "transformers LlamaModel (4 layers, hidden 256, grouped-query attention)", "dynamo", hf_llama,
          opset=18),
    Entry("repvgg_a0", "timm repvgg_a0 (unfused training-time branches)", "torchscript", timm_model("repvgg_a0")),
    Entry("hrnet_w18_small", "timm hrnet_w18_small (parallel resolutions)", "torchscript",
          timm_model("hrnet_w18_small")),
    Entry("t5_encoder", "transformers T5EncoderModel (4 layers, d_model 256)", "torchscript", hf_t5_encoder),
    Entry("whisper_encoder", "transformers WhisperEncoder (4 layers, d_model 256)", "torchscript", hf_whisper_encoder),
    # full size, as the models people quantize are (the precision benchmark's large rows)
    Entry("bert_base", "transformers BertModel, BERT-base (12 layers, hidden 768), sequence 128", "torchscript",
          lambda: hf_bert(full=True)),
    Entry("vit_b16", "transformers ViTModel, ViT-B/16 (12 layers, hidden 768), 224 px", "torchscript", hf_vit),
    Entry("gpt2_kv_small", "transformers GPT2Model, GPT-2 small (12 layers, hidden 768), one decoding step with a "
          "KV cache of 127 tokens", "torchscript", lambda: hf_gpt2_kv(full=True)),
    Entry("crnn", "CRNN text recognizer (conv + BiLSTM + CTC head)", "torchscript", crnn, {"image": {0: "batch"}}),
    Entry("vad_gru", "voice-activity detector (GRU)", "torchscript", vad_gru),
    # control flow, scripted: an If on an input's value, a Loop over a dynamic axis
    Entry("vad_if", "voice-activity detector with an If on the sample rate (scripted)", "torchscript", vad_if,
          {"input": BATCH, "state": {1: "batch"}}),
    Entry("rnn_loop", "recurrent cell stepped over time in a scripted loop", "torchscript", rnn_loop,
          {"x": {0: "batch", 1: "time"}, "h0": BATCH}),
    # older opsets and dynamic spatial axes, as older deployment pipelines export them
    Entry("squeezenet_opset9", "torchvision squeezenet1_1 at opset 9", "torchscript",
          torchvision_model("squeezenet1_1"), opset=9),
    Entry("regnety_002_dynamic_hw", "timm regnety_002, dynamic batch, height and width", "torchscript",
          timm_model("regnety_002"), {"input": {0: "batch", 2: "height", 3: "width"}}),
]


# ------------------------------------------------------------------------- export
def export(entry: Entry, path: Path) -> None:
    torch.manual_seed(0)
    module, args, inputs, outputs = entry.build()
    with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        if entry.exporter == "torchscript":
            torch.onnx.export(module, args, str(path), dynamo=False, opset_version=entry.opset,
                              input_names=inputs, output_names=outputs,
                              dynamic_axes=entry.dynamic or None, do_constant_folding=True)
        else:
            dynamic_shapes = None
            if entry.dynamic:
                dynamic_shapes = {
                    name: {ax: torch.export.Dim.AUTO for ax in entry.dynamic.get(name, {})} for name in inputs
                }
                dynamic_shapes = tuple(dynamic_shapes[n] or None for n in inputs)
            program = torch.onnx.export(module, args, dynamo=True, opset_version=entry.opset,
                                        input_names=inputs, output_names=outputs,
                                        dynamic_shapes=dynamic_shapes, optimize=True, verify=False)
            program.save(str(path), external_data=False)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="Models to export (default: all).")
    ap.add_argument("--list", action="store_true", help="List the corpus and exit.")
    ap.add_argument("--force", action="store_true", help="Export again even if the file exists.")
    args = ap.parse_args(argv)
    if args.list:
        for e in CORPUS:
            print(f"{e.name:<24} {e.exporter:<12} {e.source}")
        return 0
    chosen = [e for e in CORPUS if not args.names or e.name in args.names]
    unknown = set(args.names) - {e.name for e in CORPUS}
    if unknown:
        print(f"export.py: unknown model(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    MODELS_DIR.mkdir(exist_ok=True)
    manifest_path = MODELS_DIR / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    failed = 0
    for e in chosen:
        path = MODELS_DIR / f"{e.name}.onnx"
        if path.exists() and not args.force and e.name in manifest:
            print(f"{e.name}: exists", flush=True)
            continue
        start = time.perf_counter()
        try:
            export(e, path)
        except Exception as ex:  # one model's failure must not stop the corpus
            failed += 1
            print(f"{e.name}: export FAILED: {type(ex).__name__}: {str(ex).splitlines()[0] if str(ex) else ''}", flush=True)
            continue
        record = {k: v for k, v in asdict(e).items() if k != "build"}
        record.update(file=path.name, torch=torch.__version__, export_s=round(time.perf_counter() - start, 1),
                      mb=round(path.stat().st_size / 2**20, 2))
        manifest[e.name] = record
        manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        print(f"{e.name}: {record['mb']} MB, {record['export_s']} s ({e.exporter})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
