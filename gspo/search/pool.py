"""The pieces searched in processes of their own (forked: each gets the work as it forks), at
most ``jobs`` at a time; a process that dies or overstays loses only its own piece's search."""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import wait

from gspo.ir import Graph
from gspo.search.backtrack import joint_cost, search
from gspo.search.candidate import Candidate
from gspo.search.options import SearchOptions
from gspo.streams import Schedule
from gspo.timing import Deadline

__all__ = ["PieceSearch", "search_pieces", "GRACE_S"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Found:
    """One graph a search reached, as a search process sends it back: the piece's nodes and
    weights after the rewrites (the rest of the graph is the piece's own), its schedule, its
    estimated cost, the rules applied and its kind (``"near"``: a near-tie of the piece as given)."""

    nodes: tuple
    weights: dict
    retired_weights: dict
    schedule: Schedule | None
    estimate: float
    rules: tuple[str, ...]
    kind: str = "other"

    @classmethod
    def of(cls, c: Candidate) -> _Found:
        g = c.graph
        return cls(g.nodes, dict(g.weights), dict(g.retired_weights), c.schedule, c.estimate, c.rules, c.kind)

    def candidate(self, piece: Graph) -> Candidate:
        """The candidate on ``piece``'s graph."""
        g = dataclasses.replace(piece, nodes=self.nodes, weights=self.weights, retired_weights=self.retired_weights)
        return Candidate(g, self.schedule, self.rules, self.estimate, kind=self.kind)


@dataclass(frozen=True)
class PieceSearch:
    """What the search of one piece found: the piece as given first, then the candidates for
    verification; the counts of the search and why rewritten graphs were dropped."""

    index: int
    found: tuple[_Found, ...]
    expanded: int
    generated: int
    seconds: float
    invalid_reasons: tuple[tuple[str, int], ...]
    out_of_time: bool
    #: Why the piece's search was lost (its process died or overstayed; the piece is kept as
    #: given, and :attr:`invalid_reasons` says so too); ``None``: it was searched.
    lost: str | None = None

    @property
    def unmodified_cost(self) -> float:
        """The estimated cost of the piece as given."""
        return self.found[0].estimate

    def candidates(self, piece: Graph) -> list[Candidate]:
        """Every graph found, on ``piece``'s graph (the piece as given first)."""
        return [f.candidate(piece) for f in self.found]


@dataclass(frozen=True)
class _Work:
    """What every search of one call shares."""

    pieces: Sequence
    cost_fn: Callable
    search: SearchOptions
    #: The search's deadline (its clock runs on in the forked workers), and the seconds each
    #: piece gets from its start at most (``None``: no limit but the deadline).
    deadline: Deadline
    per_piece_s: float | None
    search_fn: Callable = search

    def piece_deadline(self) -> Deadline:
        """The deadline of a piece whose search starts now (a piece started late gets what is
        left of the search's share)."""
        return self.deadline.within(self.per_piece_s)


#: Seconds a search process may run past the search's deadline before it is ended (a search
#: stops between two matches; one match or its cost estimate can take a while on a large piece).
GRACE_S = 5.0
#: Seconds between two looks at the search processes while none reports.
_POLL_S = 0.5
#: The signals held back while a search process forks.
_INTERRUPTS = frozenset({signal.SIGINT, signal.SIGTERM})


def _search_piece(index: int, work: _Work) -> PieceSearch:
    result = work.search_fn(work.pieces[index].graph, work.cost_fn, work.search, deadline=work.piece_deadline())
    return PieceSearch(index, tuple(_Found.of(c) for c in (result.start, *result.candidates)), result.expanded,
                       result.generated, result.seconds, result.invalid_reasons, result.out_of_time)


def _as_given(index: int, work: _Work, why: str) -> PieceSearch:
    """The piece ``index`` as given, its search lost for the reason ``why``."""
    graph = work.pieces[index].graph
    cost, schedule, _ = joint_cost(graph, work.cost_fn, work.search)
    log.warning("piece %d is kept as given: %s", index, why)
    return PieceSearch(index, (_Found.of(Candidate(graph, schedule, (), cost)),), 0, 0, 0.0,
                       ((f"the search was lost: {why}", 1),), False, lost=why)


def search_pieces(pieces, cost_fn, cfg, per_piece_time, progress, deadline: Deadline | None = None,
                  search_fn: Callable = search) -> list[PieceSearch]:
    """Search every piece (each in a process of its own, ``cfg.search.jobs`` at a time, when
    ``cfg.search.jobs`` > 1; streams capped at ``cfg.search.max_streams``: ``cfg`` is resolved,
    :func:`~gspo.search.driver.resolved`); results in piece order. Each search takes
    ``per_piece_time`` seconds at most, and ends by ``deadline`` (its clock runs on in the forked
    processes; ``None``: never). ``search_fn`` searches one piece (the signature of
    :func:`~gspo.search.backtrack.search`, given the piece's deadline).

    A search process that dies (killed, or by the out-of-memory killer) or runs :data:`GRACE_S`
    past ``deadline`` loses its piece's search: the piece is kept as given and its
    :attr:`PieceSearch.lost` says why; an exception in a search is raised here."""
    work = _Work(pieces, cost_fn, cfg.search, deadline if deadline is not None else Deadline(None), per_piece_time,
                 search_fn)
    if cfg.search.jobs <= 1 or len(pieces) <= 1:
        results = []
        for i in range(len(pieces)):
            results.append(_search_piece(i, work))
            if progress:
                progress(i + 1, len(pieces))
        return results
    return _Forked(work, cfg.search.jobs, progress).run()


def _child(index: int, work: _Work, conn) -> None:
    """A search process: leaves interrupts to the parent (which ends it), dies silently when
    ended, and sends back its piece's search or the exception that ended it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _INTERRUPTS)  # blocked by the parent around the fork
    try:
        message = ("ok", _search_piece(index, work))
    except Exception as e:  # raised in the parent
        message = ("error", e)
    try:
        conn.send(message)
    except Exception as e:  # what does not pickle is sent as its text
        failed = message[1] if message[0] == "error" else e
        conn.send(("error", RuntimeError(f"{type(failed).__name__}: {failed}")))
    conn.close()


def _death(exitcode: int | None) -> str:
    """Why a search process ended without sending its result."""
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name if -exitcode in signal.valid_signals() else f"signal {-exitcode}"
        hint = " (killed from outside, perhaps by the out-of-memory killer)" if -exitcode == signal.SIGKILL else ""
        return f"its search process died of {name}{hint}"
    return f"its search process exited with status {exitcode} without a result"


class _Forked:
    """Each piece searched in a forked process of its own (it gets the work as it forks), at
    most ``jobs`` at a time; a process that dies (its pipe closes) or runs :data:`GRACE_S` past
    its time (its piece's deadline) is noticed and its piece kept
    as given."""

    def __init__(self, work: _Work, jobs: int, progress):
        self.work, self.jobs, self.progress = work, jobs, progress
        self.ctx = multiprocessing.get_context("fork")
        self.results: list[PieceSearch | None] = [None] * len(work.pieces)
        self.running: dict[int, tuple] = {}  # piece -> (process, the end its result arrives at, when to end it)
        self.done = 0

    def run(self) -> list[PieceSearch]:
        todo = list(range(len(self.work.pieces)))
        try:
            while todo or self.running:
                while todo and len(self.running) < self.jobs:
                    self._start(todo.pop(0))
                ready = wait([conn for _, conn, _ in self.running.values()], timeout=_POLL_S)
                for index in [i for i, (_, conn, _) in self.running.items() if conn in ready]:
                    self._collect(index)
                self._watch()
        finally:
            for index in list(self.running):
                self._end(index)
        return self.results

    def _limit(self) -> float | None:
        """When a search started now is ended: :data:`GRACE_S` after its time, or after now when
        that has passed (``None``: never)."""
        ends = self.work.piece_deadline()
        return None if ends.at is None else max(ends.at, ends.now()) + GRACE_S

    def _start(self, index: int) -> None:
        receive, send = self.ctx.Pipe(duplex=False)
        process = self.ctx.Process(target=_child, args=(index, self.work, send), daemon=True,
                                   name=f"gspo-search-{index}")
        # SIGINT and SIGTERM wait while the process forks: a handler's exception raised inside the
        # fork hooks (logging's lock release) is swallowed by Python, and a SIGTERM was lost so
        # (optimize ran on to the end); pending, they are taken here once the fork is done
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _INTERRUPTS)
        try:
            process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        send.close()  # the child's end only: its death closes the pipe
        self.running[index] = (process, receive, self._limit())

    def _collect(self, index: int) -> None:
        process, conn, _ = self.running[index]
        try:
            status, value = conn.recv()
        except (EOFError, OSError):
            process.join(timeout=5)
            status, value = "lost", _death(process.exitcode)
        self._end(index)
        if status == "error":
            raise value
        self._finish(index, value if status == "ok" else _as_given(index, self.work, value))

    def _watch(self) -> None:
        """End the searches that ran :data:`GRACE_S` past their time."""
        now = self.work.deadline.now()
        for index in [i for i, (_, _, limit) in self.running.items() if limit is not None and now >= limit]:
            self._end(index)
            self._finish(index, _as_given(index, self.work, f"its search ran {GRACE_S:g} s past its time and was ended"))

    def _finish(self, index: int, result: PieceSearch) -> None:
        self.results[index] = result
        self.done += 1
        if self.progress:
            self.progress(self.done, len(self.results))

    def _end(self, index: int) -> None:
        process, conn, _ = self.running.pop(index)
        if process.is_alive():
            process.kill()
        process.join()
        conn.close()
