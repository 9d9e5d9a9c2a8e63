"""The report's ``precision`` block (``--precision``): the budget, the data, each kind's fit and
timing, and the choice."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields

from gspo.precision.accuracy import Accuracy
from gspo.records import as_json, part, parts

__all__ = ["KindReport", "PrecisionReport"]


def _accuracy(value):
    return part(Accuracy)(value)


@dataclass(frozen=True)
class KindReport:
    """One kind (a precision on a backend) after fitting: the pieces left reduced, why it was
    dropped, its median and speedup over fp32 at the thread count it was fastest at (0: the
    backend's default), its accuracy, and what happened to each piece."""

    kind: str
    precision: str
    backend: str
    pieces_reduced: list[int]
    dropped: str | None
    median_ms: float | None
    speedup_over_fp32: float | None
    calibration: Accuracy | None
    validation: Accuracy | None
    pieces: dict[str, str]
    threads: int = 0

    def __post_init__(self):
        object.__setattr__(self, "calibration", _accuracy(self.calibration))
        object.__setattr__(self, "validation", _accuracy(self.validation))

    def to_json(self) -> dict:
        return {f.name: as_json(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_json(cls, data: Mapping) -> KindReport:
        # a field with a default may be absent (a report written before it existed)
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data or f.default is MISSING})


@dataclass(frozen=True)
class PrecisionReport:
    """The precision block: what was asked, the data used (and warnings about it), the pieces,
    fp32's median and accuracy, each kind, the choice, its speedup and its accuracy (an accuracy is
    ``None`` where the time budget did not hold measuring it, or the stage was skipped)."""

    requested: list[str]
    max_error: str
    data: dict[str, str]
    warnings: list[str]
    notes: list[str]
    pieces: int
    piece_ops: list[int]
    fp32_median_ms: float | None
    fp32_validation: Accuracy | None
    kinds: list[KindReport]
    chosen: str
    speedup_over_fp32: float
    validation: Accuracy | None

    def __post_init__(self):
        object.__setattr__(self, "fp32_validation", _accuracy(self.fp32_validation))
        object.__setattr__(self, "kinds", parts(KindReport)(self.kinds))
        object.__setattr__(self, "validation", _accuracy(self.validation))

    def to_json(self) -> dict:
        return {f.name: as_json(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_json(cls, data: Mapping) -> PrecisionReport:
        return cls(**{f.name: data[f.name] for f in fields(cls)})
