"""optimize's report: the speedup with its noise, and every figure behind the choice."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import NamedTuple

from gspo.costmodel import device_description
from gspo.errors import GspoError
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


def build_report(prepared, cfg, profile, parts, t_search, t_total, choice: FinalChoice, pieces_detail,
                 skipped, cost_model, dynamic_note) -> dict:
    """optimize's report: the settings, the machine and profile, every candidate and what decided.

    The latencies, the spread and the verdict are those of the timing that decided (the pick's
    own against the original; ``None`` and "not measured" when the time budget left no time
    to time the original); ``final_candidates`` are every option in the first timing, and
    ``confirmations`` each contender's own timing. ``parts`` is ``None`` when the model was
    not partitioned (the time budget was spent loading it)."""
    best, outcomes = choice.best, choice.outcomes
    base = next(o for o in choice.decisive if o.label == "original")
    speedup, noise, verdict = _verdict(choice, cfg.final_margin)
    # the rounds the pick was faster in, of the rounds it was timed in with the original
    rounds = list(rounds_faster(base.timing, best.timing)) if best.label != "original" else None
    rules = Counter(best.option.rules) if best.label != "original" else Counter()
    return {
        "model": prepared.original.name,
        "machine": device_description("cpu"),
        "profile": cfg.profile or "cpu",
        "profile_device": profile.device,
        "pieces": len(parts.pieces) if parts is not None else 0,
        "threshold": cfg.threshold,
        "cut_weight": parts.cut_weight if parts is not None else 0.0,
        "frontend": {"nodes_in_file": len(prepared.original.nodes), "nodes_plain": len(prepared.work.nodes),
                     "used": prepared.work is not prepared.original},
        "notes": prepared.notes,
        "dynamic_dims": dynamic_note or None,
        "search_seconds": t_search,
        "total_seconds": t_total,
        "latency_before_ms": _ms(base.median_s),
        "latency_after_ms": _ms(best.median_s),
        "speedup": speedup,
        "timing_spread": noise,
        "rounds_faster": rounds,
        "verdict": verdict,
        "estimated_before_ms": base.option.estimated_s * 1e3,
        "estimated_after_ms": estimated_cost(best.option, cost_model.cost) * 1e3,
        "chosen": best.label,
        "select": cfg.select,
        "unchanged": best.label == "original",
        "substitutions": dict(sorted(rules.items())),
        "streams": best.option.schedule.num_streams if best.option.schedule else 1,
        "syncs": len(best.option.schedule.events) if best.option.schedule else 0,
        "equivalence": {d.name: {"max_abs": d.max_abs, "max_rel": d.max_rel, "norm_rel": d.norm_rel}
                        for d in best.diffs},
        "max_rel_err": max((d.norm_rel for d in best.diffs), default=0.0),
        "candidates_rejected_by_verification": sum(1 for p in pieces_detail for c in p["candidates"] if c["rejected"])
        + sum(1 for o in outcomes if o.rejected),
        "rejected": [{"piece": p["piece"], "label": c["label"], "reason": c["rejected"]}
                     for p in pieces_detail for c in p["candidates"] if c["rejected"]]
        + [{"piece": None, "label": o.label, "reason": o.rejected} for o in outcomes if o.rejected],
        "invalid_rewrites": dict(sum((Counter(p["invalid_rewrites"]) for p in pieces_detail), Counter())),
        "final_candidates": [{"label": o.label, "measured_ms": o.median_s * 1e3 if o.median_s else None,
                              "rejected": o.rejected} for o in outcomes],
        "confirmations": choice.confirmations,
        "final_streams_skipped": skipped,
        "pieces_detail": pieces_detail,
        "config": {k: v for k, v in dataclasses.asdict(cfg).items() if k != "rules"},
    }
