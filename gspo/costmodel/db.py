"""The calibration database: measurements cached in SQLite, so calibration resumes.

Keyed by (device, runtime version, signature). WAL journal and one short transaction per
measurement: an interrupted run loses at most the measurement in flight, and two calibrations
on one database neither corrupt it nor lose measurements (``INSERT OR IGNORE`` keeps the first
of two measurements of the same signature).

Rows are validated as rows, not only as a schema: a row that is not JSON text (a BLOB, NULL, a
number), not an object, whose fields have the wrong types or values (``{"seconds": "abc"}``,
``{}``, ``[1, 2]``, a negative or non-finite time), or that is not in the form its key's reader
takes (``{"seconds": 1e308}`` under a placement crossing's key, which wants ``fixed_s`` and
``bandwidth``) is treated as missing, with one warning, and the next measurement of its
signature replaces it (:func:`valid_row`, :func:`_key_form`).

Where the database is only a cache (optimize's placement timings, in the user's cache folder),
:class:`CalibrationCache` wraps it: a database that is corrupt, of another schema, locked by
another process for more than :data:`LOCK_WAIT_S`, or that cannot be written is a one-line
warning, and the work goes on without it.
"""

from __future__ import annotations

import json
import logging
import math
import re
import sqlite3
from pathlib import Path

from gspo.errors import GspoError, clipped, first_line

__all__ = ["CalibrationDB", "CalibrationCache", "CacheError", "LOCK_WAIT_S", "valid_row"]

log = logging.getLogger(__name__)

#: Seconds a cache (:class:`CalibrationCache`) waits for another process's lock before it is
#: skipped; a calibration's own database waits a minute (two calibrations may share one).
LOCK_WAIT_S = 2.0

_COLUMNS = ("device", "runtime", "signature", "kind", "data")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS measurements (
    device TEXT NOT NULL,
    runtime TEXT NOT NULL,
    signature TEXT NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (device, runtime, signature)
)
"""


def _seconds(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def _positive(v) -> bool:
    return _seconds(v) and v > 0


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _text(v) -> bool:
    return isinstance(v, str) and bool(v)


_TIMED = ({"seconds": _seconds},)
#: Per kind, the fields a row must have (one of the alternatives), each with its check.
_REQUIRED = {
    "placement": ({"refused": _text}, {"seconds": _seconds}, {"fixed_s": _seconds, "bandwidth": _positive}),
    "fixed": ({"call": _seconds, "sync": _seconds}, {"seconds": _seconds}, {"block": _count}),
    "op": _TIMED, "chain": _TIMED, "branches": _TIMED, "piece": _TIMED,
}
#: Fields a row may have beside those, each with its check (others are let be).
_OPTIONAL = {"seconds": _seconds, "one_session": _seconds, "segments_in_order": _seconds, "reference": _seconds,
             "streams": _count, "passes": _count, "refused": _text, "fixed_s": _seconds, "bandwidth": _positive,
             "call": _seconds, "sync": _seconds, "block": _count}


def valid_row(kind: str, row) -> bool:
    """Whether ``row`` is a measurement of ``kind`` as its readers use it: a JSON object with
    the fields of one of the kind's forms, every known field of the right type and range."""
    return _fits(row, _REQUIRED.get(kind))


def _fits(row, forms) -> bool:
    if not isinstance(row, dict) or not all(isinstance(k, str) for k in row):
        return False
    if not all(check(row[k]) for k, check in _OPTIONAL.items() if k in row):
        return False
    return forms is None or any(all(k in row and check(row[k]) for k, check in form.items()) for form in forms)


#: The keys gspo stores rows under and the one form each key's reader takes, by the key's start
#: (gspo.search.placement: a crossing's fixed cost and a piece's time on a backend) or whole key
#: (gspo.costmodel.calibrate's fixed costs). A row of its kind but in another key's form
#: (``{"seconds": 1e308}`` under a crossing's key) was an internal error where it was read.
_PREFIXES = (("placement-crossing:", "placement", ({"fixed_s": _seconds, "bandwidth": _positive},)),
             ("placement:", "placement", ({"refused": _text}, {"seconds": _seconds})))
_WHOLE = {"fixed-costs": ("fixed", ({"call": _seconds, "sync": _seconds},)),
          "launch-cost": ("fixed", ({"seconds": _seconds},)), "layout": ("fixed", ({"block": _count},))}
#: A benchmark's key (gspo.costmodel.microbench.Bench.signature: its kind and spec as a JSON
#: object), with ``#pass=K`` after it for pass K >= 1 (gspo.costmodel.calibrate.PASS_MARK).
_BENCHMARK = re.compile(r"(\{.*\})(?:#pass=[0-9]+)?", re.S)
_BENCHMARK_KINDS = ("op", "chain", "branches", "piece")


