"""Each piece's harm from one run: the error a reduced piece adds, measured at the pieces' borders.

The precision fit (:mod:`gspo.precision.search`) sends pieces back to a kind's rest most harmful
first. Judging each piece alone costs a build, a session and a run of the data per piece; this
ranks them all from one run of two builds instead: the kind with none reduced (its rest) with
the pieces' *boundary tensors* (the tensors a piece makes that another piece or the graph's
output reads) exposed as extra graph outputs, and the kind with every piece reduced, its boundary
tensors exposed too and, where another piece reads one, that reader fed the rest's value instead
(a graph input per tensor). So each reduced piece runs on the inputs its rest would give it, and
the error (normalized MSE) on its outputs is the error it adds, not the error it carries on from
the pieces before it. Taking the error its outputs carry less the largest on its inputs, in a
build where every piece reads its neighbours' reduced outputs, ranks a piece that damps the
error it receives (a residual Add and LayerNorm) as harmless: the small corpus BERT's last piece
(the last LayerNorm and the pooler) carried nmse 1.8e-3 on inputs of 2.0e-3 and so "added"
nothing, yet reduced alone it broke nmse=1e-4 (2.8e-4); fed the rest's inputs it measures
that. In a QDQ build a tensor is taken as the next piece reads it: through its QuantizeLinear
and DequantizeLinear where it has them (onnxruntime's quantizer folds a Relu into them and gives
the Relu's name to the MatMul before it), so a piece's output quantization counts as its own. A
tensor a build does not have (a quantizer renamed it) is neither measured nor fed; a piece with
no boundary output measured has no harm (``None``).

Memory: the two builds' exposed tensors of one sample at a time, folded into per-tensor sums as
each sample runs, never every sample's activations.

Notes:
    One run of each build per sample: linear in the samples and independent of the number of
    pieces, where judging each piece alone is linear in both (a build, a session and a run of
    the data per piece).

Example:
    >>> from gspo.ir.builder import GraphBuilder
    >>> b = GraphBuilder("two")
    >>> g = b.output(b.op("Relu", [b.op("Neg", [b.input("x", (1, 4))])])).build()
    >>> from gspo.streams import node_id
    >>> first, second = (frozenset({node_id(n)}) for n in g.nodes)
    >>> sorted(boundaries(g, (first, second))[0][0])  # the Neg's output, read by the Relu
    ['neg']
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from onnx import TensorProto

from gspo.ir import Graph
from gspo.ir.weights import np_dtype
from gspo.streams import node_id

__all__ = ["Harm", "boundaries", "exposed", "fed", "harm", "read_as"]

#: What a boundary tensor's reader is fed instead of it in the reduced build (a graph input).
FED = "gspo_rest/"

#: The element types whose tensors are measured (the others are indices and shapes).
_FLOATS = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE)


@dataclass(frozen=True)
class Harm:
    """What one run measured: each piece's added error, the largest on its boundary outputs
    (``None``: none of them measured), and the error (normalized MSE) on each boundary tensor
    measured, its piece fed the rest's inputs."""

    added: Mapping[int, float | None]
    errors: Mapping[str, float]


def _makers(graph: Graph, pieces: Sequence[frozenset[str]]) -> tuple[dict[str, int], dict[str, int]]:
    """The piece of each node id, and the piece that makes each floating-point tensor (a
    Constant's output excepted: it carries no error)."""
    piece_of = {op: i for i, ops in enumerate(pieces) for op in ops}
    maker: dict[str, int] = {}
    for n in graph.nodes:
        if node_id(n) in piece_of and n.op_type != "Constant":
            maker.update((v.name, piece_of[node_id(n)]) for v in n.outputs if v.name and v.dtype in _FLOATS)
    return piece_of, maker


def boundaries(graph: Graph, pieces: Sequence[frozenset[str]]) -> tuple[dict[int, set[str]], dict[int, set[str]]]:
    """``(outputs, inputs)``: for each piece (by index into ``pieces``, sets of node ids), the
    floating-point tensors it makes that another piece, a node of no piece or the graph's output
    reads, and the ones it reads that another piece makes."""
    piece_of, maker = _makers(graph, pieces)
    outs: dict[int, set[str]] = {i: set() for i in range(len(pieces))}
    ins: dict[int, set[str]] = {i: set() for i in range(len(pieces))}
    for n in graph.nodes:
        reader = piece_of.get(node_id(n))
        for name in n.reads():
            if name in maker and maker[name] != reader:
                outs[maker[name]].add(name)
                if reader is not None:
                    ins[reader].add(name)
    for name in graph.output_names():
        if name in maker:
            outs[maker[name]].add(name)
    return outs, ins


