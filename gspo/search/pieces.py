"""The pieces' options verified and timed on the values that really reach them, and each
piece's choice, within the time budget's share for verification."""

from __future__ import annotations

import time
from collections import Counter

from gspo.partition import Partition
from gspo.rules import GREEDY_RULES, apply_greedily
from gspo.runtime import capture_values
from gspo.runtime.backends import DEFAULT_BACKEND
from gspo.search.backtrack import Candidate
from gspo.search.budget import Budget
from gspo.search.config import OptimizeConfig, Prepared
from gspo.search.device import baseline_refusal, option_executor
from gspo.search.pool import PieceSearch
from gspo.search.report import estimated_cost
from gspo.search.trial import Option, Outcome, ReferenceError_, Trial, distinct, pick
from gspo.streams import assign_streams

__all__ = ["verify_pieces"]


def _piece_options(piece, cands: list[Candidate], cfg: OptimizeConfig, allowed) -> list[Option]:
    """The unmodified piece, its greedy variant, the search's candidates (and each on one
    stream), and the unmodified piece on streams; without repeats."""
    start, improving = cands[0], cands[1:]
    options = [Option("unmodified", piece.graph, None, (), start.cost, kind="unmodified")]
    if cfg.use_rules:
        greedy, counts = apply_greedily(piece.graph, [r for r in GREEDY_RULES if r.name in allowed])
        if greedy.key != piece.graph.key:
            options.append(Option("greedy", greedy, None, tuple(Counter(counts).elements()), kind="greedy"))
    for i, c in enumerate(improving):
        options.append(Option(f"candidate{i}", c.graph, c.schedule, c.applied, c.cost, kind="candidate"))
    for i, c in enumerate(improving):
        if c.schedule is not None:  # the substitutions alone, in case the streams do not pay
            options.append(Option(f"candidate{i}-1stream", c.graph, None, c.applied, kind="substitutions"))
    if cfg.use_streams:
        s = assign_streams(piece.graph, max_streams=cfg.max_streams)
        if s.num_streams > 1:
            options.append(Option("unmodified+streams", piece.graph, s, kind="streams"))
    return distinct(options)


def _choose_piece(piece, options: list[Option], feeds, cfg: OptimizeConfig, timing_budget: float,
                  cost_fn) -> tuple[Option, list[Outcome], str]:
    """Verify and time a piece's options on the values that reach it; the pick, every outcome,
    and a note when the piece could not be tried."""
    if len(options) < 2:
        return options[0], [], ""
    try:
        with Trial(piece.graph, options, feeds, cfg.tolerance, executor=option_executor(cfg.device)) as trial:
            outcomes = trial.time(cfg.timing_runs, timing_budget)
    except ReferenceError_ as e:
        return options[0], [], f"left unchanged: onnxruntime cannot run the piece alone ({e})"
    if refused := baseline_refusal(outcomes, "unmodified"):
        return options[0], outcomes, f"left unchanged: the piece as given cannot be measured on {cfg.device}: {refused}"
    best = pick(outcomes, "unmodified", cfg.margin, cfg.select, lambda o: estimated_cost(o, cost_fn))
    return best.option, outcomes, ""


def _piece_report(k, piece, searched: PieceSearch, chosen: Option, outcomes: list[Outcome], note: str) -> dict:
    return {
        "piece": k, "ops": piece.size, "expanded": searched.expanded, "generated": searched.generated,
        "search_s": searched.seconds, "estimated_unmodified_s": searched.unmodified_cost, "chosen": chosen.label,
        "note": note, "invalid_rewrites": dict(searched.invalid_reasons),
        "candidates": [{"label": o.label, "measured_s": o.median_s, "rejected": o.rejected,
                        "estimated_s": o.option.estimated_s if o.option.kind == "candidate" else None,
                        "rules": list(dict.fromkeys(o.option.rules))} for o in outcomes],
    }


