"""optimize's settings, its result, and its error."""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gspo.errors import GspoError
from gspo.ir import Graph, save
from gspo.ir.onnx_io import save_bytes
from gspo.partition import DEFAULT_THRESHOLD
from gspo.rules import DEFAULT_RULES, Rule
from gspo.runtime.verify import DEFAULT_ATOL, DEFAULT_NTOL, DEFAULT_RTOL, Tolerance
from gspo.streams import Placement, Schedule

if TYPE_CHECKING:
    from gspo.search.report import Report

log = logging.getLogger(__name__)


class OptimizeError(GspoError):
    """The optimized model differs from the original; nothing was written."""


@dataclass(frozen=True)
class OptimizeConfig:
    """Settings of ``optimize`` (the CLI builds this from its options)."""

    device: str = "cpu"
    #: The runtime on ``cuda``: "auto" (onnxruntime-gpu where its CUDA provider works, else
    #: torch), "ort" or "torch" (:mod:`gspo.runtime.cuda.choice`); None: as ``--cuda-runtime``
    #: or ``GSPO_CUDA_RUNTIME`` set it, else auto.
    cuda_runtime: str | None = None
    profile: str | None = None
    force_profile: bool = False
    alpha: float = 1.05
    budget: int = 40
    #: Seconds for the whole optimization (anytime): 90 keeps a full zoo model under 2 minutes
    #: on 2 cores (benchmarks/RESULTS.md); None = no limit.
    time_budget: float | None = 90.0
    threshold: int = DEFAULT_THRESHOLD
    #: The stream cap (``None``: the device's) and the search's processes (0: one per core);
    #: optimize resolves both (:func:`~gspo.search.optimize.resolved`) before any stage reads them.
    max_streams: int | None = None
    jobs: int = 0
    use_rules: bool = True
    use_streams: bool = True
    keep: int = 3
    seed: int = 0
    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL
    ntol: float = DEFAULT_NTOL
    #: Random input sets every candidate is verified on (user inputs replace them).
    verify_runs: int = 2
    timing_runs: int = 30
    #: Seconds of timing per piece, and per whole-model comparison, at most (runs shrink to fit,
    #: at least 5).
    piece_timing_budget: float = 1.0
    final_timing_budget: float = 8.0
    #: How much faster than the unmodified piece a piece's pick must measure: the best of several
    #: noisy options is biased low, so the bar is high.
    margin: float = 0.05
    #: The same for the whole model, whose choice is made among two or three options and must
    #: hold in two separate timings (the confirmation): a lower bar, so that a real gain of 2-5%
    #: (NASNet-A Large's padded stem, measured 3.6-8.3% in four sets) is not thrown away as noise.
    final_margin: float = 0.02
    #: "measured": pick by measured latency (never slower as measured; may differ between runs
    #: when candidates are within noise). "estimated": pick by the cost model among the verified
    #: candidates (byte-identical output for the same input, seed and profile).
    select: str = "measured"
    #: Pass the model through the front end (constant folding, shape arithmetic as constants).
    frontend: bool = True
    #: Backends to place the model or its pieces on (``None``: every one installed here).
    backends: tuple[str, ...] | None = None
    #: Calibration database caching piece timings per backend (``None``: the user's cache).
    db_path: str | None = None
    rules: tuple[Rule, ...] = field(default=DEFAULT_RULES, compare=False)

    def validate(self) -> None:
        """Raise :class:`GspoError` with a one-line message on an option out of range."""
        finite = {"--alpha": self.alpha, "--rtol": self.rtol, "--atol": self.atol, "ntol": self.ntol,
                  "margin": self.margin, "final margin": self.final_margin}
        if self.time_budget is not None:
            finite["--time-budget"] = self.time_budget
        for name, value in finite.items():
            if not math.isfinite(value):
                raise GspoError(f"{name} must be a finite number (got {value})")
        if self.alpha < 1:
            raise GspoError(f"--alpha must be at least 1 (got {self.alpha})")
        if self.budget < 0:
            raise GspoError(f"--budget must not be negative (got {self.budget})")
        if self.time_budget is not None and self.time_budget <= 0:
            raise GspoError(f"--time-budget must be positive (got {self.time_budget})")
        if self.max_streams is not None and self.max_streams < 1:
            raise GspoError(f"--max-streams must be at least 1 (got {self.max_streams})")
        if self.jobs < 0:
            raise GspoError(f"--jobs must not be negative (got {self.jobs})")
        if self.threshold < 1:
            raise GspoError(f"--threshold must be at least 1 (got {self.threshold})")
        if min(self.rtol, self.atol, self.ntol) < 0:
            raise GspoError("tolerances must not be negative")
        if self.verify_runs < 1:
            raise GspoError(f"verify_runs must be at least 1 (got {self.verify_runs})")
        if not (0 <= self.margin < 1 and 0 <= self.final_margin < 1):
            raise GspoError(f"margins must be in [0, 1) (got {self.margin}, {self.final_margin})")
        if self.select not in ("measured", "estimated"):
            raise GspoError(f"--select must be measured or estimated (got {self.select!r})")
        if self.cuda_runtime not in (None, "auto", "ort", "torch"):
            raise GspoError(f"--cuda-runtime takes auto, ort or torch (got {self.cuda_runtime!r})")
        if self.device not in ("cpu", "cuda"):
            raise GspoError(f"unknown device {self.device!r}")
        if self.device == "cuda":
            if self.backends is not None:
                raise GspoError("--backends places pieces on the cpu device; with --device cuda the whole model runs on the GPU")
            from gspo.runtime.cuda.choice import require_cuda, set_cuda_runtime

            if self.cuda_runtime is not None:
                set_cuda_runtime(self.cuda_runtime)
            require_cuda()

    @property
    def tolerance(self) -> Tolerance:
        """The equivalence tolerance these settings give."""
        return Tolerance(self.rtol, self.atol, self.ntol)


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


@dataclass
class Prepared:
    """The model as given and as searched, the inputs every check runs on, and what happened."""

    original: Graph
    work: Graph
    feeds: list[dict[str, np.ndarray]]
    notes: list[str]
    #: The model file's bytes both graphs were loaded from, when they are the model as given
    #: (``None``: given as a Graph, with input shapes pinned, or with external data).
    data: bytes | None = None
    #: Seconds one run of the original took (0.0: not run; the time budget's estimates use it).
    run_s: float = 0.0