def _key_form(signature: str) -> tuple[str, tuple | None] | None:
    """The kind and forms of the rows gspo stores under ``signature`` (``None``: not a key gspo
    makes; its row is checked against its own kind only)."""
    for start, kind, forms in _PREFIXES:
        if signature.startswith(start):
            return kind, forms
    if signature in _WHOLE:
        return _WHOLE[signature]
    match = _BENCHMARK.fullmatch(signature)
    try:
        spec = json.loads(match.group(1)) if match else None
    except (ValueError, RecursionError):
        spec = None
    kind = spec.get("kind") if isinstance(spec, dict) else None
    return (kind, _REQUIRED[kind]) if kind in _BENCHMARK_KINDS else None


def _stored(value) -> str:
    """A stored value as a warning shows it (what is not text named as SQLite's type)."""
    if isinstance(value, bytes):
        return f"a BLOB of {len(value)} bytes"
    if value is None:
        return "NULL"
    return clipped(value, 60) if isinstance(value, str) else f"the number {clipped(value, 60)}"


def _fields(forms) -> str:
    return " or ".join(" and ".join(form) for form in forms)


def _problem(signature, kind, data, benchmark: bool = False) -> tuple[dict | None, str]:
    """The row stored as ``(signature, kind, data)`` and ``""``, or ``None`` and why it is not a
    valid measurement (a ``benchmark``'s row must be under a benchmark's key)."""
    if not isinstance(signature, str) or not isinstance(kind, str):
        return None, f"its key or kind is {_stored(signature if not isinstance(signature, str) else kind)}"
    if not isinstance(data, (str, bytes)):
        return None, _stored(data)
    try:
        row = json.loads(data)
    except (ValueError, RecursionError):  # UnicodeDecodeError included (a BLOB not UTF-8)
        return None, _stored(data)
    expected = _key_form(signature)
    if expected is None and benchmark:
        return None, f"{_stored(data)}; its key is not a benchmark's"
    if expected is not None and expected[0] != kind:
        return None, f"{_stored(data)}; stored as {clipped(kind, 20, quote=True)}, its key's rows are {expected[0]!r}"
    forms = expected[1] if expected is not None else _REQUIRED.get(kind)
    if not _fits(row, forms):
        return None, _stored(data) + (f"; its key's rows hold {_fields(forms)}" if expected and forms else "")
    if isinstance(data, bytes):
        return None, _stored(data)  # JSON, but not stored as text: measured again, stored as text
    return row, ""


class CacheError(GspoError):
    """The database cannot be opened, read or written: not SQLite, corrupt, of another schema,
    locked by another process, or in a folder that cannot be written."""


def _reason(e: BaseException) -> str:
    text = first_line(e)
    if isinstance(e, sqlite3.OperationalError) and "locked" in text:
        return f"{text} (another process holds it)"
    if isinstance(e, sqlite3.DatabaseError) and not isinstance(e, sqlite3.OperationalError):
        return f"{text} (delete it to start a new one)"  # not SQLite, or corrupt
    return text


