"""BERT-base encoder (Devlin et al. 2019) with embeddings and pooler, as exporters emit it.

Attention uses MatMul/Reshape/Transpose/Softmax; GELU is the exact erf form; no attention
mask (every token attends to every token). Token types are all zero and positions are
``0..seq-1``, both as constant index tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto

from gspo.ir.builder import GraphBuilder
from gspo.ir.graph import Graph
from gspo.zoo.layers import linear

__all__ = ["BertConfig", "bert"]


@dataclass(frozen=True)
class BertConfig:
    """BERT's dimensions (the defaults are BERT-base)."""
    layers: int = 12
    hidden: int = 768
    heads: int = 12
    seq: int = 128
    vocab: int = 30522
    max_positions: int = 512
    intermediate: int = 3072


SIZES = {"full": BertConfig(), "tiny": BertConfig(2, 64, 4, 16, 512, 64, 256)}


def _layernorm(b: GraphBuilder, x: str, out: str | None = None) -> str:
    h = b.shape(x)[-1]
    gamma = b.weight("ln_gamma", (h,), loc=1.0, scale=0.05)
    beta = b.weight("ln_beta", (h,), scale=0.05)
    return b.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-12, out=out)


def _heads(b: GraphBuilder, x: str, cfg: BertConfig, perm: list[int]) -> str:
    shape = b.const("shape", [1, cfg.seq, cfg.heads, cfg.hidden // cfg.heads])
    return b.op("Transpose", [b.op("Reshape", [x, shape])], perm=perm)


def _attention(b: GraphBuilder, x: str, cfg: BertConfig) -> str:
    q = _heads(b, linear(b, x, cfg.hidden), cfg, [0, 2, 1, 3])
    k = _heads(b, linear(b, x, cfg.hidden), cfg, [0, 2, 3, 1])
    v = _heads(b, linear(b, x, cfg.hidden), cfg, [0, 2, 1, 3])
    scores = b.op("MatMul", [q, k])
    scores = b.op("Div", [scores, b.const("sqrt_d", np.array(np.sqrt(cfg.hidden // cfg.heads), np.float32))])
    probs = b.op("Softmax", [scores], axis=-1)
    ctx = b.op("Transpose", [b.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    ctx = b.op("Reshape", [ctx, b.const("shape", [1, cfg.seq, cfg.hidden])])
    return linear(b, ctx, cfg.hidden)


def _gelu(b: GraphBuilder, x: str) -> str:
    e = b.op("Erf", [b.op("Div", [x, b.const("sqrt2", np.array(np.sqrt(2.0), np.float32))])])
    e = b.op("Add", [e, b.const("one", np.array(1.0, np.float32))])
    return b.op("Mul", [b.op("Mul", [x, e]), b.const("half", np.array(0.5, np.float32))])


def bert(cfg: BertConfig = BertConfig(), seed: int = 0) -> Graph:
    """A BERT encoder with random weights, batch 1."""
    b = GraphBuilder("bert_base", seed=seed)
    ids = b.input("input_ids", (1, cfg.seq), TensorProto.INT64)
    with b.scope("embeddings"):
        word = b.op("Gather", [b.weight("word", (cfg.vocab, cfg.hidden), scale=0.02), ids])
        pos_ids = b.const("position_ids", np.arange(cfg.seq, dtype=np.int64)[None, :])
        pos = b.op("Gather", [b.weight("position", (cfg.max_positions, cfg.hidden), scale=0.02), pos_ids])
        type_ids = b.const("token_type_ids", np.zeros((1, cfg.seq), np.int64))
        typ = b.op("Gather", [b.weight("token_type", (2, cfg.hidden), scale=0.02), type_ids])
        x = _layernorm(b, b.op("Add", [b.op("Add", [word, pos]), typ]))
    for i in range(cfg.layers):
        with b.scope(f"layer{i}"):
            x = _layernorm(b, b.op("Add", [x, _attention(b, x, cfg)]))
            h = _gelu(b, linear(b, x, cfg.intermediate))
            last = "last_hidden_state" if i == cfg.layers - 1 else None
            x = _layernorm(b, b.op("Add", [x, linear(b, h, cfg.hidden)]), out=last)
    with b.scope("pooler"):
        first = b.op("Gather", [x, b.const("first", np.array(0, np.int64))], axis=1)
        pooled = b.op("Tanh", [linear(b, first, cfg.hidden)], out="pooler_output")
    return b.output(x, pooled).build()
