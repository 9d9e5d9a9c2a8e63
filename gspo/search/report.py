"""optimize's report: the speedup with its noise, and every figure behind the choice."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from gspo.ir import Graph
from gspo.search.candidate import Measured, estimated_cost
from gspo.search.config import OptimizeConfig
from gspo.search.report_parts import (
    Confirmation,
    DeviceReport,
    FinalCandidate,
    FrontendReport,
    PieceReport,
    PlacementReport,
    Rejection,
    SettingsReport,
    Skip,
    StreamsSkipped,
    as_json,
    part,
    parts,
)
from gspo.search.stats import rounds_faster, speed_verdict
from gspo.search.threads import settings_report

if TYPE_CHECKING:
    from gspo.costmodel.profile import Profile
    from gspo.partition import Partition
    from gspo.precision.report import PrecisionReport
    from gspo.search.budget import Timebox
    from gspo.search.pieces import VerifiedPieces
    from gspo.search.prepared import Prepared
    from gspo.search.strategies import Strategies


@dataclass(frozen=True)
class FinalChoice:
    """The whole-model choice: the pick; every candidate as the first timing measured it (or why
    it was rejected); the timing that decided (the pick's own against the original, or the
    first); and each contender's own timing."""

    best: Measured
    outcomes: list[Measured]
    decisive: list[Measured]
    confirmations: list[Confirmation]


@dataclass(frozen=True)
class ReducedPick:
    """The reduced-precision source's outcome (:func:`~gspo.search.reduced.reduced_pick`): the
    report's ``precision`` block, the candidate chosen over the exact pick (``None``: the exact
    pick stays) and its settings for the report."""

    block: PrecisionReport
    best: Measured | None = None
    settings: SettingsReport | None = None


@dataclass(frozen=True)
class WholeModel:
    """The whole-model stage: the choice, why the whole model on streams was not measured
    (``None``: it was, or it runs on one stream), what the placement measured, and with
    ``--precision`` what the reduced-precision candidates gave (the report's ``precision``
    block; a pick that replaces the exact one, and its settings)."""

    choice: FinalChoice
    streams_skipped: StreamsSkipped | None
    placement: PlacementReport
    precision: ReducedPick | None = None


@dataclass(frozen=True)
class Run:
    """What the stages of one ``optimize`` gave, that the report is built from: the model
    prepared, the options as given (before :func:`~gspo.search.driver.resolved`), the profile,
    the partition (``None``: not partitioned, the time budget was spent loading the model), the
    search's seconds, the pieces verified, the whole-model stage, whether the inputs were given,
    the strategies (the cost model, the device), the timebox (its start and clock) and the log of the work skipped to hold it."""

    prepared: Prepared
    given: OptimizeConfig
    profile: Profile
    parts: Partition | None
    search_seconds: float
    pieces: VerifiedPieces
    whole: WholeModel
    inputs_given: bool
    tools: Strategies
    timebox: Timebox
    skipped: list[Skip]


def _verdict(choice: FinalChoice, margin: float) -> tuple[float | None, float | None, str]:
    """:func:`speed_verdict` of the decisive timing; "not measured" when the time budget left
    none for the comparison (the input is handed back)."""
    if choice.best.timing is None:
        return None, None, "not measured"
    return speed_verdict(choice.decisive, choice.best, margin)


def _ms(seconds: float | None) -> float | None:
    return seconds * 1e3 if seconds is not None else None


