"""LSTM, GRU and RNN of the torch runtime (the default activations; a Python loop over time steps,
the input projections of every step computed first in one matrix product).

``sequence_lens`` masks each batch entry's steps past its length: its state stays, its
outputs there are zeros. Other activations, ``clip`` and LSTM's ``input_forget`` are refused.
"""

from __future__ import annotations

import torch

from gspo.runtime.torchrt.helpers import arg
from gspo.runtime.torchrt.registry import Call, op

_DEFAULT_ACTIVATIONS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}


def _rnn_check(c: Call) -> str | None:
    acts = c.attr("activations")
    if acts is not None:
        base = _DEFAULT_ACTIVATIONS[c.node.op_type]
        if [a.lower() for a in acts] != [a.lower() for a in base * (len(acts) // len(base))]:
            return f"activations={acts}"
    if c.attr("clip") is not None:
        return "clip is not implemented"
    if c.attr("input_forget", 0):
        return "input_forget=1 is not implemented"
    if c.attr("layout", 0):
        return "layout=1 is not implemented (nor in onnxruntime's CPU provider)"
    return None


def _prepare(c: Call, x, gates: int):
    """X (time major), the input projections of every step, R and R's bias."""
    t = x[0]
    w, r, b = x[1], x[2], arg(x, 3)
    hidden = r.shape[-1]
    xw = torch.matmul(t.unsqueeze(0), w.transpose(1, 2).unsqueeze(1))  # (dirs, seq, batch, gates*hidden)
    rb = None
    if b is not None:
        xw = xw + b[:, :gates * hidden].reshape(b.shape[0], 1, 1, -1)
        rb = b[:, gates * hidden:]
    return t, xw, r, rb, hidden


def _initial(x, i: int, dirs: int, batch: int, hidden: int, like: torch.Tensor):
    h = arg(x, i)
    return like.new_zeros(dirs, batch, hidden) if h is None else h


def _steps(seq: int, reverse: bool):
    return range(seq - 1, -1, -1) if reverse else range(seq)


def _mask(lens: torch.Tensor | None, step: int):
    return None if lens is None else (step < lens).unsqueeze(1)


def _outputs(ys, hs, cs):
    y = torch.stack(ys, 1)  # (seq, dirs, batch, hidden)
    return [y, torch.stack(hs, 0)] + ([] if cs is None else [torch.stack(cs, 0)])


@op("LSTM", check=_rnn_check)
def _lstm(c: Call, x):
    t, xw, r, rb, hidden = _prepare(c, x, 4)
    dirs, seq, batch = xw.shape[0], t.shape[0], t.shape[1]
    h0 = _initial(x, 5, dirs, batch, hidden, t)
    c0 = _initial(x, 6, dirs, batch, hidden, t)
    lens, peep = arg(x, 4), arg(x, 7)
    direction = c.attr("direction", "forward")
    ys = [[None] * seq for _ in range(dirs)]
    hs, cs = [], []
    for d in range(dirs):
        h, cell = h0[d], c0[d]
        rt = r[d].t()
        pi, po, pf = (None, None, None) if peep is None else peep[d].chunk(3)
        for s in _steps(seq, direction == "reverse" or d == 1):
            g = xw[d, s] + h @ rt + (0 if rb is None else rb[d])
            i, o, f, cc = g.chunk(4, -1)
            if peep is not None:
                i, f = i + pi * cell, f + pf * cell
            new_c = torch.sigmoid(f) * cell + torch.sigmoid(i) * torch.tanh(cc)
            o = o if peep is None else o + po * new_c
            new_h = torch.sigmoid(o) * torch.tanh(new_c)
            m = _mask(lens, s)
            if m is not None:
                new_c, new_h = torch.where(m, new_c, cell), torch.where(m, new_h, h)
            ys[d][s] = new_h if m is None else torch.where(m, new_h, torch.zeros_like(new_h))
            h, cell = new_h, new_c
        hs.append(h)
        cs.append(cell)
    return _outputs([torch.stack(ys[d]) for d in range(dirs)], hs, cs)


def _masked(m, new_h, h):
    """A step's state and output where ``sequence_lens`` mask ``m`` (None: none) ends a batch row:
    past its end the state is kept and the output is zero."""
    if m is None:
        return new_h, new_h
    return torch.where(m, new_h, h), torch.where(m, new_h, torch.zeros_like(new_h))


@op("GRU", check=_rnn_check)
def _gru(c: Call, x):
    t, xw, r, rb, hidden = _prepare(c, x, 3)
    dirs, seq, batch = xw.shape[0], t.shape[0], t.shape[1]
    h0 = _initial(x, 5, dirs, batch, hidden, t)
    lens, before = arg(x, 4), c.attr("linear_before_reset", 0)
    direction = c.attr("direction", "forward")
    ys = [[None] * seq for _ in range(dirs)]
    hs = []
    for d in range(dirs):
        h = h0[d]
        rz, rr, rh = r[d].chunk(3)
        bz, br, bh = (0, 0, 0) if rb is None else rb[d].chunk(3)
        for s in _steps(seq, direction == "reverse" or d == 1):
            xz, xr, xh = xw[d, s].chunk(3, -1)
            z = torch.sigmoid(xz + h @ rz.t() + bz)
            rg = torch.sigmoid(xr + h @ rr.t() + br)
            if before:
                n = torch.tanh(xh + rg * (h @ rh.t() + bh))
            else:
                n = torch.tanh(xh + (rg * h) @ rh.t() + bh)
            h, ys[d][s] = _masked(_mask(lens, s), (1 - z) * n + z * h, h)
        hs.append(h)
    return _outputs([torch.stack(ys[d]) for d in range(dirs)], hs, None)


@op("RNN", check=_rnn_check)
def _rnn(c: Call, x):
    t, xw, r, rb, hidden = _prepare(c, x, 1)
    dirs, seq, batch = xw.shape[0], t.shape[0], t.shape[1]
    h0 = _initial(x, 5, dirs, batch, hidden, t)
    lens, direction = arg(x, 4), c.attr("direction", "forward")
    ys = [[None] * seq for _ in range(dirs)]
    hs = []
    for d in range(dirs):
        h = h0[d]
        for s in _steps(seq, direction == "reverse" or d == 1):
            h, ys[d][s] = _masked(_mask(lens, s), torch.tanh(xw[d, s] + h @ r[d].t() + (0 if rb is None else rb[d])), h)
        hs.append(h)
    return _outputs([torch.stack(ys[d]) for d in range(dirs)], hs, None)
