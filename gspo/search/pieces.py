"""The pieces' options verified and timed on the values that really reach them, and each
piece's choice, within the time budget's share for verification."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from gspo.ir import Graph
from gspo.partition import Partition
from gspo.rules import GREEDY_RULES, apply_greedily
from gspo.runtime import capture_values
from gspo.runtime.backends import DEFAULT_BACKEND
from gspo.search.budget import Timebox
from gspo.search.candidate import Candidate, Measured, baseline_refusal, distinct, estimated_cost
from gspo.search.config import OptimizeConfig
from gspo.search.pool import PieceSearch
from gspo.search.prepared import Prepared
from gspo.search.report_parts import PieceCandidate, PieceReport
from gspo.search.stats import pick
from gspo.search.strategies import Strategies
from gspo.search.trial import ReferenceError_, Trial
from gspo.streams import assign_streams
from gspo.timing import Deadline

__all__ = ["Boundary", "VerifiedPieces", "verify_pieces"]


@dataclass(frozen=True)
class Boundary:
    """The values that reach the pieces, one map of them per input set."""

    values: list[dict[str, np.ndarray]]

    def feeds_at(self, graph: Graph) -> list[dict[str, np.ndarray]]:
        """The feeds of ``graph`` (a piece) per input set."""
        return [{v.name: b[v.name] for v in graph.inputs} for b in self.values]


@dataclass(frozen=True)
class VerifiedPieces:
    """Each piece's verified choice and report, and the values that reach the pieces (``None``:
    not captured, the time budget could not hold it)."""

    chosen: list[Candidate]
    reports: list[PieceReport]
    boundary: Boundary | None


def _piece_options(piece, cands: list[Candidate], cfg: OptimizeConfig, allowed) -> list[Candidate]:
    """The unmodified piece, its greedy variant, the search's candidates (and each on one
    stream), its near-ties (``near0``...: estimated within the cost model's error of the piece as
    given, so measured rather than decided by the estimate), and the unmodified piece on streams;
    without repeats. The piece on streams comes right after the unmodified piece when an option
    merges branches (a rule that merges ops made it): such an option must beat the schedule that
    runs those branches side by side, and a tight time budget drops the last options first."""
    start, found = cands[0], cands[1:]
    improving = [c for c in found if c.kind != "near"]
    options = []
    if cfg.search.use_rules:
        greedy, counts = apply_greedily(piece.graph, [r for r in GREEDY_RULES if r.name in allowed])
        if greedy.key != piece.graph.key:
            options.append(Candidate(greedy, None, tuple(Counter(counts).elements()), label="greedy", kind="greedy"))
    for i, c in enumerate(improving):
        options.append(Candidate(c.graph, c.schedule, c.rules, c.estimate, label=f"candidate{i}", kind="candidate"))
    for i, c in enumerate(improving):
        if c.schedule is not None:  # the substitutions alone, in case the streams do not pay
            options.append(Candidate(c.graph, None, c.rules, label=f"candidate{i}-1stream", kind="substitutions"))
    for i, c in enumerate(c for c in found if c.kind == "near"):
        options.append(Candidate(c.graph, c.schedule, c.rules, c.estimate, label=f"near{i}", kind="candidate"))
    unmodified = Candidate(piece.graph, None, (), start.estimate, label="unmodified", kind="unmodified")
    streams = _on_streams(piece, cfg)
    if not streams:
        return distinct([unmodified, *options])
    merging = {r.name for r in cfg.search.rules if r.merges}
    if any(merging.intersection(o.rules) for o in options):
        return distinct([unmodified, *streams, *options])
    return distinct([unmodified, *options, *streams])


def _on_streams(piece, cfg: OptimizeConfig) -> list[Candidate]:
    """The piece as given on Nimble's streams (none when they are one stream or streams are off)."""
    if not cfg.search.use_streams:
        return []
    s = assign_streams(piece.graph, max_streams=cfg.search.max_streams)
    return [Candidate(piece.graph, s, label="unmodified+streams", kind="streams")] if s.num_streams > 1 else []


def _choose_piece(piece, options: list[Candidate], feeds, cfg: OptimizeConfig, timing_s: float,
                  tools: Strategies) -> tuple[Candidate, list[Measured], str]:
    """Verify and time a piece's options on the values that reach it; the pick, every outcome,
    and a note when the piece could not be tried."""
    if len(options) < 2:
        return options[0], [], ""
    try:
        with Trial(piece.graph, options, feeds, cfg.tolerance, executor=tools.device.executor(),
                   measure=tools.measure) as trial:
            outcomes = trial.time(cfg.timing.runs, Deadline.after(timing_s, tools.clock))
    except ReferenceError_ as e:
        return options[0], [], f"left unchanged: onnxruntime cannot run the piece alone ({e})"
    if refused := baseline_refusal(outcomes, "unmodified"):
        return options[0], outcomes, f"left unchanged: the piece as given cannot be measured on {tools.device.name}: {refused}"
    best = pick(outcomes, "unmodified", cfg.timing.margin, cfg.timing.select, lambda o: estimated_cost(o, tools.cost))
    return best.candidate, outcomes, ""