@dataclass(frozen=True)
class Report:
    """optimize's report: the settings, the machine and profile, every candidate and what decided.

    The latencies, the spread and the verdict are those of the timing that decided (the pick's
    own against the original; ``None`` and "not measured" when the time budget left no time to
    time the original); ``final_candidates`` are every option in the first timing, and
    ``confirmations`` each contender's own timing. The fields are the keys of ``gspo optimize
    --report`` in its order (:meth:`to_json`); ``report["speedup"]`` reads one as a dict would.
    """

    model: str
    machine: str
    profile: str
    profile_device: str
    #: The pieces searched (0: not partitioned, the time budget was spent loading the model).
    pieces: int
    threshold: int
    cut_weight: float
    frontend: FrontendReport
    notes: list[str]
    dynamic_dims: str | None
    search_seconds: float
    total_seconds: float
    latency_before_ms: float | None
    latency_after_ms: float | None
    speedup: float | None
    timing_spread: float | None
    #: The rounds the pick was faster in, of the rounds it was timed in with the original.
    rounds_faster: list[int] | None
    verdict: str
    estimated_before_ms: float
    estimated_after_ms: float
    chosen: str
    select: str
    unchanged: bool
    substitutions: dict[str, int]
    streams: int
    syncs: int
    equivalence: dict[str, dict[str, float]]
    max_rel_err: float
    candidates_rejected_by_verification: int
    rejected: list[Rejection]
    invalid_rewrites: dict[str, int]
    final_candidates: list[FinalCandidate]
    confirmations: list[Confirmation]
    final_streams_skipped: StreamsSkipped | None
    pieces_detail: list[PieceReport]
    #: The options as given (``max_streams`` and ``jobs`` unresolved; no rules).
    config: OptimizeConfig
    inputs: str
    device: DeviceReport
    settings: SettingsReport
    placement: PlacementReport
    skipped: list[Skip]
    #: The precision stage (``--precision``): budget, data, each kind's fit and timing, the choice.
    precision: PrecisionReport | None = None

    def __post_init__(self):
        for name, read in _PARTS.items():  # a part given as its JSON is read as its record
            object.__setattr__(self, name, read(getattr(self, name)))

    def to_json(self) -> dict:
        """The report as ``gspo optimize --report`` writes it (the fields in order, each part as its JSON)."""
        return {f.name: as_json(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_json(cls, data: Mapping) -> Report:
        """The report of :meth:`to_json`'s dict (a key missing raises ``KeyError``)."""
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data or f.name != "precision"})

    def __getitem__(self, key: str):
        """A field by its key, as the JSON has it (a part as its JSON)."""
        if key not in _KEYS:
            raise KeyError(key)
        return as_json(getattr(self, key))

    def __contains__(self, key: object) -> bool:
        return key in _KEYS

    def get(self, key: str, default=None):
        """A field by its key, as ``dict.get`` (a part as its JSON)."""
        return self[key] if key in _KEYS else default

    def keys(self) -> tuple[str, ...]:
        """The keys of :meth:`to_json`, in order."""
        return _KEYS


_KEYS = tuple(f.name for f in fields(Report))


def _given_options(value) -> OptimizeConfig:
    return value if isinstance(value, OptimizeConfig) else OptimizeConfig.from_json(value)


def _precision(value):
    from gspo.precision.report import PrecisionReport

    return part(PrecisionReport)(value)


#: How each part of the report is read from its record or its JSON.
_PARTS: dict[str, Callable] = {
    "frontend": part(FrontendReport), "rejected": parts(Rejection), "final_candidates": parts(FinalCandidate),
    "confirmations": parts(Confirmation), "final_streams_skipped": part(StreamsSkipped),
    "pieces_detail": parts(PieceReport), "config": _given_options, "device": part(DeviceReport),
    "settings": part(SettingsReport), "placement": part(PlacementReport), "skipped": parts(Skip),
    "precision": _precision,
}




def _rejections(pieces_detail: list[PieceReport], outcomes: list[Measured]) -> list[Rejection]:
    """Every candidate verification rejected, in a piece or of the whole model, with the reason."""
    return ([Rejection(p.piece, c.label, c.rejected) for p in pieces_detail for c in p.candidates if c.rejected]
            + [Rejection(None, o.label, o.rejected) for o in outcomes if o.rejected])


def _frontend(prepared: Prepared) -> FrontendReport:
    return FrontendReport(len(prepared.original.nodes), len(prepared.plain.nodes), prepared.plain is not prepared.original)


