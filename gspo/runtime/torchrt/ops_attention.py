"""Attention (opsets 23-25) and RotaryEmbedding (opset 23) of the torch runtime, as the ONNX
standard defines them (its reference implementation, ``onnx.reference.ops.op_attention``).

Attention is written out, not handed to ``scaled_dot_product_attention``: the standard scales Q
and K each by ``sqrt(scale)`` rounded to their type, softcaps before the mask, masks causally
bottom-right (offset by the cache), and gives a fully masked query row zeros where SDPA gives
NaN; each step here is the standard's, in the inputs' type (the softmax in
``softmax_precision`` when given). A case the standard leaves ambiguous is refused.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from gspo.runtime.torchrt.helpers import arg, known_dtype, wants
from gspo.runtime.torchrt.registry import Call, op, torch_dtype

_SOFTMAX_TYPES = (1, 10, 11, 16)  # FLOAT, FLOAT16, DOUBLE, BFLOAT16


def _given(c: Call, i: int) -> bool:
    return i < len(c.node.inputs) and bool(c.node.inputs[i])


def _attention_check(c: Call) -> str | None:
    if _given(c, 4) != _given(c, 5):
        return "past_key without past_value or the other way round"
    if _given(c, 6) and _given(c, 4):
        return "nonpad_kv_seqlen with a past cache (the standard allows one of them)"
    if wants(c, 3) and c.attr("qk_matmul_output_mode", 0) == 0 and c.attr("softcap", 0.0):
        # the attribute's text says 'raw QK', the standard's reference gives it softcapped
        return "qk_matmul_output_mode=0 with softcap (the standard's text and reference disagree)"
    if c.attr("qk_matmul_output_mode", 0) not in (0, 1, 2, 3):
        return f"qk_matmul_output_mode={c.attr('qk_matmul_output_mode')}"
    if c.attr("softmax_precision") is not None and c.attr("softmax_precision") not in _SOFTMAX_TYPES:
        return f"softmax_precision={c.attr('softmax_precision')}"
    rank = len(c.node.outputs[0].shape) if c.node.outputs[0].shape is not None else None
    if rank == 3 and (c.attr("q_num_heads") is None or c.attr("kv_num_heads") is None):
        return "3D inputs without q_num_heads and kv_num_heads"
    if rank not in (3, 4):
        return "inputs of unknown rank" if rank is None else f"rank-{rank} inputs"
    return known_dtype(c)


def _heads(t: torch.Tensor, n: int) -> torch.Tensor:
    """(batch, seq, n * size) -> (batch, n, seq, size)."""
    b, s, hidden = t.shape
    return t.reshape(b, s, n, hidden // n).transpose(1, 2)


def _allowed(c: Call, sq: int, skv: int, offset, device) -> torch.Tensor | None:
    """Which keys each query may attend by ``is_causal`` and the window attributes: (sq, skv),
    or (batch, 1, sq, skv) for a per-batch ``offset``; ``None``: all."""
    left, right = int(c.attr("left_window_size", -1)), int(c.attr("right_window_size", -1))
    causal = bool(c.attr("is_causal", 0))
    if not causal and left < 0 and right < 0:
        return None
    i = torch.arange(sq, device=device).reshape(sq, 1)
    j = torch.arange(skv, device=device).reshape(1, skv)
    if isinstance(offset, torch.Tensor):
        i = i + offset.reshape(-1, 1, 1, 1).to(torch.int64)  # (batch, 1, sq, 1)
    else:
        i = i + offset
    diff = i - j  # query position minus key position
    ok = torch.ones_like(diff, dtype=torch.bool)
    if causal:
        ok &= diff >= 0
    if left >= 0:
        ok &= diff <= left
    if right >= 0:
        ok &= -diff <= right
    return ok


def _bias(c: Call, x, q: torch.Tensor, skv: int, past: int) -> torch.Tensor | None:
    """The additive bias of the scores: the mask (padded to ``skv``), causal and window masks,
    and the padding of ``nonpad_kv_seqlen``; ``None`` when there is none."""
    mask, nonpad = arg(x, 3), arg(x, 6)
    sq, inf = q.shape[2], float("-inf")
    bias = None
    if mask is not None:
        pad = skv - mask.shape[-1]
        if pad > 0:
            mask = F.pad(mask, (0, pad), value=False if mask.dtype == torch.bool else inf)
        if mask.dtype == torch.bool:
            mask = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(~mask, inf)
        bias = mask.to(q.dtype)
    offset = nonpad.reshape(-1) - sq if nonpad is not None and arg(x, 4) is None else past
    ok = _allowed(c, sq, skv, offset, q.device)
    if ok is not None:
        band = torch.zeros(ok.shape, dtype=q.dtype, device=q.device).masked_fill(~ok, inf)
        bias = band if bias is None else bias + band
    if nonpad is not None:
        keep = torch.arange(skv, device=q.device).reshape(1, skv) < nonpad.reshape(-1, 1).to(torch.int64)
        padding = torch.zeros(keep.shape, dtype=q.dtype, device=q.device).masked_fill(~keep, inf)
        padding = padding.reshape(-1, 1, 1, skv)
        bias = padding if bias is None else bias + padding
    return bias


def _softmax(t: torch.Tensor) -> torch.Tensor:
    """The standard's softmax over the last axis: a row of only -inf gives zeros."""
    top = t.amax(-1, keepdim=True)
    top = torch.where(torch.isneginf(top), torch.zeros_like(top), top)
    e = torch.exp(t - top)
    s = e.sum(-1, keepdim=True)
    return e / torch.where(s == 0, torch.ones_like(s), s)