def _boundary(prepared: Prepared, parts: Partition, budget: Budget) -> list[dict] | None:
    """The values that reach each piece (per input set); ``None`` when the budget cannot hold
    building a session of the whole model to capture them."""
    if not budget.fits(budget.rates.estimate(DEFAULT_BACKEND, len(prepared.work.nodes))):
        budget.skip("verify", "capturing the values that reach each piece (no piece verified or placed)",
                    "the time budget could not hold it")
        return None
    return capture_values(prepared.work, prepared.feeds, [v.name for p in parts.pieces for v in p.graph.inputs])


def _unmodified(piece, searched: PieceSearch) -> Option:
    return Option("unmodified", piece.graph, None, (), searched.unmodified_cost, kind="unmodified")


def _optimize_pieces(parts: Partition, searched, boundary, cfg: OptimizeConfig, cost_fn, budget: Budget,
                     progress) -> tuple[list[Option], list[dict]]:
    """Each piece's chosen option and its report, sharing what ``budget`` holds (anytime: the
    least promising options are dropped when a piece's share cannot hold them all; the budget
    says how many)."""
    pieces = parts.pieces
    allowed = {r.name for r in cfg.rules}
    chosen, reports, dropped, untried = [], [], 0, 0
    seconds_per_option = 0.3  # first guess at building, checking and timing one option; then measured
    for k, piece in enumerate(pieces):
        if boundary is None or budget.expired():
            untried += boundary is not None
            chosen.append(_unmodified(piece, searched[k]))
            reports.append(_piece_report(k, piece, searched[k], chosen[-1], [], ""))
            if progress:
                progress(k + 1, len(pieces))
            continue
        cands = searched[k].candidates(piece.graph)
        options = _piece_options(piece, cands, cfg, allowed)
        timing_budget = cfg.piece_timing_budget
        if budget.limited:
            share = budget.remaining() / (len(pieces) - k)
            timing_budget = min(timing_budget, share / 2)
            kept = options[:max(1, int(share / seconds_per_option))]
            dropped, options = dropped + len(options) - len(kept), kept
        feeds = [{v.name: b[v.name] for v in piece.graph.inputs} for b in boundary]
        began = time.perf_counter()
        best, outcomes, note = _choose_piece(piece, options, feeds, cfg, timing_budget, cost_fn)
        if outcomes:
            seconds_per_option = max(0.05, (time.perf_counter() - began - timing_budget) / len(options))
        chosen.append(best)
        reports.append(_piece_report(k, piece, searched[k], best, outcomes, note))
        if progress:
            progress(k + 1, len(pieces))
    _skipped_pieces(budget, len(pieces), dropped, untried)
    return chosen, reports


def _skipped_pieces(budget: Budget, pieces: int, dropped: int, untried: int) -> None:
    if dropped:
        budget.skip("verify", f"verifying {dropped} of the pieces' options",
                    "the time budget could not hold them (their least promising options)")
    if untried:
        budget.skip("verify", f"verifying {untried} of the {pieces} pieces (kept unmodified)", "the time budget was spent")


def verify_pieces(prepared: Prepared, parts: Partition | None, searched, cfg: OptimizeConfig, cost_fn,
                  placing: bool, budget: Budget, progress) -> tuple[list[Option], list[dict], list | None]:
    """Each piece's verified choice and report, and the values that reach the pieces, in the
    time ``budget`` holds before the final comparison's share (less the placement's share when
    ``placing`` on other backends). ``cfg`` is resolved (:func:`~gspo.search.optimize.resolved`:
    its ``max_streams`` caps each piece's streams)."""
    if parts is None:
        return [], [], None
    until_final = budget.until_final()
    boundary = _boundary(prepared, parts, until_final)
    verify = until_final.share(1 - budget.shares.placement) if placing else until_final
    chosen, reports = _optimize_pieces(parts, searched, boundary, cfg, cost_fn, verify, progress)
    return chosen, reports, boundary
