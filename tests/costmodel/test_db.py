"""The calibration database, and the cache made of it: what cannot be used (corrupt, truncated,
foreign, a directory, unwritable, locked) is one warning and skipped, never an error or a
minute's wait; as a calibration's own database it is one line (CacheError)."""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile

import pytest

from gspo.costmodel.db import LOCK_WAIT_S, CacheError, CalibrationCache, CalibrationDB
from gspo.errors import GspoError


def _filled(path, rows=300) -> None:
    db = CalibrationDB(path, "dev", "rt")
    for i in range(rows):
        db.put(f"sig{i}", "op", {"seconds": i, "pad": "x" * 100})
    db.close()


def _skipped(cache: CalibrationCache, caplog, match: str) -> None:
    """The cache is skipped: one warning matching ``match``; it finds and keeps nothing."""
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and match in warnings[0] and "going on without it" in warnings[0], warnings
    assert "\n" not in warnings[0]
    assert not cache.usable and cache.get("sig1") is None
    cache.put("new", "op", {"seconds": 1})
    cache.close()
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


def test_a_cache_that_is_not_sqlite_is_skipped_and_left_as_it_was(tmp_path, caplog):
    p = tmp_path / "calibration.sqlite"
    p.write_bytes(b"not a database at all" * 100)
    _skipped(CalibrationCache(p, "dev", "rt"), caplog, "file is not a database (delete it to start a new one)")
    assert p.read_bytes() == b"not a database at all" * 100


def test_a_truncated_cache_is_skipped(tmp_path, caplog):
    p = tmp_path / "calibration.sqlite"
    _filled(p)
    os.truncate(p, 3 * 4096)
    _skipped(CalibrationCache(p, "dev", "rt"), caplog, "database disk image is malformed")


def test_a_cache_of_another_schema_is_skipped(tmp_path, caplog):
    p = tmp_path / "calibration.sqlite"
    conn = sqlite3.connect(p)
    conn.execute("CREATE TABLE measurements (a, b)")
    conn.commit()
    conn.close()
    _skipped(CalibrationCache(p, "dev", "rt"), caplog, "not a gspo calibration database (its measurements "
                                                      "table has the columns a, b;")


def test_a_cache_path_that_is_a_directory_or_under_a_file_is_skipped(tmp_path, caplog):
    p = tmp_path / "calibration.sqlite"
    p.mkdir()
    _skipped(CalibrationCache(p, "dev", "rt"), caplog, "is a directory, not a calibration database")
    caplog.clear()
    blocker = tmp_path / "gspo"
    blocker.write_text("a file where the cache folder should be")
    _skipped(CalibrationCache(blocker / "calibration.sqlite", "dev", "rt"), caplog, f"its folder {blocker} is a file")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes read-only folders")
def test_a_cache_in_a_read_only_folder_is_skipped(tmp_path, caplog):
    folder = tmp_path / "gspo"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        _skipped(CalibrationCache(folder / "calibration.sqlite", "dev", "rt"), caplog, "unable to open database")
    finally:
        folder.chmod(0o755)


def _as_nobody(code: str) -> subprocess.CompletedProcess | None:
    """``code`` run by Python as the user nobody (``None`` when that cannot be done here)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("setpriv"):
        return None
    cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c"]
    if subprocess.run(cmd + ["import gspo.costmodel.db"], capture_output=True, timeout=60).returncode != 0:
        return None  # this Python or gspo is not readable by nobody
    return subprocess.run(cmd + [code], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("existing", [False, True])
def test_a_cache_in_a_read_only_folder_is_skipped_as_a_plain_user(existing):
    """As root the folder's mode is ignored: the check runs as the user nobody."""
    top = tempfile.mkdtemp(prefix="gspo-ro-")
    try:
        os.chmod(top, 0o755)
        folder = os.path.join(top, "gspo")
        os.mkdir(folder)
        if existing:
            _filled(os.path.join(folder, "calibration.sqlite"), 3)
        os.chmod(folder, 0o555)
        proc = _as_nobody(
            "import logging; logging.basicConfig(format='%(message)s')\n"
            "from gspo.costmodel.db import CalibrationCache\n"
            f"c = CalibrationCache({os.path.join(folder, 'calibration.sqlite')!r}, 'dev', 'rt')\n"
            "c.put('x', 'op', {}); print(c.usable, c.get('sig1'))")
        if proc is None:
            pytest.skip("cannot run as another user here")
        assert proc.returncode == 0 and proc.stdout.strip() == "False None", proc.stderr
        reason = "attempt to write a readonly database" if existing else "unable to open database file"
        assert proc.stderr.strip().endswith(f"calibration.sqlite: {reason}; going on without it")
    finally:
        os.chmod(os.path.join(top, "gspo"), 0o755)
        shutil.rmtree(top)