def _scores(c: Call, q, k, bias):
    """The QK scores (scaled, softcapped), the requested 4th output and the probabilities."""
    scale = c.attr("scale")
    scale = 1 / math.sqrt(q.shape[3]) if scale is None else float(scale)
    root = float(torch.tensor(math.sqrt(scale), dtype=torch.float64).to(q.dtype))  # sqrt(scale) in Q's type
    qk = torch.matmul(q * root, (k * root).transpose(-1, -2))
    raw = qk
    cap = float(c.attr("softcap", 0.0) or 0.0)
    if cap > 0:
        qk = torch.tanh(qk / cap) * cap
    mode = int(c.attr("qk_matmul_output_mode", 0))
    with_bias = qk if bias is None else qk + bias
    precision = c.attr("softmax_precision")
    logits = with_bias if precision is None else with_bias.to(torch_dtype(int(precision)))
    p = _softmax(logits)
    if bias is not None:  # a query row every key is masked from gives zeros
        masked = torch.isneginf(bias.amax(-1, keepdim=True))
        p = torch.where(masked, torch.zeros((), dtype=p.dtype, device=p.device), p)
    extra = {0: raw, 1: qk, 2: with_bias, 3: p}[mode]
    return extra, p.to(q.dtype)


@op("Attention", check=_attention_check)
def _attention(c: Call, x):
    q, k, v = x[0], x[1], x[2]
    three = q.dim() == 3
    if three:
        q = _heads(q, int(c.attr("q_num_heads")))
        k, v = (_heads(t, int(c.attr("kv_num_heads"))) for t in (k, v))
    past_k, past_v = arg(x, 4), arg(x, 5)
    present_k = k if past_k is None else torch.cat([past_k, k], dim=2)
    present_v = v if past_v is None else torch.cat([past_v, v], dim=2)
    bias = _bias(c, x, q, present_k.shape[2], 0 if past_k is None else past_k.shape[2])
    k, v = present_k, present_v
    hq, hk = q.shape[1], k.shape[1]
    if hq != hk and hq % hk == 0:  # grouped-query attention: each KV head serves hq // hk heads
        k, v = k.repeat_interleave(hq // hk, dim=1), v.repeat_interleave(hq // hk, dim=1)
    extra, p = _scores(c, q, k, bias)
    y = torch.matmul(p, v)
    if three:
        y = y.transpose(1, 2).reshape(y.shape[0], y.shape[2], -1)
    return [y, present_k, present_v, extra.to(c.out_dtype(3)) if wants(c, 3) else None]


def _rotary_check(c: Call) -> str | None:
    rank = len(c.node.outputs[0].shape) if c.node.outputs[0].shape is not None else None
    if rank == 3 and not c.attr("num_heads"):
        return "3D input without num_heads"
    if rank not in (3, 4):
        return "an input of unknown rank" if rank is None else f"a rank-{rank} input"
    return known_dtype(c)


@op("RotaryEmbedding", check=_rotary_check)
def _rotary(c: Call, x):
    t, cos, sin, pos = x[0], x[1], x[2], arg(x, 3)
    shape = t.shape
    y = t.transpose(1, 2) if t.dim() == 4 else t.reshape(shape[0], shape[1], int(c.attr("num_heads")), -1)
    d = int(c.attr("rotary_embedding_dim", 0) or 0) or y.shape[3]
    turn, keep = y[..., :d], y[..., d:]
    if pos is not None:
        cos, sin = cos[pos.to(torch.int64)], sin[pos.to(torch.int64)]
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
    if c.attr("interleaved", 0):
        x1, x2 = turn[..., 0::2], turn[..., 1::2]
    else:
        x1, x2 = turn[..., : d // 2], turn[..., d // 2:]
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    if c.attr("interleaved", 0):
        turn = torch.stack([real, imag], dim=-1).reshape(turn.shape)
    else:
        turn = torch.cat([real, imag], dim=-1)
    out = torch.cat([turn, keep], dim=-1)
    return [out.reshape(shape) if t.dim() == 3 else out.transpose(1, 2)]