def read_as(graph: Graph, names) -> dict[str, str]:
    """For each of ``names`` that ``graph`` has as a floating-point tensor, the tensor its readers
    read in its place: the output of a DequantizeLinear of a QuantizeLinear of it, where there is
    one, else itself."""
    q_of = {n.inputs[0]: n.outputs[0].name for n in graph.nodes if n.op_type == "QuantizeLinear" and n.inputs}
    dq_of = {n.inputs[0]: n.outputs[0].name for n in graph.nodes if n.op_type == "DequantizeLinear" and n.inputs}
    have, out = graph.values, {}
    for name in names:
        seen = dq_of.get(q_of.get(name, ""), name)
        if seen in have and have[seen].dtype in _FLOATS:
            out[name] = seen
    return out


def exposed(graph: Graph, names) -> Graph:
    """``graph`` with those of ``names`` it has as extra outputs (in ``names``' order)."""
    have, already = graph.values, set(graph.output_names())
    extra = tuple(have[n] for n in names if n in have and n not in already)
    return dataclasses.replace(graph, outputs=graph.outputs + extra)


def fed(graph: Graph, seen: Mapping[str, str], maker: Mapping[str, int], piece_of: Mapping[str, int]) -> Graph:
    """``graph`` with each reader of a tensor ``seen[t]`` (``t`` made by the piece ``maker[t]``)
    outside that piece reading the graph input :data:`FED` + ``t`` instead (the rest's value of
    ``t``); a reader that captures it in a subgraph is left as it is."""
    swap = {seen[t]: FED + t for t in seen}
    owner = {seen[t]: maker[t] for t in seen}
    nodes = []
    for n in graph.nodes:
        reader = piece_of.get(node_id(n))
        if not n.implicit_inputs and any(i in swap and owner[i] != reader for i in n.inputs):
            n = n.replace(inputs=tuple(swap[i] if i in swap and owner[i] != reader else i for i in n.inputs))
        nodes.append(n)
    have = graph.values
    inputs = tuple(dataclasses.replace(have[s], name=FED + t) for t, s in seen.items())
    return dataclasses.replace(graph, inputs=graph.inputs + inputs, nodes=tuple(nodes))


def harm(reduced: Graph, rest: Graph, pieces: Sequence[frozenset[str]], samples: Sequence[Mapping[str, np.ndarray]],
         executor: Callable) -> Harm:
    """Each piece's added error in ``reduced`` against ``rest`` (the same model with no piece
    reduced) on ``samples``: each build run on ``executor(graph)``, the boundary tensors
    (:func:`boundaries`, of ``rest``) exposed, the reduced one's pieces fed the rest's values
    (:func:`fed`; see the module docstring).

    Raises:
        GspoError: the exposed tensors of one sample take more memory than the machine has, or
            a build cannot run (the caller ranks the pieces another way).
    """
    from gspo.ir.features import nbytes
    from gspo.runtime.inputs import require_memory

    outs, _ = boundaries(rest, pieces)
    piece_of, maker = _makers(rest, pieces)
    seen = read_as(reduced, sorted({t for ts in outs.values() for t in ts}))
    require_memory(3 * sum(nbytes(rest.values[n]) for n in seen), "the boundary tensors of one sample in two builds",
                   "the fit ranks the pieces by judgments instead")
    cut = exposed(fed(reduced, seen, maker, piece_of), list(seen.values()))
    sums = _sums(exposed(rest, list(seen)), cut, seen, samples, executor)
    errors = {n: (d / r if r > 0 else (0.0 if d == 0 else np.inf)) for n, (d, r) in sums.items()}
    added: dict[int, float | None] = {}
    for i in range(len(pieces)):
        made = [errors[t] for t in outs[i] if t in errors]
        added[i] = max(made) if made else None
    return Harm(added, errors)


def _sums(rest: Graph, reduced: Graph, seen: Mapping[str, str], samples,
          executor: Callable) -> dict[str, tuple[float, float]]:
    """Per tensor of ``rest`` in ``seen`` (its name in ``reduced``), over ``samples``: the summed
    squared difference between the two builds and the summed square of ``rest``'s (one sample's
    tensors held at a time; ``reduced`` fed ``rest``'s as :func:`fed` names them). A tensor whose
    shapes differ, or that a build does not return, is left out."""
    sums = {n: [0.0, 0.0] for n in seen}
    types = {v.name: v.dtype for v in reduced.inputs}
    a_ex = executor(rest)
    try:
        b_ex = executor(reduced)
        try:
            for s in samples:
                a = a_ex.run(s)
                feeds = dict(s)
                feeds.update((FED + t, np.asarray(a[t], np_dtype(types[FED + t]))) for t in seen if t in a)
                b = b_ex.run(feeds)
                for n in list(sums):
                    x = np.asarray(a[n], np.float64) if n in a else None
                    y = np.asarray(b[seen[n]], np.float64) if seen[n] in b else None
                    if x is None or y is None or x.shape != y.shape:
                        del sums[n]
                        continue
                    d = float(np.sum(np.square(y - x))) if np.all(np.isfinite(y)) else np.inf
                    sums[n][0] += d
                    sums[n][1] += float(np.sum(np.square(x)))
                del a, b, feeds
        finally:
            b_ex.close()
    finally:
        a_ex.close()
    return {n: (d, r) for n, (d, r) in sums.items()}
