"""The ``Placement`` value: which backend runs each op.

Ops not listed run on the default backend (onnxruntime's CPU provider), so a model placed
entirely there needs no placement at all and stays a plain ONNX file. A placement is saved in
the model's ``gspo.placement`` metadata, like a schedule; the runtime cuts each stream's run of
ops where the backend changes and runs each piece on its backend (OpenVINO's f32 and bf16 ops,
neighbours, run as one model: :func:`split_runs`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gspo.errors import GspoError, clipped
from gspo.ir import Graph
from gspo.streams.schedule import node_id

__all__ = ["Placement", "PlacementError", "PLACEMENT_VERSION", "DEFAULT_BACKEND", "OPENVINO_PRECISIONS", "kept_f32",
           "split_runs"]

PLACEMENT_VERSION = 1
DEFAULT_BACKEND = "ort"


class PlacementError(GspoError):
    """A placement that does not fit its graph, or is not of the expected form."""


@dataclass(frozen=True)
class Placement:
    """Backend per op: ``backends`` pairs a backend name with the ids of the ops it runs (ops
    not listed run on :data:`DEFAULT_BACKEND`)."""

    backends: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @classmethod
    def of(cls, where: Mapping[str, str]) -> Placement:
        """A placement from ``{op id: backend}`` (default-backend entries dropped)."""
        grouped: dict[str, list[str]] = {}
        for op, backend in where.items():
            if backend != DEFAULT_BACKEND:
                grouped.setdefault(backend, []).append(op)
        return cls(tuple((b, tuple(sorted(ops))) for b, ops in sorted(grouped.items())))

    @classmethod
    def whole(cls, graph: Graph, backend: str) -> Placement:
        """Every op of ``graph`` on ``backend``."""
        return cls.of({node_id(n): backend for n in graph.nodes})

    @property
    def is_default(self) -> bool:
        """Whether every op runs on the default backend (nothing to save)."""
        return not any(ops for _, ops in self.backends)

    def backend_of(self) -> dict[str, str]:
        """``{op id: backend}`` for the ops not on the default backend."""
        return {op: b for b, ops in self.backends for op in ops}

    def backend(self, op: str) -> str:
        """The backend that runs op ``op``."""
        return self.backend_of().get(op, DEFAULT_BACKEND)

    def counts(self, graph: Graph) -> dict[str, int]:
        """How many of ``graph``'s ops each backend runs."""
        where = self.backend_of()
        return dict(sorted(Counter(where.get(node_id(n), DEFAULT_BACKEND) for n in graph.nodes).items()))

    def used(self) -> tuple[str, ...]:
        """The non-default backends this placement needs."""
        return tuple(b for b, ops in self.backends if ops)

    def check(self, graph: Graph, backends: Iterable[str] | None = None) -> None:
        """Raise :class:`PlacementError` unless every op named is an op of ``graph``, placed
        once, on a backend among ``backends`` (when given)."""
        if backends is not None:
            allowed = set(backends)
            unknown_backend = next((b for b, _ in self.backends if b not in allowed), None)
            if unknown_backend is not None:
                raise PlacementError(f"the placement names backend {clipped(unknown_backend, quote=True)} (known: {', '.join(backends)})")
        known = {node_id(n) for n in graph.nodes}
        seen: set[str] = set()
        for op in (op for _, ops in self.backends for op in ops):
            if op not in known:
                raise PlacementError(f"the placement names {clipped(op, quote=True)}, which is not an op of the model")
            if op in seen:
                raise PlacementError(f"the placement places {clipped(op, quote=True)} twice")
            seen.add(op)

    def to_json(self) -> dict:
        """The placement as the JSON saved in the model's metadata."""
        return {"version": PLACEMENT_VERSION, "backends": {b: list(ops) for b, ops in self.backends}}

    @classmethod
    def from_json(cls, data: Mapping | str) -> Placement:
        """Parse a placement; a malformed one is a :class:`PlacementError` (one line)."""
        try:
            if isinstance(data, str):
                data = json.loads(data)
            if data.get("version") != PLACEMENT_VERSION:
                raise PlacementError(f"placement version {clipped(data.get('version'))} is not {PLACEMENT_VERSION}")
            backends = data["backends"]
            pairs = tuple((str(b), tuple(str(op) for op in ops)) for b, ops in sorted(backends.items()))
        except PlacementError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as e:
            raise PlacementError(f"the placement is not valid JSON of the expected form ({type(e).__name__})") from None
        return cls(pairs)


#: Backends whose neighbouring ops run as one model: OpenVINO at f32 and at bf16, compiled at
#: bf16 with the f32 ops kept at f32 (:func:`gspo.runtime.openvino.load_openvino`), so that an
#: op sent back to f32 costs no cut, no second model and no copy between them.
OPENVINO_PRECISIONS = ("openvino", "openvino:bf16")


def _family(backend: str) -> str:
    return OPENVINO_PRECISIONS[0] if backend in OPENVINO_PRECISIONS else backend


def split_runs(runs: Iterable[tuple[int, tuple[str, ...]]], placement: Placement | None) -> list[tuple[int, tuple[str, ...], str]]:
    """Runs of ops cut again wherever the backend changes: ``(stream, op ids, backend)`` each.
    Neighbouring ops on OpenVINO at f32 and at bf16 stay in one run on ``openvino:bf16``
    (:data:`OPENVINO_PRECISIONS`; which of its ops stay f32: :func:`kept_f32`)."""
    where = placement.backend_of() if placement is not None else {}
    out = []
    for stream, ops in runs:
        current: list[str] = []
        backend = None
        for op in ops:
            b = where.get(op, DEFAULT_BACKEND)
            if current and _family(b) != _family(backend):
                out.append((stream, tuple(current), backend))
                current = []
            backend = OPENVINO_PRECISIONS[1] if current and OPENVINO_PRECISIONS[1] in (b, backend) else b
            current.append(op)
        if current:
            out.append((stream, tuple(current), backend))
    return out


def kept_f32(ops: Iterable[str], backend: str, placement: Placement | None) -> tuple[str, ...]:
    """The ops of a run on ``backend`` (:func:`split_runs`) that its placement puts on OpenVINO
    at f32 while the run is on ``openvino:bf16``."""
    if backend != OPENVINO_PRECISIONS[1] or placement is None:
        return ()
    where = placement.backend_of()
    return tuple(op for op in ops if where.get(op) == OPENVINO_PRECISIONS[0])