def _piece_report(k, piece, searched: PieceSearch, chosen: Candidate, outcomes: list[Measured],
                  note: str) -> PieceReport:
    return PieceReport(
        piece=k, ops=piece.size, expanded=searched.expanded, generated=searched.generated,
        search_s=searched.seconds, estimated_unmodified_s=searched.unmodified_cost, chosen=chosen.label,
        note=note, invalid_rewrites=dict(searched.invalid_reasons),
        candidates=[PieceCandidate(o.label, o.median_s, o.rejected,
                                   o.candidate.estimate if o.candidate.kind == "candidate" else None,
                                   list(dict.fromkeys(o.candidate.rules))) for o in outcomes],
    )


def _boundary(prepared: Prepared, parts: Partition, timebox: Timebox) -> Boundary | None:
    """The values that reach each piece (per input set); ``None`` when the budget cannot hold
    building a session of the whole model to capture them."""
    if not timebox.fits(timebox.rates.estimate(DEFAULT_BACKEND, len(prepared.plain.nodes))):
        timebox.skip("verify", "capturing the values that reach each piece (no piece verified or placed)",
                     "the time budget could not hold it")
        return None
    return Boundary(capture_values(prepared.plain, prepared.feeds, [v.name for p in parts.pieces for v in p.graph.inputs]))


def _unmodified(piece, searched: PieceSearch) -> Candidate:
    return Candidate(piece.graph, None, (), searched.unmodified_cost, label="unmodified", kind="unmodified")


def _optimize_pieces(parts: Partition, searched, boundary: Boundary | None, cfg: OptimizeConfig,
                     tools: Strategies, timebox: Timebox, progress) -> tuple[list[Candidate], list[PieceReport]]:
    """Each piece's chosen option and its report, sharing what ``timebox`` holds (anytime: the
    least promising options are dropped when a piece's share cannot hold them all; the budget
    says how many)."""
    pieces = parts.pieces
    allowed = {r.name for r in cfg.search.rules}
    chosen, reports, dropped, untried = [], [], 0, 0
    seconds_per_option = 0.3  # first guess at building, checking and timing one option; then measured
    for k, piece in enumerate(pieces):
        if boundary is None or timebox.expired():
            untried += boundary is not None
            chosen.append(_unmodified(piece, searched[k]))
            reports.append(_piece_report(k, piece, searched[k], chosen[-1], [], ""))
            if progress:
                progress(k + 1, len(pieces))
            continue
        cands = searched[k].candidates(piece.graph)
        options = _piece_options(piece, cands, cfg, allowed)
        timing_s = cfg.timing.piece_timing_budget
        if timebox.limited:
            share = timebox.remaining() / (len(pieces) - k)
            timing_s = min(timing_s, share / 2)
            kept = options[:max(1, int(share / seconds_per_option))]
            dropped, options = dropped + len(options) - len(kept), kept
        feeds = boundary.feeds_at(piece.graph)
        began = timebox.clock()
        best, outcomes, note = _choose_piece(piece, options, feeds, cfg, timing_s, tools)
        if outcomes:
            seconds_per_option = max(0.05, (timebox.clock() - began - timing_s) / len(options))
        chosen.append(best)
        reports.append(_piece_report(k, piece, searched[k], best, outcomes, note))
        if progress:
            progress(k + 1, len(pieces))
    _skipped_pieces(timebox, len(pieces), dropped, untried)
    return chosen, reports


def _skipped_pieces(timebox: Timebox, pieces: int, dropped: int, untried: int) -> None:
    if dropped:
        timebox.skip("verify", f"verifying {dropped} of the pieces' options",
                     "the time budget could not hold them (their least promising options)")
    if untried:
        timebox.skip("verify", f"verifying {untried} of the {pieces} pieces (kept unmodified)", "the time budget was spent")


def verify_pieces(prepared: Prepared, parts: Partition | None, searched, cfg: OptimizeConfig, tools: Strategies,
                  placing: bool, timebox: Timebox, progress) -> VerifiedPieces:
    """Each piece's verified choice and report, and the values that reach the pieces, in the
    time ``timebox`` holds before the final comparison's share (less the placement's share when
    ``placing`` on other backends). ``cfg`` is resolved (:func:`~gspo.search.driver.resolved`:
    its ``max_streams`` caps each piece's streams)."""
    if parts is None:
        return VerifiedPieces([], [], None)
    until_final = timebox.until_final()
    boundary = _boundary(prepared, parts, until_final)
    verify = until_final.share(1 - timebox.shares.placement) if placing else until_final
    chosen, reports = _optimize_pieces(parts, searched, boundary, cfg, tools, verify, progress)
    return VerifiedPieces(chosen, reports, boundary)
