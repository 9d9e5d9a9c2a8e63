"""optimize's report: the speedup with its noise, and every figure behind the choice."""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import NamedTuple

from gspo.costmodel import device_description
from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.search.budget import Budget
from gspo.search.device import device_report
from gspo.search.settings import settings_report
from gspo.search.trial import PAIRED_ALPHA, Option, Outcome, rounds_faster, sign_test, spread


class FinalChoice(NamedTuple):
    """The whole-model choice: the pick; every option as the first timing measured it (or why it
    was rejected); the timing that decided (the pick's own against the original, or the first);
    and each contender's own timing, for the report."""

    best: Outcome
    outcomes: list[Outcome]
    decisive: list[Outcome]
    confirmations: list[dict]


def estimated_cost(option: Option, cost_fn) -> float:
    """The option's estimated cost (infinite when the cost model cannot read its graph)."""
    if option.estimated_s is not None:
        return option.estimated_s
    try:
        return cost_fn(option.graph, option.schedule)
    except (GspoError, KeyError, TypeError, ValueError):
        return float("inf")


def speed_verdict(outcomes: list[Outcome], best: Outcome, margin: float = 0.0,
                  alpha: float = PAIRED_ALPHA) -> tuple[float, float, str]:
    """Speedup of the pick over the original, the timings' relative spread, and the verdict.

    "faster" when the pick's median beats the original's by ``margin`` and either the speedup
    exceeds the spread (the interquartile range over the median, the larger of the two
    timings), or the pick runs on one stream and was faster in so many of the interleaved rounds
    that chance is ruled out at ``alpha`` (:func:`consistently_faster`).
    """
    base = next(o for o in outcomes if o.label == "original")
    speedup = base.median_s / best.median_s
    noise = max(spread(base.timing), spread(best.timing))
    if best.label == "original":
        return speedup, noise, "unchanged"
    by_margin = best.median_s < base.median_s * (1 - margin)
    faster = by_margin and (speedup - 1 > noise or consistently_faster(base, best, alpha))
    return speedup, noise, ("faster" if faster else "no measurable change")


def consistently_faster(base: Outcome, best: Outcome, alpha: float = PAIRED_ALPHA) -> bool:
    """Whether ``best`` ran faster than ``base`` in significantly more of the interleaved rounds
    than chance gives (a one-sided sign test at ``alpha``).

    Each round times both one after the other, so a drift of the machine's speed falls on both
    and a small steady gain shows through a spread larger than itself. Not for an option on
    several streams: its speed depends on the other core being free, which the rounds of one
    timing do not vary, so it must beat the spread itself.
    """
    if best.option.on_streams:
        return False
    wins, rounds = rounds_faster(base.timing, best.timing)
    return sign_test(wins, rounds) < alpha


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
    frontend: dict
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
    rejected: list[dict]
    invalid_rewrites: dict[str, int]
    final_candidates: list[dict]
    confirmations: list[dict]
    final_streams_skipped: dict | None
    pieces_detail: list[dict]
    #: The options as given (``max_streams`` and ``jobs`` unresolved; no rules).
    config: dict
    inputs: str
    device: dict
    settings: dict
    placement: dict
    skipped: list[dict]
    #: The precision stage (``--precision``): budget, data, each kind's fit and timing, the choice.
    precision: dict | None = None

    def to_json(self) -> dict:
        """The report as ``gspo optimize --report`` writes it (the fields in order, as they are)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: Mapping) -> Report:
        """The report of :meth:`to_json`'s dict (a key missing raises ``KeyError``)."""
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data or f.name != "precision"})

    def __getitem__(self, key: str):
        if key not in _KEYS:
            raise KeyError(key)
        return getattr(self, key)

    def __contains__(self, key: object) -> bool:
        return key in _KEYS

    def get(self, key: str, default=None):
        """A field by its key, as ``dict.get``."""
        return getattr(self, key) if key in _KEYS else default

    def keys(self) -> tuple[str, ...]:
        """The keys of :meth:`to_json`, in order."""
        return _KEYS


