"""The records a report is made of, below every package that writes one: how a record becomes
its JSON and is read back (:func:`as_json`, :func:`part`, :func:`parts`, :class:`Plain`), and the
records both the search and the precision fit write (:class:`Skip`, :class:`SettingsReport`).
The parts of ``optimize``'s report are :mod:`gspo.search.report_parts`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields

__all__ = ["Plain", "SettingsReport", "Skip", "as_json", "part", "parts"]


def as_json(value):
    """``value`` as the report's JSON has it: a record by its ``to_json``, a list item by item."""
    if hasattr(value, "to_json"):
        return value.to_json()
    if isinstance(value, list):
        return [as_json(v) for v in value]
    return value


def part(cls) -> Callable:
    """A reader of one ``cls`` record from itself, its JSON, or ``None``."""
    return lambda v: v if v is None or isinstance(v, cls) else cls.from_json(v)


def parts(cls) -> Callable:
    """A reader of a list of ``cls`` records from the records or their JSON."""
    one = part(cls)
    return lambda v: [one(x) for x in v]


class Plain:
    """A record whose JSON is its fields, in order, as they are."""

    def to_json(self) -> dict:
        return {f.name: as_json(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_json(cls, data: Mapping):
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


@dataclass(frozen=True)
class Skip(Plain):
    """Work skipped to hold the time budget: the stage, what, and why."""

    stage: str
    what: str
    why: str


@dataclass(frozen=True)
class SettingsReport(Plain):
    """The winner's thread setting (0: the default), its backend, whether it was saved, and how
    to run it without gspo."""

    threads: int = 0
    backend: str | None = "ort"
    saved: bool = False
    advice: str | None = None
