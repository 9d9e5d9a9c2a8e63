"""Quantize once, judge by stripping: a fully quantized QDQ graph with chosen nodes back in float.

The precision fit judges a kind with many sets of pieces kept at fp32. Quantizing the model
again for each set (onnxruntime's quantizer, NNCF) costs more than the judgment's session and
runs on a large model. :func:`keep_float` instead takes the QDQ graph made once with every
candidate quantized and puts the chosen nodes back: each reads the fp32 graph's own inputs, and
what nobody reads any more (QuantizeLinear/DequantizeLinear pairs, a SmoothQuant ``Mul``) is
pruned. A node kept float computes exactly what the fp32 graph's node computes on its inputs.

Notes:
    What stripping gives and quantizing with the same nodes excluded
    (:func:`~gspo.runtime.quantize.quantize_static` with ``exclude``) would give, differ only
    where it is harmless: every node kept float computes in fp32 either way, and a tensor read
    by a quantized node is quantized with the same range either way. Where they differ:

    * a pass-through op (Reshape, Transpose, MaxPool ...) left quantized between a float node
      and a quantized one keeps its Q/DQ (onnxruntime, quantizing with the float node excluded,
      may leave it float: it quantizes a pass-through op only when its input already is);
    * a graph output whose producer is kept float is float (onnxruntime, with the producer
      excluded, still quantizes the output a quantized consumer or the producer's quantized
      form asked for);
    * a node the quantized graph no longer has (NNCF drops some Casts) and a node whose
      quantized form writes a value the fp32 one does not (a Conv writing the output of the
      Relu onnxruntime fused into it) are brought back in float for the float nodes that read
      them (the fused Relu's Conv stays quantized, as ``exclude`` keeps it).

    Cost: one pass over the nodes and the inputs of the kept ones (no weight is read); the
    weights the kept nodes need in float are the fp32 graph's, referenced, not copied.

    A kind quantizes once (:func:`quantized_once`, at its first build) and strips at each build;
    one placed whole on OpenVINO compiles the fully quantized model apart first
    (:func:`probed_build`). The kind holds the fully quantized graph as long as it lives (its
    int8 weights, a quarter of the fp32 ones, and their scales).

Example:
    >>> from gspo.ir.builder import GraphBuilder
    >>> from gspo.runtime import random_inputs
    >>> from gspo.runtime.quantize import activation_ranges, quantize_static
    >>> b = GraphBuilder("mm")
    >>> x = b.input("x", (2, 8))
    >>> g = b.output(b.op("MatMul", [b.op("MatMul", [x, b.weight("w1", (8, 8))]), b.weight("w2", (8, 4))],
    ...                   out="y")).build()
    >>> q = quantize_static(g, activation_ranges(g, [random_inputs(g, seed=0)]))
    >>> half = keep_float(q, g, ["y"])
    >>> [n.op_type for n in half.nodes if n.op_type == "MatMul"], "w2" in half.weights
    (['MatMul', 'MatMul'], True)
    >>> keep_float(q, g, [n.output_names[0] for n in g.nodes]).key == g.key
    True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterator, Mapping

from gspo.errors import GspoError
from gspo.ir.graph import Graph, Node, fresh_name, toposort
from gspo.ir.weights import Init, Weight, WeightStore
from gspo.streams import Placement, node_id

__all__ = ["keep_float", "probed", "probed_build", "quantized_once"]

#: Activations a quantizer may remove, the quantized producer writing their output (clamped by
#: the output's Q/DQ) in their place: onnxruntime's ``QDQRemovableActivation``.
_FUSED = ("Relu", "Clip")


def keep_float(quantized: Graph, base: Graph, ids: Collection[str]) -> Graph:
    """``quantized`` (the QDQ form of ``base``) with the nodes of ``base`` whose ids
    (:func:`gspo.streams.node_id`) are in ``ids`` back in float.

    Each such node is ``base``'s own, reading ``base``'s inputs: activations by their float
    names (which the QDQ graph still computes, before their QuantizeLinear), weights and biases
    as ``base``'s float initializers, added where the QDQ graph lacks them (under a name of their
    own where it holds another tensor by that name). A float node's input that the QDQ graph
    does not compute in float (a value it no longer has, a fused Relu's, a graph output it
    dequantizes) brings its producer back in float too. Every node nobody reads any more, Q/DQ
    pairs and others alike, is pruned. With every id kept, the result is ``base``.

    Raises:
        GspoError: an id of ``ids`` is not a node of ``base``.
    """
    by_id = {node_id(n): n for n in base.nodes}
    unknown = sorted(set(ids) - set(by_id))
    if unknown:
        raise GspoError(f"cannot keep {unknown[:3]}{' ...' if len(unknown) > 3 else ''} in float: not the id of a node "
                        "of the model")
    made = {v.name: n for n in quantized.nodes for v in n.outputs if v.name}
    fused = _fused(base, made)
    kept = _closure(base, made, fused, set(ids))
    renamed = _renamed(quantized, base, made, {i: fused[i] for i in kept if i in fused})
    made = {v.name: n for n in renamed for v in n.outputs if v.name}
    written = {v.name for i in kept for v in by_id[i].outputs if v.name}
    own = [n for n in renamed if not written.intersection(v.name for v in n.outputs)]
    floats = [_plain(n) for n in base.nodes if node_id(n) in kept]
    aliases = {name: _before_qdq(base, made, name) for n in floats for name in n.inputs if name}
    floats = [_rewired(n, aliases) for n in floats]
    weights, extra = _float_weights(quantized, base, floats, made)
    floats = [_rewired(n, {w: f for f, (w, _) in extra.items()}) for n in floats]
    out = dataclasses.replace(quantized, nodes=tuple(_pruned(toposort([*own, *floats]), quantized.output_names())))
    return _with_weights(out, base, weights, extra)


def _plain(node: Node) -> Node:
    return node if node.stream is None else node.replace(stream=None)


def _producer(base: Graph, name: str) -> Node | None:
    found = base.producers.get(name)
    return found[0] if found is not None else None


def _fused(base: Graph, made: Mapping[str, Node]) -> dict[str, str]:
    """Node id -> input name of the Relu/Clip nodes of ``base`` that the quantized graph removed:
    their output written by a node of their producer's op type, their input by none."""
    out = {}
    for n in base.nodes:
        if n.op_type not in _FUSED or not n.inputs or not n.outputs[0].name:
            continue
        src, q = _producer(base, n.inputs[0]), made.get(n.outputs[0].name)
        if src is not None and q is not None and q.op_type == src.op_type and n.inputs[0] not in made:
            out[node_id(n)] = n.inputs[0]
    return out