def _connect(path: Path, timeout: float) -> sqlite3.Connection:
    """A connection in WAL mode with the ``measurements`` table, checked to be gspo's."""
    if path.parent.exists() and not path.parent.is_dir():
        raise CacheError(f"{path}: its folder {path.parent} is a file")
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir():
        raise CacheError(f"{path}: is a directory, not a calibration database")
    conn = sqlite3.connect(str(path), timeout=timeout, isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(_SCHEMA)
        columns = tuple(row[1] for row in conn.execute("PRAGMA table_info(measurements)"))
        if columns != _COLUMNS:
            raise CacheError(f"{path}: not a gspo calibration database (its measurements table has the "
                             f"columns {', '.join(columns)}; delete it to start a new one)")
        conn.execute("SELECT COUNT(*) FROM measurements").fetchone()
    except BaseException:
        conn.close()
        raise
    return conn


class CalibrationDB:
    """Measurements of one device and runtime, cached in SQLite by benchmark signature.

    Several processes can write one database (WAL, immediate transactions); a signature measured
    once is never overwritten. Another process's lock is waited on for ``timeout`` seconds.

    Raises:
        CacheError: (from every method) the database cannot be used, in one line.
    """

    def __init__(self, path: str | Path, device: str, runtime: str, timeout: float = 60.0):
        self.path = Path(path)
        self.device, self.runtime = device, runtime
        self._conn = None
        self._warned: set[str] = set()
        self._conn = self._call(_connect, self.path, timeout)

    def _call(self, fn, *args):
        try:
            return fn(*args)
        except CacheError:
            raise
        except (sqlite3.Error, OSError, ValueError) as e:  # ValueError: undecodable JSON
            raise CacheError(f"{self.path}: {_reason(e)}") from None

    def _query(self, sql: str, args: tuple = ()) -> list[tuple]:
        return self._call(lambda: self._conn.execute(sql, args).fetchall())

    def _row(self, signature, kind, data, benchmark: bool = False) -> dict | None:
        """The stored row, or ``None`` (with a warning, once) when it is not a valid one: not JSON
        text, not of its kind's form, or not of the form its key's reader takes."""
        row, why = _problem(signature, kind, data, benchmark)
        if row is None and signature not in self._warned:
            self._warned.add(signature)
            log.warning("calibration database %s: the row of %s is not a valid measurement (%s); %s", self.path,
                        _stored(signature), why, "leaving it out" if benchmark else "measuring it again")
        return row

    def get(self, signature: str) -> dict | None:
        """The measurement stored under ``signature`` (``None``: not measured yet, or stored as
        something that is not a valid measurement)."""
        rows = self._query("SELECT kind, data FROM measurements WHERE device=? AND runtime=? AND signature=?",
                           (self.device, self.runtime, signature))
        return self._row(signature, rows[0][0], rows[0][1]) if rows else None

    def put(self, signature: str, kind: str, data: dict) -> None:
        """Store ``data`` under ``signature`` unless a valid measurement is stored there already
        (one that is not valid is replaced; ``data`` that is not one is not stored)."""
        row = (self.device, self.runtime, signature, kind, json.dumps(data, sort_keys=True, default=str))
        if _problem(signature, kind, row[4])[0] is None:
            log.info("calibration database %s: not storing %s (not a valid measurement)", self.path,
                     _stored(signature))
            return
        self._call(self._insert, row)

    def _insert(self, row: tuple) -> None:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            found = self._conn.execute("SELECT kind, data FROM measurements WHERE device=? AND runtime=? AND "
                                       "signature=?", row[:3]).fetchall()
            if not found:
                self._conn.execute("INSERT INTO measurements VALUES (?, ?, ?, ?, ?)", row)
            elif _problem(row[2], found[0][0], found[0][1])[0] is None:
                self._conn.execute("UPDATE measurements SET kind=?, data=? WHERE device=? AND runtime=? AND "
                                   "signature=?", (row[3], row[4], *row[:3]))
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise

    def all(self, kind: str) -> list[tuple[str, dict]]:
        """Every valid ``(signature, data)`` of ``kind``, in signature order (rows that are not
        valid measurements, and those of a benchmark's kind not under a benchmark's key, are left
        out, with a warning)."""
        rows = self._query(
            "SELECT signature, data FROM measurements WHERE device=? AND runtime=? AND kind=? ORDER BY signature",
            (self.device, self.runtime, kind))
        benchmark = kind in _BENCHMARK_KINDS
        found = [(sig, self._row(sig, kind, d, benchmark)) for sig, d in rows]
        return [(sig, d) for sig, d in found if d is not None]

    def count(self) -> int:
        """How many measurements the database holds for this device and runtime."""
        return self._query("SELECT COUNT(*) FROM measurements WHERE device=? AND runtime=?",
                           (self.device, self.runtime))[0][0]

    def close(self) -> None:
        """Close the connection."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class CalibrationCache:
    """A :class:`CalibrationDB` used only as a cache: when it cannot be opened, read or written
    (corrupt, foreign, locked for more than ``timeout`` seconds, unwritable), one warning says
    so and it is skipped from then on: ``get`` finds nothing, ``put`` keeps nothing.
    """

    def __init__(self, path: str | Path, device: str, runtime: str, timeout: float = LOCK_WAIT_S):
        self.path = Path(path)
        self._db: CalibrationDB | None = None
        try:
            self._db = CalibrationDB(path, device, runtime, timeout)
        except CacheError as e:
            self._skip(e)

    @property
    def usable(self) -> bool:
        """Whether the cache is still in use (no failure so far)."""
        return self._db is not None

    def _skip(self, e: CacheError) -> None:
        log.warning("calibration cache not used: %s; going on without it", e)
        self.close()

    def get(self, signature: str) -> dict | None:
        """The cached measurement (``None``: not cached, or the cache is skipped)."""
        try:
            return self._db.get(signature) if self._db is not None else None
        except CacheError as e:
            self._skip(e)
            return None

    def put(self, signature: str, kind: str, data: dict) -> None:
        """Cache ``data`` under ``signature`` (nothing when the cache is skipped)."""
        try:
            if self._db is not None:
                self._db.put(signature, kind, data)
        except CacheError as e:
            self._skip(e)

    def close(self) -> None:
        """Close the database, if open."""
        if self._db is not None:
            self._db.close()
            self._db = None
