"""The calibration database: measurements cached in SQLite, so calibration resumes.

Keyed by (device, runtime version, signature). WAL journal and one short transaction per
measurement: an interrupted run loses at most the measurement in flight, and two calibrations
on one database neither corrupt it nor lose measurements (``INSERT OR IGNORE`` keeps the first
of two measurements of the same signature).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

__all__ = ["CalibrationDB"]

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


class CalibrationDB:
    """Measurements of one device and runtime, cached in SQLite by benchmark signature.

    Several processes can write one database (WAL, immediate transactions); a signature measured
    once is never overwritten.
    """

    def __init__(self, path: str | Path, device: str, runtime: str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.device, self.runtime = device, runtime
        self._conn = sqlite3.connect(str(self.path), timeout=60, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA busy_timeout=60000")
        self._conn.execute(_SCHEMA)

    def get(self, signature: str) -> dict | None:
        """The measurement stored under ``signature`` (``None``: not measured yet)."""
        row = self._conn.execute(
            "SELECT data FROM measurements WHERE device=? AND runtime=? AND signature=?",
            (self.device, self.runtime, signature),
        ).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, signature: str, kind: str, data: dict) -> None:
        """Store ``data`` under ``signature`` unless something is stored there already."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            self._conn.execute(
                "INSERT OR IGNORE INTO measurements VALUES (?, ?, ?, ?, ?)",
                (self.device, self.runtime, signature, kind, json.dumps(data, sort_keys=True)),
            )
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise

    def all(self, kind: str) -> list[tuple[str, dict]]:
        """Every ``(signature, data)`` of ``kind``, in signature order."""
        rows = self._conn.execute(
            "SELECT signature, data FROM measurements WHERE device=? AND runtime=? AND kind=? ORDER BY signature",
            (self.device, self.runtime, kind),
        ).fetchall()
        return [(sig, json.loads(d)) for sig, d in rows]

    def count(self) -> int:
        """How many measurements the database holds for this device and runtime."""
        return self._conn.execute(
            "SELECT COUNT(*) FROM measurements WHERE device=? AND runtime=?", (self.device, self.runtime)
        ).fetchone()[0]

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()