def _closure(base: Graph, made: Mapping[str, Node], fused: Mapping[str, str], kept: set[str]) -> set[str]:
    """``kept`` and every node that must come back in float with them: a fused Relu/Clip that a
    float node reads or that reads a float node, and the producer of any value a float node
    reads that the quantized graph does not compute as ``base`` does (:func:`_needs`)."""
    by_id = {node_id(n): n for n in base.nodes}
    todo = sorted(kept)
    while todo:
        n = by_id[todo.pop()]
        more = [node_id(p) for p in _needs(base, made, fused, kept, n)]
        more += [f for f, src in fused.items() if src in n.output_names]
        for m in more:
            if m not in kept:
                kept.add(m)
                todo.append(m)
    return kept


def _needs(base: Graph, made: Mapping[str, Node], fused: Mapping[str, str], kept: set[str],
           node: Node) -> Iterator[Node]:
    """The producers of ``node``'s inputs that must be float too: fused away, or computed by
    the quantized graph as something else than their ``base`` op (a DequantizeLinear of a graph
    output, another op) or not at all."""
    for name in node.reads():
        p = _producer(base, name)
        if p is None or node_id(p) in kept or fused.get(node_id(node)) == name:  # its producer writes it, renamed
            continue
        if node_id(p) in fused:
            yield p
            continue
        q = made.get(name)
        if q is None or (q.op_type != p.op_type and _before_qdq(base, made, name) == name):
            yield p
        elif not q.inputs and q.key != p.key:  # a constant the quantizer changed (a corrected bias)
            yield p