def test_a_cache_that_fails_while_used_is_skipped_from_then_on(tmp_path, caplog, monkeypatch):
    """A write refused mid-run (a read-only database, as the folder turning read-only gives)."""
    p = tmp_path / "calibration.sqlite"
    _filled(p, 3)
    cache = CalibrationCache(p, "dev", "rt")
    assert cache.get("sig1") == {"seconds": 1, "pad": "x" * 100}

    def readonly(self, row):
        raise sqlite3.OperationalError("attempt to write a readonly database")

    monkeypatch.setattr(CalibrationDB, "_insert", readonly)
    cache.put("new", "op", {"seconds": 1})
    _skipped(cache, caplog, "attempt to write a readonly database")


def _connections(monkeypatch) -> list:
    """Records every SQLite connection opened from now on, with the timeout it was given."""
    opened, connect = [], sqlite3.connect

    def recorded(*args, **kwargs):
        conn = connect(*args, **kwargs)
        opened.append((kwargs.get("timeout"), conn))
        return conn

    monkeypatch.setattr(sqlite3, "connect", recorded)
    return opened


def test_a_locked_cache_is_waited_on_briefly_then_skipped(tmp_path, caplog, monkeypatch):
    p = tmp_path / "calibration.sqlite"
    _filled(p, 3)
    other = sqlite3.connect(p, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # another process writing
    try:
        opened = _connections(monkeypatch)
        cache = CalibrationCache(p, "dev", "rt")
        assert cache.get("sig1") is not None  # WAL: reading goes on beside a writer
        [(timeout, conn)] = opened  # waits LOCK_WAIT_S for the lock (SQLite's busy timeout), not a minute
        assert timeout == LOCK_WAIT_S and conn.execute("PRAGMA busy_timeout").fetchone()[0] == LOCK_WAIT_S * 1000
        cache.put("new", "op", {"seconds": 1})
        monkeypatch.setattr(CalibrationDB, "_call", lambda *a: pytest.fail("the skipped database was used again"))
        _skipped(cache, caplog, "database is locked (another process holds it)")  # no second wait: not used
        assert len(opened) == 1
    finally:
        other.execute("ROLLBACK")
        other.close()


def test_a_cache_locked_before_it_was_ever_opened_is_skipped_at_once(tmp_path, caplog, monkeypatch):
    """A rollback-journal database another process holds exclusively cannot even be opened."""
    p = tmp_path / "calibration.sqlite"
    other = sqlite3.connect(p, isolation_level=None)
    other.execute("CREATE TABLE t (x)")
    other.execute("BEGIN EXCLUSIVE")
    other.execute("INSERT INTO t VALUES (1)")
    try:
        opened = _connections(monkeypatch)
        cache = CalibrationCache(p, "dev", "rt", timeout=0.2)
        assert [timeout for timeout, _ in opened] == [0.2]  # one try, waiting only the timeout given
        _skipped(cache, caplog, "database is locked")
    finally:
        other.execute("ROLLBACK")
        other.close()


def test_a_calibration_database_that_cannot_be_used_is_one_line(tmp_path):
    p = tmp_path / "calibration.sqlite"
    p.write_bytes(b"garbage" * 1000)
    with pytest.raises(CacheError, match=r"calibration.sqlite: file is not a database") as e:
        CalibrationDB(p, "dev", "rt")
    assert isinstance(e.value, GspoError) and "\n" not in str(e.value)


def test_a_good_cache_keeps_and_finds_measurements(tmp_path, caplog):
    p = tmp_path / "sub" / "calibration.sqlite"
    cache = CalibrationCache(p, "dev", "rt")
    cache.put("a", "op", {"seconds": 2})
    cache.put("a", "op", {"seconds": 3})  # the first measurement is kept
    assert cache.usable and cache.get("a") == {"seconds": 2} and cache.get("b") is None
    cache.close()
    assert CalibrationDB(p, "dev", "rt").count() == 1
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]
