"""Models as users export them: small torch modules written out by torch's own ONNX exporter (the
ops and patterns real exports carry: shape arithmetic, masks, Erf-GELU, LSTM), loaded by gspo and
run through the torch runtime on torch's CPU device, on one stream and on Nimble's streams,
against onnxruntime. The real-world corpus needs timm and transformers to export; these need
only torch."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from gspo.ir import load  # noqa: E402
from gspo.runtime import make_session, random_inputs, run  # noqa: E402
from gspo.runtime.torchrt.executor import TorchConfig, TorchExecutor  # noqa: E402
from gspo.streams import assign_streams  # noqa: E402


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.BatchNorm2d(8), nn.Hardswish(),
            nn.MaxPool2d(3, stride=2, padding=1), nn.Conv2d(8, 16, 1), nn.SiLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))

    def forward(self, x):
        return self.body(x).softmax(-1)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 32)
        self.layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, activation="gelu", batch_first=True)

    def forward(self, ids):
        return self.layer(self.embed(ids)).mean(dim=1)


class CausalBlock(nn.Module):
    """A GPT-style block: causal mask from the sequence's shape, masked softmax, tanh-GELU."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads, self.d = heads, d
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(self.d, dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / (q.shape[-1] ** 0.5)
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, self.d))
        return x + self.mlp(self.ln2(x))


class Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 16, batch_first=True)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


MODELS = {
    "cnn": (SmallCNN, lambda: (torch.randn(1, 3, 32, 32),)),
    "encoder": (Encoder, lambda: (torch.randint(0, 50, (2, 12)),)),
    "causal_block": (CausalBlock, lambda: (torch.randn(1, 16, 32),)),
    "lstm": (Recurrent, lambda: (torch.randn(2, 6, 8),)),
}


def export(name: str, path) -> None:
    torch.manual_seed(0)
    cls, args = MODELS[name]
    module = cls().eval()
    with warnings.catch_warnings():  # with gradients on: TransformerEncoderLayer's fused fast path stays off
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args(), str(path), opset_version=17, dynamo=False)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_an_exported_model_runs_on_the_torch_runtime_as_onnxruntime_runs_it(name, tmp_path):
    path = tmp_path / f"{name}.onnx"
    export(name, path)
    g = load(path)
    feeds = random_inputs(g, seed=1)
    want = run(make_session(g), feeds)
    schedules = {"one stream": None, "streams": assign_streams(g, max_streams=3)}
    for label, schedule in schedules.items():
        with TorchExecutor(g, schedule, TorchConfig(device="cpu")) as ex:
            assert not ex.fallbacks, f"{label}: ops left to onnxruntime: {[str(f) for _, f in ex.fallbacks]}"
            got = ex.run(feeds)
        for out in want:
            assert got[out].dtype == want[out].dtype and got[out].shape == want[out].shape, (label, out)
            np.testing.assert_allclose(got[out], want[out], rtol=1e-3, atol=1e-4, err_msg=f"{name} {label} {out}")