def _before_qdq(base: Graph, made: Mapping[str, Node], name: str) -> str:
    """The name of ``name``'s float value in the quantized graph: ``name`` itself, or, where a
    DequantizeLinear writes it (a graph output onnxruntime quantized), the input of its
    QuantizeLinear when the node of ``base``'s op type writes that."""
    p, dq = _producer(base, name), made.get(name)
    if p is None or dq is None or dq.op_type != "DequantizeLinear" or p.op_type == "DequantizeLinear":
        return name
    q = made.get(dq.inputs[0])
    src = made.get(q.inputs[0]) if q is not None and q.op_type == "QuantizeLinear" else None
    return q.inputs[0] if src is not None and src.op_type == p.op_type else name


def _renamed(quantized: Graph, base: Graph, made: Mapping[str, Node], fused: Mapping[str, str]) -> list[Node]:
    """``quantized``'s nodes, the producer of each fused activation of ``fused`` (kept float)
    writing the activation's input instead (the float Relu/Clip then writes its output)."""
    swap = {made[f]: (f, src) for f, src in fused.items()}  # a node's id is its output's name
    out = []
    for n in quantized.nodes:
        if n in swap:
            old, new = swap[n]
            n = n.replace(outputs=tuple(base.values[new] if v.name == old else v for v in n.outputs))
        out.append(n)
    return out


def _rewired(node: Node, names: Mapping[str, str]) -> Node:
    if not any(names.get(i, i) != i for i in node.inputs):
        return node
    return node.replace(inputs=tuple(names.get(i, i) if i else i for i in node.inputs))


def _float_weights(quantized: Graph, base: Graph, floats: list[Node], made: Mapping[str, Node]):
    """The weights the float nodes read (name -> ``base``'s weight) that ``quantized`` lacks,
    and those whose name it uses for something else, under a fresh name (fresh -> (name,
    weight)): a quantizer that rescales a weight in place (SmoothQuant) or names a dequantized
    bias after the float one."""
    need: dict[str, Weight] = {}
    extra: dict[str, tuple[str, Weight]] = {}
    for name in dict.fromkeys(i for n in floats for i in n.reads()):
        w = base.weights.get(name)
        if w is None or quantized.weights.get(name) == w:
            continue
        if name in quantized.weights or name in made:
            extra[fresh_name(name, "float", w.key)] = (name, w)
        else:
            need[name] = w
    return need, extra


def _pruned(nodes: list[Node], outputs: Collection[str]) -> list[Node]:
    """``nodes`` (topologically sorted) without those whose outputs nobody reads."""
    needed = set(outputs)
    out = []
    for n in reversed(nodes):
        if needed.intersection(v.name for v in n.outputs):
            out.append(n)
            needed.update(n.reads())
    return out[::-1]


def _with_weights(graph: Graph, base: Graph, need: dict[str, Weight], extra: dict[str, tuple[str, Weight]]) -> Graph:
    """``graph`` with the float weights added (``extra``'s back under their own name where the
    pruning freed it), its unread weights dropped, on a store holding both graphs' tensors."""
    read = {i for n in graph.nodes for i in n.reads()} | set(graph.output_names())
    produced = {v.name for n in graph.nodes for v in n.outputs}
    back = {f: name for f, (name, _) in extra.items() if f in read and name not in produced and name not in read}
    nodes = [_rewired(n, back) for n in graph.nodes] if back else list(graph.nodes)
    ours = {k: w for k, w in graph.weights.items() if k in read}
    added = {k: w for k, w in need.items() if k in read}
    added.update({back.get(f, f): w for f, (_, w) in extra.items() if f in read})
    store, weights = _store(graph.store, base.store, added, ours)
    return dataclasses.replace(graph, nodes=tuple(nodes), weights=weights, store=store)