_KEYS = tuple(f.name for f in fields(Report))


def _rejections(pieces_detail: list[dict], outcomes: list[Outcome]) -> list[dict]:
    """Every candidate verification rejected, in a piece or of the whole model, with the reason."""
    return ([{"piece": p["piece"], "label": c["label"], "reason": c["rejected"]}
             for p in pieces_detail for c in p["candidates"] if c["rejected"]]
            + [{"piece": None, "label": o.label, "reason": o.rejected} for o in outcomes if o.rejected])


def build_report(prepared, cfg, profile, parts, t_search, choice: FinalChoice, pieces_detail, streams_skipped,
                 cost_model, dynamic_note, *, graph: Graph, placement_report: dict, inputs_given: bool,
                 budget: Budget) -> Report:
    """optimize's report on ``choice``, its pick saved as ``graph`` (streams and settings
    applied); ``cfg``: the options as given. ``parts`` is ``None`` when the model was not
    partitioned (the time budget was spent loading it); ``streams_skipped``: why the whole
    model on streams was not measured (``None``: it was, or it runs on one stream)."""
    best, outcomes = choice.best, choice.outcomes
    base = next(o for o in choice.decisive if o.label == "original")
    speedup, noise, verdict = _verdict(choice, cfg.final_margin)
    rounds = list(rounds_faster(base.timing, best.timing)) if best.label != "original" else None
    rules = Counter(best.option.rules) if best.label != "original" else Counter()
    schedule, placement = best.option.schedule, best.option.placement
    rejected = _rejections(pieces_detail, outcomes)
    return Report(
        model=prepared.original.name, machine=device_description("cpu"), profile=cfg.profile or "cpu",
        profile_device=profile.device, pieces=len(parts.pieces) if parts is not None else 0,
        threshold=cfg.threshold, cut_weight=parts.cut_weight if parts is not None else 0.0,
        frontend={"nodes_in_file": len(prepared.original.nodes), "nodes_plain": len(prepared.work.nodes),
                  "used": prepared.work is not prepared.original},
        notes=prepared.notes, dynamic_dims=dynamic_note or None,
        search_seconds=t_search, total_seconds=time.perf_counter() - budget.started,
        latency_before_ms=_ms(base.median_s), latency_after_ms=_ms(best.median_s),
        speedup=speedup, timing_spread=noise, rounds_faster=rounds, verdict=verdict,
        estimated_before_ms=base.option.estimated_s * 1e3,
        # the input itself on another backend or thread setting: the cost model's estimate of the
        # input (read after the front end), not of the file as exported
        estimated_after_ms=(base.option.estimated_s if best.option.graph is base.option.graph
                            else estimated_cost(best.option, cost_model.cost)) * 1e3,
        chosen=best.label, select=cfg.select, unchanged=best.label == "original",
        substitutions=dict(sorted(rules.items())),
        streams=schedule.num_streams if schedule else 1, syncs=len(schedule.events) if schedule else 0,
        equivalence={d.name: {"max_abs": d.max_abs, "max_rel": d.max_rel, "norm_rel": d.norm_rel}
                     for d in best.diffs},
        max_rel_err=max((d.norm_rel for d in best.diffs), default=0.0),
        candidates_rejected_by_verification=len(rejected), rejected=rejected,
        invalid_rewrites=dict(sum((Counter(p["invalid_rewrites"]) for p in pieces_detail), Counter())),
        final_candidates=[{"label": o.label, "measured_ms": o.median_s * 1e3 if o.median_s else None,
                           "rejected": o.rejected} for o in outcomes],
        confirmations=choice.confirmations, final_streams_skipped=streams_skipped, pieces_detail=pieces_detail,
        config={k: v for k, v in dataclasses.asdict(cfg).items() if k != "rules"},
        inputs="given" if inputs_given else "random", device=device_report(cfg.device, best.option.graph),
        settings=settings_report(best.option),
        placement={**placement_report,
                   "chosen": placement.counts(graph) if placement else {"ort": len(graph.nodes)}},
        skipped=list(budget.skipped),
    )
