"""The parts of optimize's report: one record per block of ``gspo optimize --report``.

Each record's ``to_json`` gives the block as the report's JSON has it, key for key, and
``from_json`` reads that back; a part given as its JSON where a record is expected is read as the
record (:func:`part`, :func:`parts`), so the report can be built from either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gspo.records import Plain as _Plain
from gspo.records import SettingsReport, Skip, as_json, part, parts

__all__ = ["Confirmation", "DeviceReport", "Fallback", "FinalCandidate", "FrontendReport", "MixedEstimate",
           "PieceCandidate", "PieceReport", "PiecesTimed", "PlacementRefusal", "PlacementReport", "Rejection",
           "SettingsReport", "Skip", "StreamsSkipped", "as_json", "part", "parts"]

#: A value the device block holds (versions, names, counts).
Scalar = str | int | float | bool | None


@dataclass(frozen=True)
class FrontendReport(_Plain):
    """The front end's block: the ops in the file and after folding, and whether its graph was searched."""

    nodes_in_file: int
    nodes_plain: int
    used: bool


@dataclass(frozen=True)
class Rejection(_Plain):
    """A candidate verification rejected: its piece (``None``: the whole model), label and reason."""

    piece: int | None
    label: str
    reason: str


@dataclass(frozen=True)
class FinalCandidate(_Plain):
    """A whole-model candidate as the first timing measured it, or why it was rejected."""

    label: str
    measured_ms: float | None
    rejected: str | None


@dataclass(frozen=True)
class Confirmation:
    """A contender's own timing against the original: whether it confirmed the win, the two
    medians and the rounds it won of those timed (or why it failed while timed again)."""

    label: str
    confirmed: bool
    rejected: str | None = None
    original_ms: float | None = None
    measured_ms: float | None = None
    rounds_faster: list[int] | None = None

    def to_json(self) -> dict:
        if self.measured_ms is None:
            return {"label": self.label, "confirmed": self.confirmed, "rejected": self.rejected}
        return {"label": self.label, "confirmed": self.confirmed, "original_ms": self.original_ms,
                "measured_ms": self.measured_ms, "rounds_faster": self.rounds_faster}

    @classmethod
    def from_json(cls, data: Mapping) -> Confirmation:
        return cls(**dict(data))


@dataclass(frozen=True)
class StreamsSkipped:
    """Why the whole model on streams was not measured: the time budget (``reason``), or its
    estimate clearly slower than on one stream. Of the whole model's ablations on Nimble's
    streams, the result's (``"optimized+streams"``) first, else the input's (``"streams only"``):
    which of them were measured, the final candidates' labels say."""

    reason: str | None = None
    estimated_ms: float | None = None
    estimated_one_stream_ms: float | None = None

    def to_json(self) -> dict:
        if self.reason is not None:
            return {"reason": self.reason}
        return {"estimated_ms": self.estimated_ms, "estimated_one_stream_ms": self.estimated_one_stream_ms}

    @classmethod
    def from_json(cls, data: Mapping) -> StreamsSkipped:
        return cls(**dict(data))


@dataclass(frozen=True)
class PieceCandidate(_Plain):
    """One of a piece's candidates: measured seconds or why it was rejected, its estimate (a
    search result's), the rules that made it."""

    label: str
    measured_s: float | None
    rejected: str | None
    estimated_s: float | None
    rules: list[str]


@dataclass(frozen=True)
class PieceReport(_Plain):
    """One piece: its search's counts, what was chosen (and a note when it could not be tried)."""

    piece: int
    ops: int
    expanded: int
    generated: int
    search_s: float
    estimated_unmodified_s: float
    chosen: str
    note: str
    invalid_rewrites: dict[str, int]
    candidates: list[PieceCandidate]

    def __post_init__(self):
        object.__setattr__(self, "candidates", parts(PieceCandidate)(self.candidates))


@dataclass(frozen=True)
class Fallback(_Plain):
    """An op the GPU runtime left to onnxruntime's CPU provider, and why."""

    node: str
    op: str
    reason: str


@dataclass(frozen=True)
class DeviceReport:
    """The device block: the device that measured and the versions that matter (as the device
    names them, in its order); on the torch runtime, the chosen graph's ops left to the CPU."""

    entries: dict[str, Scalar]
    cpu_fallback: list[Fallback] | None = None

    def __post_init__(self):
        if self.cpu_fallback is not None:
            object.__setattr__(self, "cpu_fallback", parts(Fallback)(self.cpu_fallback))

    @property
    def device(self) -> str | None:
        """``"cpu"`` or ``"cuda"``."""
        return self.entries.get("device")

    def to_json(self) -> dict:
        out = dict(self.entries)
        if self.cpu_fallback is not None:
            out["cpu_fallback"] = as_json(self.cpu_fallback)
        return out

    @classmethod
    def from_json(cls, data: Mapping) -> DeviceReport:
        entries = {k: v for k, v in data.items() if k != "cpu_fallback"}
        return cls(entries, data.get("cpu_fallback"))


@dataclass(frozen=True)
class PlacementRefusal(_Plain):
    """A backend that could not take a piece, and why."""

    piece: int
    backend: str
    reason: str


@dataclass(frozen=True)
class MixedEstimate(_Plain):
    """What the pieces' timings estimate: each on its fastest backend (crossings included), the
    whole model on each backend, the crossings, and how many pieces each backend would get."""

    mixed_s: float
    whole_s: dict[str, float]
    crossings: int
    crossing_s: float
    pieces: dict[str, int]


@dataclass(frozen=True)
class PiecesTimed:
    """The pieces timed on each backend: the estimate, a crossing's fixed seconds, the refusals
    and how many pieces the calibration database had."""

    estimate: MixedEstimate
    crossing_fixed_s: float
    refused: list[PlacementRefusal]
    pieces_cached: int

    def to_json(self) -> dict:
        return {**self.estimate.to_json(), "crossing_fixed_s": self.crossing_fixed_s,
                "refused": as_json(self.refused), "pieces_cached": self.pieces_cached}

    @classmethod
    def from_json(cls, data: Mapping) -> PiecesTimed:
        return cls(MixedEstimate.from_json(data), data["crossing_fixed_s"],
                   parts(PlacementRefusal)(data["refused"]), data["pieces_cached"])


@dataclass(frozen=True)
class PlacementReport:
    """The placement block: the backends tried, the pieces' timings when they were measured, and
    the ops of the chosen model on each backend."""

    backends: list[str] | None
    timed: PiecesTimed | None = None
    chosen: dict[str, int] | None = None

    def to_json(self) -> dict:
        out: dict = {} if self.backends is None else {"backends": list(self.backends)}
        if self.timed is not None:
            out.update(self.timed.to_json())
        if self.chosen is not None:
            out["chosen"] = self.chosen
        return out

    @classmethod
    def from_json(cls, data: Mapping) -> PlacementReport:
        timed = PiecesTimed.from_json(data) if "mixed_s" in data else None
        return cls(data.get("backends"), timed, data.get("chosen"))
