"""The calibration database: measurements cached in SQLite, so calibration resumes.

Keyed by (device, runtime version, signature). WAL journal and one short transaction per
measurement: an interrupted run loses at most the measurement in flight, and two calibrations
on one database neither corrupt it nor lose measurements (``INSERT OR IGNORE`` keeps the first
of two measurements of the same signature).

Rows are validated as rows, not only as a schema: a row that is not JSON, not an object, or
whose fields have the wrong types or values (``{"seconds": "abc"}``, ``{}``, ``[1, 2]``, a
negative or non-finite time) is treated as missing, with a warning, and the next measurement of
its signature replaces it (:func:`valid_row`).

Where the database is only a cache (optimize's placement timings, in the user's cache folder),
:class:`CalibrationCache` wraps it: a database that is corrupt, of another schema, locked by
another process for more than :data:`LOCK_WAIT_S`, or that cannot be written is a one-line
warning, and the work goes on without it.
"""

from __future__ import annotations

import json
import logging
import math
import sqlite3
from pathlib import Path

from gspo.errors import GspoError

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
    if not isinstance(row, dict) or not all(isinstance(k, str) for k in row):
        return False
    if not all(check(row[k]) for k, check in _OPTIONAL.items() if k in row):
        return False
    forms = _REQUIRED.get(kind)
    return forms is None or any(all(k in row and check(row[k]) for k, check in form.items()) for form in forms)


def _shown(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


class CacheError(GspoError):
    """The database cannot be opened, read or written: not SQLite, corrupt, of another schema,
    locked by another process, or in a folder that cannot be written."""


def _reason(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
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

    def _row(self, signature: str, kind: str, text: str) -> dict | None:
        """The stored row, or ``None`` (with a warning, once) when it is not a valid one."""
        try:
            row = json.loads(text)
        except (ValueError, RecursionError):
            row = None
        if valid_row(kind, row):
            return row
        if signature not in self._warned:
            self._warned.add(signature)
            log.warning("calibration database %s: the row of %s is not a valid measurement (%s); measuring it again",
                        self.path, _shown(signature), _shown(" ".join(text.split())))
        return None

    def get(self, signature: str) -> dict | None:
        """The measurement stored under ``signature`` (``None``: not measured yet, or stored as
        something that is not a valid measurement)."""
        rows = self._query("SELECT kind, data FROM measurements WHERE device=? AND runtime=? AND signature=?",
                           (self.device, self.runtime, signature))
        return self._row(signature, rows[0][0], rows[0][1]) if rows else None

    def put(self, signature: str, kind: str, data: dict) -> None:
        """Store ``data`` under ``signature`` unless a valid measurement is stored there already
        (one that is not valid is replaced; ``data`` that is not one is not stored)."""
        if not valid_row(kind, data):
            log.info("calibration database %s: not storing %s (not a valid measurement)", self.path, _shown(signature))
            return
        self._call(self._insert, (self.device, self.runtime, signature, kind, json.dumps(data, sort_keys=True)))

    def _insert(self, row: tuple) -> None:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            found = self._conn.execute("SELECT kind, data FROM measurements WHERE device=? AND runtime=? AND "
                                       "signature=?", row[:3]).fetchall()
            if not found:
                self._conn.execute("INSERT INTO measurements VALUES (?, ?, ?, ?, ?)", row)
            elif not self._parses(found[0][0], found[0][1]):
                self._conn.execute("UPDATE measurements SET kind=?, data=? WHERE device=? AND runtime=? AND "
                                   "signature=?", (row[3], row[4], *row[:3]))
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise

    @staticmethod
    def _parses(kind: str, text: str) -> bool:
        try:
            return valid_row(kind, json.loads(text))
        except (ValueError, RecursionError):
            return False

    def all(self, kind: str) -> list[tuple[str, dict]]:
        """Every valid ``(signature, data)`` of ``kind``, in signature order (rows that are not
        valid measurements are left out, with a warning)."""
        rows = self._query(
            "SELECT signature, data FROM measurements WHERE device=? AND runtime=? AND kind=? ORDER BY signature",
            (self.device, self.runtime, kind))
        found = [(sig, self._row(sig, kind, d)) for sig, d in rows]
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