def _estimated_after(base: Measured, best: Measured, cost_fn) -> float:
    """The pick's estimate; the input itself on another backend or thread setting gets the cost
    model's estimate of the input (read after the front end), not of the file as exported."""
    if best.candidate.graph is base.candidate.graph:
        return base.candidate.estimate
    return estimated_cost(best.candidate, cost_fn)


def _timing_fields(choice: FinalChoice, margin: float) -> dict:
    """The latencies, the speedup, its noise, the rounds won and the verdict of the decisive timing."""
    best = choice.best
    base = next(o for o in choice.decisive if o.label == "original")
    speedup, noise, verdict = _verdict(choice, margin)
    rounds = list(rounds_faster(base.timing, best.timing)) if best.label != "original" else None
    return dict(latency_before_ms=_ms(base.median_s), latency_after_ms=_ms(best.median_s), speedup=speedup,
                timing_spread=noise, rounds_faster=rounds, verdict=verdict)


def _pick_fields(run: Run, graph: Graph) -> dict:
    """What the pick is: its estimate, label, substitutions, streams, equivalence, device,
    settings and placement (``graph``: the pick as saved)."""
    choice = run.whole.choice
    best = choice.best
    base = next(o for o in choice.decisive if o.label == "original")
    rules = Counter(best.candidate.rules) if best.label != "original" else Counter()
    schedule, placement = best.candidate.schedule, best.candidate.placement
    return dict(
        estimated_before_ms=base.candidate.estimate * 1e3,
        estimated_after_ms=_estimated_after(base, best, run.tools.cost) * 1e3,
        chosen=best.label, select=run.given.timing.select, unchanged=best.label == "original",
        substitutions=dict(sorted(rules.items())),
        streams=schedule.num_streams if schedule else 1, syncs=len(schedule.events) if schedule else 0,
        equivalence={d.name: {"max_abs": d.max_abs, "max_rel": d.max_rel, "norm_rel": d.norm_rel} for d in best.diffs},
        max_rel_err=max((d.norm_rel for d in best.diffs), default=0.0),
        device=run.tools.device.report(best.candidate.graph), settings=settings_report(best.candidate),
        placement=PlacementReport(run.whole.placement.backends, run.whole.placement.timed,
                                  placement.counts(graph) if placement else {"ort": len(graph.nodes)}),
    )


def build_report(run: Run, graph: Graph, dynamic_note: str) -> Report:
    """optimize's report on the run's whole-model choice, its pick saved as ``graph`` (streams and
    settings applied); ``dynamic_note``: what became of the input's dynamic dimensions."""
    choice, details = run.whole.choice, run.pieces.reports
    rejected = _rejections(details, choice.outcomes)
    pick = _pick_fields(run, graph)
    reduced = run.whole.precision
    if reduced is not None and reduced.settings is not None:  # a reduced-precision pick replaces the exact one
        pick["settings"] = reduced.settings
    return Report(
        model=run.prepared.original.name, machine=run.tools.device.machine, profile=run.given.device.profile or "cpu",
        profile_device=run.profile.device, pieces=len(run.parts.pieces) if run.parts is not None else 0,
        threshold=run.given.search.threshold, cut_weight=run.parts.cut_weight if run.parts is not None else 0.0,
        frontend=_frontend(run.prepared), notes=run.prepared.notes, dynamic_dims=dynamic_note or None,
        search_seconds=run.search_seconds, total_seconds=run.timebox.clock() - run.timebox.started,
        **_timing_fields(choice, run.given.timing.final_margin),
        candidates_rejected_by_verification=len(rejected), rejected=rejected,
        invalid_rewrites=dict(sum((Counter(p.invalid_rewrites) for p in details), Counter())),
        final_candidates=[FinalCandidate(o.label, o.median_s * 1e3 if o.median_s else None, o.rejected)
                          for o in choice.outcomes],
        confirmations=choice.confirmations, final_streams_skipped=run.whole.streams_skipped, pieces_detail=details,
        config=run.given, inputs="given" if run.inputs_given else "random",
        **pick, skipped=list(run.skipped), precision=reduced.block if reduced is not None else None,
    )
