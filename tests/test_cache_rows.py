"""Calibration-cache rows are validated as rows (issue 42, case 12): a row of the right schema
but the wrong types (``{"seconds": "abc"}``, ``{}``, ``[1, 2]``, not JSON) is treated as
missing, with a warning, and measured again; it was an internal error."""

from __future__ import annotations

import logging
import sqlite3

import numpy as np
import pytest

from gspo.costmodel.db import CalibrationCache, CalibrationDB, valid_row
from gspo.costmodel.microbench import Bench

BAD = ['{"seconds": "abc"}', "{}", "[1, 2]", '"text"', "null", "not json", '{"seconds": NaN}',
       '{"seconds": -1.0}', '{"seconds": true}', '{"refused": 3}', '{"fixed_s": 1e-5}']


def _stored(path, signature, kind, data: str) -> None:
    """A row written behind gspo's back (another version, a hand edit, a bad disk)."""
    CalibrationDB(path, "dev", "rt").close()
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO measurements VALUES (?, ?, ?, ?, ?)", ("dev", "rt", signature, kind, data))
    conn.commit()
    conn.close()


@pytest.mark.parametrize("data", BAD)
def test_a_bad_row_is_missing_with_a_warning_and_measured_again(tmp_path, caplog, data):
    p = tmp_path / "c.sqlite"
    _stored(p, "sig", "placement", data)
    cache = CalibrationCache(p, "dev", "rt")
    with caplog.at_level(logging.WARNING):
        assert cache.get("sig") is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "not a valid measurement" in warnings[0] and "measuring it again" in warnings[0]
    assert "\n" not in warnings[0] and cache.usable  # the cache itself is still used
    cache.put("sig", "placement", {"seconds": 0.25})  # the new measurement replaces the bad row
    assert cache.get("sig") == {"seconds": 0.25}
    cache.close()


def test_good_rows_of_every_kind_pass():
    for kind, row in [("placement", {"seconds": 1e-4}), ("placement", {"refused": "OpenVINO cannot compile it"}),
                      ("placement", {"fixed_s": 0.0, "bandwidth": 1e9}), ("fixed", {"call": 1e-5, "sync": 2e-5}),
                      ("fixed", {"seconds": 5e-5}), ("fixed", {"block": 16}), ("op", {"seconds": 1e-5, "reference": 3e-4}),
                      ("branches", {"seconds": 1e-4, "one_session": 2e-4, "segments_in_order": 3e-4, "streams": 2}),
                      ("piece", {"seconds": 1e-4, "streams": 1, "passes": 3})]:
        assert valid_row(kind, row), (kind, row)
    assert not valid_row("op", {"seconds": 1e-5, "reference": "x"})
    assert not valid_row("branches", {"seconds": 1e-4, "streams": 1.5})


def test_a_good_row_is_never_overwritten(tmp_path):
    db = CalibrationDB(tmp_path / "c.sqlite", "dev", "rt")
    db.put("sig", "op", {"seconds": 1.0})
    db.put("sig", "op", {"seconds": 2.0})
    assert db.get("sig") == {"seconds": 1.0}
    db.close()


def test_all_leaves_bad_rows_out(tmp_path, caplog):
    p = tmp_path / "c.sqlite"
    a, b = Bench("op", {"op": "Relu", "n": 1}).signature, Bench("op", {"op": "Relu", "n": 2}).signature
    _stored(p, a, "op", '{"seconds": "abc"}')
    db = CalibrationDB(p, "dev", "rt")
    db.put(b, "op", {"seconds": 1e-5})
    with caplog.at_level(logging.WARNING):
        assert db.all("op") == [(b, {"seconds": 1e-5})]
    assert any("not a valid measurement" in r.getMessage() for r in caplog.records)
    db.close()


def test_optimize_measures_a_piece_again_when_its_cached_row_is_bad(tmp_path, monkeypatch):
    """The issue's case, through the placement's cache: a row ``{"seconds": "abc"}`` was an
    internal error in optimize."""
    from gspo.ir.builder import GraphBuilder
    from gspo.search import placement

    b = GraphBuilder(seed=1)
    y = b.op("Relu", [b.input("x", (1, 16))], out="y")
    g = b.output(y).build()
    feeds = [[{"x": np.ones((1, 16), np.float32)}]]
    p = tmp_path / "c.sqlite"
    cache = CalibrationCache(p, "dev", "rt")
    placement.time_pieces([g], feeds, ["ort"], cache, runs=5)  # measured and cached
    signature = placement._signature(g, "ort", placement.SessionConfig().intra_op_threads)
    conn = sqlite3.connect(p)
    conn.execute("UPDATE measurements SET data=? WHERE signature=?", ('{"seconds": "abc"}', signature))
    conn.commit()
    conn.close()
    [times] = placement.time_pieces([g], feeds, ["ort"], cache, runs=5)
    assert isinstance(times.seconds["ort"], float) and not times.cached
    cache.close()