def _inits(w: Weight) -> Iterator[Init]:
    """The original initializers a weight expression reads."""
    if isinstance(w, Init):
        yield w
        return
    for f in dataclasses.fields(w):
        v = getattr(w, f.name)
        for part in v if isinstance(v, tuple) else (v,):
            if isinstance(part, Weight):
                yield from _inits(part)


def _store(own: WeightStore, base: WeightStore, added: Mapping[str, Weight], kept: Mapping[str, Weight]):
    """One store for the weights ``kept`` (read from ``own``) and ``added`` (from ``base``), and
    the weights; an added weight whose initializer's name ``own`` uses for another tensor is
    computed into a literal (the two cannot share a name in one store)."""
    from gspo.ir.weights import Literal

    tensors = {i.name: own.proto(i.name) for w in kept.values() for i in _inits(w) if i.name in own}
    contents = {i.name: i.content for w in kept.values() for i in _inits(w)}
    weights = dict(kept)
    for name, w in added.items():
        leaves = list(_inits(w))
        if any(i.name in contents and contents[i.name] != i.content for i in leaves):
            weights[name] = Literal.from_array(w.evaluate(base))
            continue
        for i in leaves:
            tensors.setdefault(i.name, base.proto(i.name))
            contents.setdefault(i.name, i.content)
        weights[name] = w
    return WeightStore(tensors, base.base_dir), weights


def quantized_once(make: Callable[[], Graph]) -> Callable[[], Graph]:
    """``make()`` run at the first call only, its graph (or its :class:`GspoError`) given again at
    every later one: the model is quantized once per kind, however many judgments build it."""
    done: list = []

    def once() -> Graph:
        if not done:
            try:
                done.append(make())
            except GspoError as e:
                done.append(e)
        if isinstance(done[0], GspoError):
            raise GspoError(str(done[0]))
        return done[0]

    return once


def probed_build(graph: Graph, quantized: Callable[[], Graph], probe: Callable[[bytes], str | None],
                 backend: str) -> Callable[[frozenset[str]], Graph]:
    """``build(reduced)`` of an int8 kind placed whole on OpenVINO (``backend``): the QDQ model
    ``quantized()`` (every candidate quantized) compiled once by ``probe`` before anything is
    built (:func:`probed`), then the nodes of ``graph`` not in ``reduced`` put back in float
    (:func:`~gspo.precision.qdq.keep_float`)."""
    ids = [node_id(n) for n in graph.nodes]

    def strip(reduced: frozenset[str]) -> Graph:
        return keep_float(quantized(), graph, [op for op in ids if op not in reduced])

    return probed(quantized, probe, strip, backend)


def probed(whole: Callable[[], Graph], probe: Callable[[bytes], str | None], build: Callable[[frozenset[str]], Graph],
           backend: str) -> Callable[[frozenset[str]], Graph]:
    """``build`` of a kind placed whole on OpenVINO (``backend``), the model every piece reduced
    (``whole()``) compiled once by ``probe`` (in a process of its own) before anything is built:
    its refusal, or the error that made ``whole()`` fail, raised at every build."""
    from gspo.ir import serialize

    refused: list[str | None] = []  # OpenVINO's reason, once probed (None: it compiles)

    def placed(reduced: frozenset[str]) -> Graph:
        if not refused:
            try:
                refused.append(probe(serialize(whole())))
            except GspoError as e:
                refused.append(str(e))
        if refused[0]:
            raise GspoError(refused[0])
        return _placed_whole(build(reduced), backend)

    return placed


def _placed_whole(graph: Graph, backend: str) -> Graph:
    """``graph`` placed whole on ``backend``, the placement saved in it (as
    :func:`~gspo.precision.variants.with_placement` saves one)."""
    import json

    text = json.dumps(Placement.whole(graph, backend).to_json(), sort_keys=True)
    return dataclasses.replace(graph, extras=dataclasses.replace(graph.extras, placement=text))
