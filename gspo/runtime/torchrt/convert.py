"""A graph as a torch program: gspo's IR walked once, each node bound to its op function.

Why an op table over gspo's IR and not onnx2torch: tried as a user would, onnx2torch 1.5.15
converted 1-2 of 7 real exports (asymmetric AvgPool pads, ``Reshape allowzero=1``, ``Identity``
at opset 19, ``LessOrEqual``, initializer lookups); gspo's IR already knows every value's dtype
and shape and every attribute, so the table (:mod:`gspo.runtime.torchrt.ops`) only computes.

At conversion (:func:`convert`):
- every value known without running the model is folded once on the CPU: weights, nodes whose
  inputs are all known, and ``Shape``/``Size`` of values whose shape is static. On static shapes
  no op then reads a device value back to the host, so the program can be captured in a CUDA
  graph (:attr:`Program.host_reads` names the steps that still do, found on fake tensors);
- what an op decides from a known value (a shape, axes, whether indices can be negative) is
  decided as plain Python values (:class:`~gspo.runtime.torchrt.registry.Call`), so torch dynamo
  traces a run as one graph;
- nodes the table cannot run (an op it lacks, an opaque node, a case its check refuses) are
  grouped into *islands* of consecutive nodes run by onnxruntime's CPU provider, their inputs
  copied to the host and their outputs back. Each such node is listed in
  :attr:`Program.fallbacks` with the reason: never silent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from onnx import TensorProto

from gspo.errors import first_line
from gspo.ir import Graph, Node
from gspo.ir.subgraph import extract
from gspo.runtime.torchrt.ops import lookup
from gspo.runtime.torchrt.probe import Shapes, host_reads
from gspo.runtime.torchrt.registry import Call, Unsupported

__all__ = ["Fallback", "Program", "convert", "to_device", "to_numpy", "to_torch", "unsupported", "unsupported_nodes"]

#: Ops whose outputs differ from call to call: never folded.
_RANDOM = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                     "Bernoulli"})
#: A node's output larger than this (elements) is not folded at conversion (it stays a step).
_FOLD_LIMIT = 1 << 24
#: The element types an onnxruntime island exchanges with the program (numpy's own types:
#: onnxruntime's Python API takes no ml_dtypes array, bfloat16 and 8-bit floats included).
_EXCHANGED = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT8,
                        TensorProto.INT16, TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8,
                        TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64, TensorProto.BOOL,
                        TensorProto.STRING})


class StepError(RuntimeError):
    """An op failed while the program ran: names the node and the error."""


@dataclass(frozen=True)
class Fallback:
    """A node onnxruntime's CPU provider runs instead of torch, and why."""

    node: str
    op_type: str
    reason: str

    def __str__(self) -> str:
        return f"{self.op_type} ({self.node}): {self.reason}"


