"""Which steps of a converted program read device values back to the host, found by running
its steps once on fake tensors (shapes and dtypes, no data, nothing computed); and, while a graph
is converted, the shapes its values take once its inputs' shapes are fixed (:class:`Shapes`).

A step reads back where it needs a value the data decides: a shape, a count or a bound taken
from a tensor (``Call.ints`` on an input not known at conversion), or an output whose shape
depends on the values (``NonZero``). On fake tensors each such read raises instead of waiting
for the device, so the probe names the step. Declared shapes are not consulted: onnx's shape
inference leaves open many shapes that conversion folds (an ``Expand`` to a folded
``Shape -> Concat``), and those steps read nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensorMode,
)

from gspo.errors import first_line
from gspo.ir import Node, Value
from gspo.runtime.torchrt.registry import Call, Unsupported, torch_dtype

__all__ = ["Shapes", "host_reads"]

_READS = (DataDependentOutputException, DynamicOutputShapeException)


def _where(step) -> str:
    node = step.call.node
    return f"{node.op_type} {node.name!r}"


def _stand_in(values: Sequence[Value], device: torch.device) -> list | None:
    """Fake tensors of the declared static shapes of ``values``, or None when one is not static."""
    if not all(v.is_static and v.dtype for v in values if v.name):
        return None
    return [torch.empty(tuple(v.shape), dtype=torch_dtype(v.dtype), device=device) if v.name else None
            for v in values]


def _probe(steps: Sequence, env: dict, device: torch.device) -> list[str]:
    reads: list[str] = []
    for step in steps:
        if step.call is None:
            return [*reads, "an onnxruntime island (its inputs are copied to the host)"]
        xs = [env.get(n) if n else None for n in step.inputs]
        try:
            outs = step.fn(step.call, xs)
        except _READS as e:
            reads.append(f"{_where(step)}: a value of the data decides a shape or a count "
                         f"({type(e).__name__}: {first_line(e)[:120]})")
            outs = _stand_in(step.call.node.outputs, device)
            if outs is None:  # what follows cannot be probed: its shapes depend on this read
                return reads
        except Exception as e:  # an op the fake tensors cannot run: assumed to read back
            return [*reads, f"{_where(step)}: not probed ({type(e).__name__}: {first_line(e)[:120]})"]
        for name, t in zip(step.outputs, outs):
            if name:
                env[name] = t
    return reads


def host_reads(steps: Sequence, consts: Mapping[str, object], inputs: Sequence[Value],
               device: torch.device) -> list[str]:
    """The steps of a program that read device values back to the host, each as
    ``"OpType 'node': why"`` (empty: a run never waits on the device, and can be captured in a
    CUDA graph). ``steps``: the program's steps (``fn``, ``call``, ``inputs``, ``outputs``;
    ``call`` None for an onnxruntime island); ``consts``: the known values a run starts with;
    ``inputs``: the graph's inputs, whose shapes must be static."""
    try:
        fake = FakeTensorMode(allow_non_fake_inputs=True)
    except Exception as e:  # pragma: no cover - torch without fake tensors: assume the worst
        return [f"not probed ({first_line(e)})"]
    with fake, torch.no_grad():
        env: dict = {name: fake.from_tensor(t) for name, t in consts.items() if isinstance(t, torch.Tensor)}
        for v in inputs:
            if not v.is_static:
                return [f"input {v.name!r} has no static shape"]
            try:
                env[v.name] = torch.empty(tuple(v.shape), dtype=torch_dtype(v.dtype), device=device)
            except Unsupported as e:
                return [f"input {v.name!r}: {first_line(e)}"]
        return _probe(steps, env, device)


def _fake_dtype(array: np.ndarray) -> torch.dtype | None:
    if array.dtype.name == "bfloat16":
        return torch.bfloat16
    if array.dtype == np.bool_ or array.dtype.kind in "iuf":
        return torch.from_numpy(np.empty(0, array.dtype)).dtype
    return None


class Shapes:
    """The shape of each value of a graph being converted, carried on fake tensors from its
    inputs' static shapes through the op functions: the shapes onnx's inference leaves open
    (it does not propagate values, such as a ``Reshape`` to a computed shape) are fixed once the
    inputs' are, and the converter folds ``Shape``/``Size`` of them. A value whose shape the data
    decides (a read raises on fake tensors) keeps the shape the graph declares, if static, or none.

    ``known``: the converter's folded values by name (read, not copied: its shapes are theirs).
    """

    def __init__(self, inputs: Sequence[Value], known: Mapping[str, np.ndarray]):
        self._fake = FakeTensorMode(allow_non_fake_inputs=True)
        self._known = known
        self._env: dict[str, torch.Tensor] = {}
        for v in inputs:
            self._declare(v)

    def of(self, name: str) -> tuple[int, ...] | None:
        """The shape of value ``name`` when it is fixed at conversion, else ``None``."""
        if name in self._known:
            return tuple(int(d) for d in np.shape(self._known[name]))
        t = self._env.get(name)
        return tuple(int(d) for d in t.shape) if t is not None else None

    def step(self, node: Node, call: Call | None, fn) -> None:
        """Carry the shapes through ``node`` (``fn(call, xs)`` on fake tensors; ``fn`` None: a
        node onnxruntime runs, whose outputs keep their declared shapes)."""
        xs = [self._tensor(n) if n else None for n in node.inputs]
        if fn is None or any(n and x is None for n, x in zip(node.inputs, xs)):
            return self._declared(node)
        try:
            with self._fake, torch.no_grad():
                outs = fn(call, xs)
        except Exception:  # a read of the data, or a case fake tensors cannot run
            return self._declared(node)
        for v, t in zip(node.outputs, outs):
            if v.name and isinstance(t, torch.Tensor):
                self._env[v.name] = t

    def _tensor(self, name: str) -> torch.Tensor | None:
        if name not in self._env and name in self._known:
            array = np.asarray(self._known[name])
            dtype = _fake_dtype(array)
            if dtype is None:
                return None
            with self._fake:
                self._env[name] = torch.empty(array.shape, dtype=dtype)
        return self._env.get(name)

    def _declare(self, v: Value) -> None:
        if v.name and v.is_static and v.dtype:
            try:
                dtype = torch_dtype(v.dtype)
            except Unsupported:
                return
            with self._fake:
                self._env[v.name] = torch.empty(tuple(v.shape), dtype=dtype)

    def _declared(self, node: Node) -> None:
        for v in node.outputs:
            self._declare(v)
