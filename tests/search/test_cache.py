"""optimize with a calibration cache it cannot use (corrupt, locked): one warning, and the
optimization goes on without the cache (it failed with an internal error, or stalled a minute)."""

from __future__ import annotations

import logging
import sqlite3

import pytest

from gspo.costmodel.db import CalibrationDB
from gspo.runtime.backends import backend_status
from gspo.search import optimize
from tests.helpers import branchy

#: Every backend installed here: the placement cache is used only when there is one besides ort.
BACKENDS = ("ort", "openvino") if backend_status("openvino")[0] else ("ort",)
needs_openvino = pytest.mark.skipif(len(BACKENDS) < 2, reason="OpenVINO is not installed")
FAST = dict(budget=2, timing_runs=5, jobs=1, backends=BACKENDS)


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "cache" in r.getMessage()]


@needs_openvino
def test_optimize_goes_on_without_a_corrupt_cache(tmp_path, caplog):
    db = tmp_path / "calibration.sqlite"
    db.write_bytes(b"\x00corrupt" * 512)
    r = optimize(branchy(), db_path=str(db), **FAST)
    assert r.report["placement"]["backends"] == list(BACKENDS)
    assert r.report["placement"]["pieces_cached"] == 0
    assert len(_warnings(caplog)) == 1 and "file is not a database" in _warnings(caplog)[0]
    assert db.read_bytes() == b"\x00corrupt" * 512


@needs_openvino
def test_optimize_waits_on_a_locked_cache_only_briefly(tmp_path, caplog, monkeypatch):
    """Another process writing the cache: optimize waits on it once (sqlite's own wait, LOCK_WAIT_S:
    tests/costmodel/test_db.py checks the timeout it is given), then skips the cache: it waited
    60 s, then failed with an internal error."""
    from gspo.costmodel.db import CalibrationCache

    reached, asked = [], []
    for name in ("get", "put"):
        def inner(self, *args, _real=getattr(CalibrationDB, name), _name=name):
            reached.append(f"{_name} failed")  # until it returns
            out = _real(self, *args)
            reached[-1] = _name
            return out

        def outer(self, *args, _real=getattr(CalibrationCache, name), _name=name):
            asked.append(_name)
            return _real(self, *args)
        monkeypatch.setattr(CalibrationDB, name, inner)
        monkeypatch.setattr(CalibrationCache, name, outer)
    db = tmp_path / "calibration.sqlite"
    CalibrationDB(db, "dev", "rt").close()
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        r = optimize(branchy(), db_path=str(db), time_budget=None, **FAST)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert r.report["placement"]["backends"] == list(BACKENDS)
    assert len(_warnings(caplog)) == 1 and "database is locked" in _warnings(caplog)[0]
    # the database was reached until one call waited on the lock and failed (a write: reads go on
    # beside the other process' lock); every later lookup or store was answered without it
    failed = [i for i, call in enumerate(reached) if call.endswith("failed")]
    assert failed == [len(reached) - 1] and len(asked) > len(reached), (reached, asked)