def to_torch(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """A host array as a tensor on ``device``: its own copy (0-d and empty arrays keep their shape;
    ml_dtypes' bfloat16 becomes torch's)."""
    array = np.asarray(array)
    if array.dtype.name == "bfloat16" and array.dtype.itemsize == 2:
        bits = torch.from_numpy(np.array(array, order="C", copy=True).view(np.int16))
        return bits.view(torch.bfloat16).to(device)
    if not (array.dtype == np.bool_ or array.dtype.kind in "iuf"):
        raise Unsupported(f"values of numpy type {array.dtype} have no torch tensor")
    copy = np.array(array, order="C", copy=True)
    if copy.dtype.kind in "iu":  # the canonical type: onnxruntime hands back numpy.ulonglong, torch takes uint64
        copy = copy.view(np.dtype(f"{copy.dtype.kind}{copy.dtype.itemsize}"))
    return torch.from_numpy(copy).to(device)


def to_device(array: np.ndarray, device: torch.device):
    """A host value as the program keeps it: a tensor on ``device``, or the host array itself
    when torch has no dtype for it (strings, 8-bit floats): only onnxruntime islands read those."""
    array = np.asarray(array)
    if array.dtype == np.bool_ or array.dtype.kind in "iuf" or array.dtype.name == "bfloat16":
        return to_torch(array, device)
    return np.array(array, copy=True)


def _kept(t: torch.Tensor) -> np.ndarray:
    """A value folded at conversion as a host array of its own type (bfloat16 as ml_dtypes')."""
    if isinstance(t, torch.Tensor) and t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.detach().cpu().view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()
    return to_numpy(t)


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A tensor as a host array of its own (bfloat16 read as float32; a host array kept as it is)."""
    if isinstance(t, np.ndarray):
        return t
    t = t.detach()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.numpy().copy() if t.device.type == "cpu" else t.cpu().numpy()


@dataclass
class _Step:
    fn: object  # the op function, or an _Island
    call: Call | None
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    frees: tuple[str, ...] = ()  # values last read here (dropped after the step)


class _Island:
    """Consecutive nodes the op table cannot run, on onnxruntime's CPU provider."""

    def __init__(self, graph: Graph, indices: list[int]):
        from gspo.runtime.session import BackendError, SessionConfig, make_session

        sub, _ = extract(graph, indices, name=f"{graph.name}/cpu{indices[0]}")
        self.graph = sub
        self.inputs = tuple(v.name for v in sub.inputs)
        self.outputs = tuple(v.name for v in sub.outputs)
        for v in (*sub.inputs, *sub.outputs):
            if v.type_proto or (v.dtype and v.dtype not in _EXCHANGED):  # dtype 0: a type not inferred
                node = graph.nodes[indices[0]]
                what = (f"its {TensorProto.DataType.Name(v.dtype)} value {v.name!r} (onnxruntime's Python API "
                        f"takes no such array)") if not v.type_proto else f"{v.name!r}, which is no tensor"
                raise BackendError(f"{node.op_type} ({node.name or f'#{indices[0]}'}): the torch runtime cannot run "
                                   f"it and cannot exchange with onnxruntime {what}")
        self.session = make_session(sub, SessionConfig())

    def __call__(self, device: torch.device, xs: list) -> list:
        feeds = {name: to_numpy(x) for name, x in zip(self.inputs, xs)}
        outs = self.session.run(list(self.outputs), feeds)
        return [to_device(np.asarray(o), device) for o in outs]


def _static_shape(graph: Graph, name: str) -> tuple[int, ...] | None:
    v = graph.values.get(name)
    return tuple(v.shape) if v is not None and v.is_static else None


def _open_shapes(graph: Graph) -> bool:
    """Whether shapes are worth carrying at conversion: every input's shape is static, and a
    ``Shape``/``Size`` reads a value whose shape onnx's inference left open."""
    return all(v.is_static for v in graph.inputs) and any(
        n.op_type in ("Shape", "Size") and n.inputs and n.inputs[0] and _static_shape(graph, n.inputs[0]) is None
        for n in graph.nodes)


def _shape_const(graph: Graph, node: Node, shapes: Shapes | None = None) -> np.ndarray | None:
    """``Shape``/``Size`` of a value whose shape is static (declared, or fixed by ``shapes``), at conversion."""
    name = node.inputs[0] if node.inputs else ""
    shape = (_static_shape(graph, name) or (shapes.of(name) if shapes is not None else None)) if name else None
    if shape is None:
        return None
    if node.op_type == "Size":
        return np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    start, end = node.attr("start", 0), node.attr("end", None)
    return np.array(shape[slice(start, end)], dtype=np.int64)


class Program:
    """One graph as torch calls on one device (see the module docstring).

    ``program(values)`` takes device tensors by graph input name and returns the graph's outputs
    by name; :meth:`run` does the same on host arrays. ``strict`` checks each output's dtype (and
    static shape) against the graph's declaration, naming the node that broke it.
    """

    def __init__(self, graph: Graph, device: torch.device, strict: bool = False):
        self.graph, self.device, self.strict = graph, torch.device(device), strict
        self.inputs = tuple(v.name for v in graph.inputs)
        self.outputs = graph.output_names()
        self.fallbacks: list[Fallback] = []
        self._known: dict[str, np.ndarray] = {}
        self._steps: list[_Step] = []
        self._host_reads: list[str] | None = None
        self._build()
        self._consts = {name: to_device(value, self.device) for name, value in self._known.items()
                        if name in self._read_consts}
        self._known_outputs = {name: self._consts.get(name) if name in self._consts else
                               to_device(self._known[name], self.device)
                               for name in self.outputs if name in self._known}

    # ------------------------------------------------------------------ conversion
    def _build(self) -> None:
        g = self.graph
        opset = g.opset
        cpu = torch.device("cpu")
        pending: list[tuple[int, Node, Call | None, object]] = []
        for name, w in g.weights.items():
            self._known[name] = np.asarray(w.evaluate(g.store))
        types = {name: v.dtype for name, v in g.values.items()}
        shapes = Shapes(g.inputs, self._known) if _open_shapes(g) else None
        for i, node in enumerate(g.nodes):
            consts = tuple(self._known.get(n) if n else None for n in node.inputs)
            in_types = tuple(types.get(n, 0) if n else 0 for n in node.inputs)
            call = Call(node, consts, opset, self.device, in_types)
            try:
                fn = lookup(call)
            except Unsupported as e:
                self.fallbacks.append(Fallback(node.name or f"#{i}", node.op_type, first_line(e)))
                pending.append((i, node, None, None))
                if shapes is not None:
                    shapes.step(node, None, None)
                continue
            if self._fold(node, call, fn, cpu, shapes):
                continue
            if shapes is not None:
                shapes.step(node, Call(node, consts, opset, cpu, in_types), fn)
            pending.append((i, node, call, fn))
        self._steps = self._group(pending)
        self._plan_frees()

    def _fold(self, node: Node, call: Call, fn, cpu: torch.device, shapes: Shapes | None = None) -> bool:
        """Compute ``node`` now if its value is known without the data; True if folded."""
        if node.op_type in ("Shape", "Size"):
            value = _shape_const(self.graph, node, shapes)
            if value is not None:
                self._known[node.outputs[0].name] = value
                return True
        reads = [n for n in node.inputs if n]
        if node.op_type in _RANDOM or not all(n in self._known for n in reads):
            return False
        if any(v.is_static and int(np.prod(v.shape, dtype=np.int64)) > _FOLD_LIMIT for v in node.outputs):
            return False
        xs = [to_torch(self._known[n], cpu) if n else None for n in node.inputs]
        try:
            outs = fn(Call(node, call.consts, call.opset, cpu), xs)
        except Unsupported:
            return False
        for v, t in zip(node.outputs, outs):
            if v.name:
                self._known[v.name] = _kept(t)
        return True

    def _group(self, pending) -> list[_Step]:
        """Steps in order: each converted node, and islands of consecutive unconverted ones."""
        steps: list[_Step] = []
        run: list[int] = []

        def close_island() -> None:
            if run:
                island = _Island(self.graph, list(run))
                steps.append(_Step(island, None, island.inputs, island.outputs))
                run.clear()

        for i, node, call, fn in pending:
            if fn is None:
                run.append(i)
                continue
            close_island()
            steps.append(_Step(fn, call, tuple(node.inputs), tuple(v.name for v in node.outputs)))
        close_island()
        return steps

    def _plan_frees(self) -> None:
        """Drop each value the program made itself after its last reader (outputs kept)."""
        keep = set(self.outputs) | set(self.inputs) | set(self._known)
        last: dict[str, int] = {}
        for k, step in enumerate(self._steps):
            for name in step.inputs:
                if name:
                    last[name] = k
        self._read_consts = {n for step in self._steps for n in step.inputs if n in self._known}
        frees: dict[int, list[str]] = {}
        for name, k in last.items():
            if name not in keep:
                frees.setdefault(k, []).append(name)
        for k, step in enumerate(self._steps):
            step.frees = tuple(frees.get(k, ()))

    # ------------------------------------------------------------------ running
    @property
    def steps(self) -> int:
        """How many calls a run makes (ops, and onnxruntime islands); 0: every output is known."""
        return len(self._steps)

    @property
    def needs_host(self) -> bool:
        """Whether a run copies values to the host (an onnxruntime island, or a shape, count or
        bound read from the data: :attr:`host_reads`): such a program cannot be captured in a
        CUDA graph."""
        return bool(self.fallbacks) or bool(self.host_reads)

    @property
    def host_reads(self) -> list[str]:
        """Where a run reads values back to the host, each ``"OpType 'node': why"``: an
        onnxruntime island, an input of open shape, or a step that needs a value the data decides.
        Found once, by running the steps on fake tensors (:mod:`gspo.runtime.torchrt.probe`):
        a shape onnx's inference left open but conversion folded reads nothing."""
        if self._host_reads is None:
            if self.fallbacks:
                self._host_reads = [f"{f.op_type} {f.node!r}: run by onnxruntime ({f.reason})" for f in self.fallbacks]
            else:
                self._host_reads = host_reads(self._steps, self._consts, self.graph.inputs, self.device)
        return list(self._host_reads)

    def __call__(self, values: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        env: dict[str, torch.Tensor] = dict(self._consts)
        env.update(values)
        for step in self._steps:
            xs = [env[n] if n else None for n in step.inputs]
            try:
                if step.call is None:
                    outs = step.fn(self.device, xs)
                else:
                    outs = step.fn(step.call, xs)
            except Exception as e:
                what = f"{step.call.node.op_type} {step.call.node.name!r}" if step.call else "an onnxruntime island"
                raise StepError(f"{what}: {first_line(e)}") from e
            if self.strict and step.call is not None:
                self._check(step, outs)
            for name, t in zip(step.outputs, outs):
                if name:
                    env[name] = t
            for name in step.frees:
                env.pop(name, None)
        out = {name: env[name] for name in self.outputs if name in env}
        out.update({k: v for k, v in self._known_outputs.items() if k not in out})
        return out

    def _check(self, step: _Step, outs) -> None:
        node = step.call.node
        for v, t in zip(node.outputs, outs):
            if not v.name:
                continue
            want = step.call.out_dtype(node.outputs.index(v))
            if t.dtype != want:
                raise AssertionError(f"{node.op_type} {node.name!r}: output {v.name!r} is {t.dtype}, declared {want}")
            if v.is_static and tuple(t.shape) != tuple(v.shape):
                raise AssertionError(f"{node.op_type} {node.name!r}: output {v.name!r} has shape "
                                     f"{tuple(t.shape)}, declared {tuple(v.shape)}")

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One run on host arrays; the outputs as host arrays (dtype as the graph declares)."""
        values = {name: to_device(np.asarray(feeds[name]), self.device) for name in self.inputs}
        with torch.inference_mode():
            out = self(values)  # raises StepError naming the node
        return {name: to_numpy(out[name]) for name in self.outputs}


def unsupported(graph: Graph) -> list[Fallback]:
    """The nodes of ``graph`` the op table cannot run (onnxruntime's CPU provider runs them),
    without converting anything; the reasons as :attr:`Program.fallbacks` gives them."""
    return list(unsupported_nodes(graph).values())


def unsupported_nodes(graph: Graph) -> dict[int, Fallback]:
    """:func:`unsupported` by the index of each node in ``graph.nodes``."""
    known = {n for n, w in graph.weights.items() if w.size <= 1 << 16}  # shapes, axes, scales
    types = {name: v.dtype for name, v in graph.values.items()}
    found = {}
    for i, node in enumerate(graph.nodes):
        consts = tuple(np.asarray(graph.weights[n].evaluate(graph.store)) if n in known else None
                       for n in node.inputs)
        in_types = tuple(types.get(n, 0) if n else 0 for n in node.inputs)
        try:
            lookup(Call(node, consts, graph.opset, torch.device("cpu"), in_types))
        except Unsupported as e:
            found[i] = Fallback(node.name or f"#{i}", node.op_type, first_line(e))
    return found


def convert(graph: Graph, device: torch.device | str = "cpu", strict: bool = False) -> Program:
    """``graph`` as a :class:`Program` on ``device`` (see the module docstring). Nodes the op
    table cannot run go to onnxruntime's CPU provider, listed in ``Program.fallbacks``."""
    return Program(graph, torch.device(device), strict)
