"""What ``optimize`` gives back: the graph to save, its schedule and placement, and the report."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gspo.ir import Graph, save
from gspo.ir.onnx_io import save_bytes
from gspo.search.report import Report
from gspo.streams import Placement, Schedule

__all__ = ["OptimizeResult"]


@dataclass(frozen=True)
class OptimizeResult:
    """What ``optimize`` found: the graph to save, its schedule (``None``: one stream), the report
    (:class:`~gspo.search.report.Report`; ``report["speedup"]`` reads a field as from a dict).

    ``keep_dynamic``: the result was checked at other input sizes and is saved with the input's
    dynamic dimensions.
    """

    original: Graph
    graph: Graph
    schedule: Schedule | None
    report: Report
    keep_dynamic: bool = False
    #: The bytes of the model file as read (once) and loaded, when they are the result as they
    #: are (nothing changed, no input shape pinned, no external data): saving then writes them.
    source: bytes | None = None
    #: The backend of each op, when not onnxruntime for all (``gspo run`` follows it).
    placement: Placement | None = None

    @property
    def unchanged(self) -> bool:
        """Whether the result is the input as given (same graph, no schedule, no placement)."""
        return self.graph.key == self.original.key and self.schedule is None and self.placement is None

    def save(self, path: str | os.PathLike, overwrite: bool = False) -> Path:
        """Write the optimized model (its schedule and placement, if any, in the model's
        metadata); an unchanged model read from a file is written as the bytes read then (the
        file is not read again).

        Raises:
            OutputError: ``path`` exists (also one that appeared meanwhile) and ``overwrite``
                is false, or it cannot be written.
        """
        if self.unchanged and self.source is not None:
            return save_bytes(self.source, path, overwrite)
        return save(self.graph, path, self.schedule.to_json() if self.schedule else None, overwrite,
                    keep_dynamic=self.keep_dynamic, placement=self.placement.to_json() if self.placement else None)
