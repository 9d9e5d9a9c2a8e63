"""Calibration-cache rows are read as their key's reader takes them (issue 51, item 7): a row of
the right kind but another key's form (``{"seconds": 1e308}`` under a placement crossing's key)
was an internal error (KeyError: 'fixed_s'), and a row stored as a BLOB one (TypeError) raised
while the warning itself was formatted. Each is now skipped with one warning and measured again."""

from __future__ import annotations

import logging
import sqlite3
from types import SimpleNamespace

import numpy as np
import pytest

from gspo.costmodel import calibrate
from gspo.costmodel.db import CalibrationCache, CalibrationDB
from gspo.costmodel.microbench import Bench
from gspo.ir.builder import GraphBuilder
from gspo.search import placement

CROSSING = f"placement-crossing:openvino:t{placement.SessionConfig().intra_op_threads}"


def _stored(path, rows, untyped: bool = False) -> None:
    """``(signature, kind, data)`` rows written behind gspo's back; ``untyped``: in a table of
    gspo's columns without their types (another tool's), where a number or NULL stays one."""
    if untyped:
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE measurements (device, runtime, signature, kind, data)")
    else:
        CalibrationDB(path, "dev", "rt").close()
        conn = sqlite3.connect(path)
    conn.executemany("INSERT INTO measurements VALUES ('dev', 'rt', ?, ?, ?)", rows)
    conn.commit()
    conn.close()


def _one_warning(caplog, *parts: str) -> str:
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "not a valid measurement" in warning and "\n" not in warning and len(warning) < 400, warning
    assert all(p in warning for p in parts), warning
    return warning


def test_the_issues_crossing_row_of_another_form_is_measured_again(tmp_path, caplog, monkeypatch):
    p = tmp_path / "c.sqlite"
    _stored(p, [(CROSSING, "placement", '{"seconds": 1e308}')])
    medians = iter([[SimpleNamespace(median=1e-4), SimpleNamespace(median=3e-4)]])
    monkeypatch.setattr(placement, "interleaved", lambda *a, **k: next(medians))  # no real timing

    class Executor:  # no session built: the crossing's model runs nowhere
        def __init__(self, *a, **k):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

    monkeypatch.setattr("gspo.runtime.CpuExecutor", Executor)
    cache = CalibrationCache(p, "dev", "rt")
    with caplog.at_level(logging.WARNING):
        fixed, bandwidth = placement.measure_crossing(["ort", "openvino"], cache)
    assert fixed == pytest.approx(2e-4) and bandwidth > 0
    _one_warning(caplog, CROSSING, '{"seconds": 1e308}', "fixed_s and bandwidth", "measuring it again")
    assert cache.get(CROSSING) == {"fixed_s": fixed, "bandwidth": bandwidth}  # the new measurement replaced it
    assert placement.measure_crossing(["ort", "openvino"], cache) == (fixed, bandwidth)  # and is read back
    cache.close()


def test_a_pieces_row_in_a_crossings_form_is_measured_again(tmp_path, caplog):
    b = GraphBuilder(seed=1)
    g = b.output(b.op("Relu", [b.input("x", (1, 16))], out="y")).build()
    signature = placement._signature(g, "ort", placement.SessionConfig().intra_op_threads)
    p = tmp_path / "c.sqlite"
    _stored(p, [(signature, "placement", '{"bandwidth": 1e9, "fixed_s": 0.0}')])  # KeyError: 'seconds' before
    cache = CalibrationCache(p, "dev", "rt")
    with caplog.at_level(logging.WARNING):
        [times] = placement.time_pieces([g], [[{"x": np.ones((1, 16), np.float32)}]], ["ort"], cache, runs=5)
    assert isinstance(times.seconds["ort"], float) and not times.cached
    _one_warning(caplog, "refused or seconds")
    cache.close()


@pytest.mark.parametrize("signature, data, needs", [
    ("fixed-costs", '{"seconds": 1e-05}', "call and sync"),  # calibrate read fixed["call"]: KeyError
    ("launch-cost", '{"block": 16}', "seconds"),
    ("layout", '{"call": 1e-05, "sync": 1e-05}', "block"),
])
def test_a_fixed_cost_row_of_another_keys_form_is_measured_again(tmp_path, caplog, signature, data, needs):
    p = tmp_path / "c.sqlite"
    _stored(p, [(signature, "fixed", data)])
    db = CalibrationDB(p, "dev", "rt")
    with caplog.at_level(logging.WARNING):
        assert db.get(signature) is None
    _one_warning(caplog, f"its key's rows hold {needs}")
    db.close()


@pytest.mark.parametrize("data, shown", [
    (b"\xff\x00abc", "a BLOB of 5 bytes"),  # TypeError while the warning was formatted
    (b'{"seconds": 0.5}', "a BLOB of 16 bytes"),  # JSON, but not text: stored again as text
])
def test_a_row_stored_as_a_blob_is_one_warning_and_replaced(tmp_path, caplog, data, shown):
    p = tmp_path / "c.sqlite"
    _stored(p, [("sig", "placement", data)])
    cache = CalibrationCache(p, "dev", "rt")
    with caplog.at_level(logging.WARNING):
        assert cache.get("sig") is None and cache.get("sig") is None  # warned once
    _one_warning(caplog, shown)
    cache.put("sig", "placement", {"seconds": 0.25})
    assert cache.get("sig") == {"seconds": 0.25} and cache.usable
    cache.close()


@pytest.mark.parametrize("data, shown", [(None, "NULL"), (5, "the number 5"), (1.5, "the number 1.5")])
def test_a_row_stored_as_null_or_a_number_is_one_warning(tmp_path, caplog, data, shown):
    p = tmp_path / "c.sqlite"
    _stored(p, [("sig", "placement", data)], untyped=True)
    cache = CalibrationCache(p, "dev", "rt")
    with caplog.at_level(logging.WARNING):
        assert cache.get("sig") is None
    _one_warning(caplog, f"({shown})")
    assert cache.usable
    cache.close()


def test_all_keeps_only_benchmark_rows_of_its_kind_under_their_keys(tmp_path, caplog):
    """calibrate parses every key ``all`` gives (its JSON spec, its pass number): a key that is
    not a benchmark's of that kind, or one stored as a BLOB, is left out with a warning."""
    op = Bench("op", {"op": "Relu", "shape": [1, 4]})
    chain = Bench("chain", {"op": "Relu", "length": 2})
    good = [(op.signature, {"seconds": 1e-5}), (calibrate._pass_signature(op.signature, 2), {"seconds": 2e-5})]
    p = tmp_path / "c.sqlite"
    _stored(p, [(sig, "op", f'{{"seconds": {d["seconds"]}}}') for sig, d in good] + [
        ("not json", "op", '{"seconds": 1}'), (chain.signature, "op", '{"seconds": 1}'),
        (op.signature + "#pass=x", "op", '{"seconds": 1}'), (b"{}", "op", '{"seconds": 1}')])
    db = CalibrationDB(p, "dev", "rt")
    with caplog.at_level(logging.WARNING):
        assert db.all("op") == sorted(good)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 4 and all("leaving it out" in w and "\n" not in w for w in warnings), warnings
    assert any("a BLOB of 2 bytes" in w for w in warnings)
    db.close()


def test_a_long_row_is_shown_cut_with_its_length(tmp_path, caplog):
    p = tmp_path / "c.sqlite"
    _stored(p, [("s" * 100_000, "placement", '{"seconds": "' + "x" * 1_000_000 + '"}')])
    with caplog.at_level(logging.WARNING):
        assert CalibrationDB(p, "dev", "rt").get("s" * 100_000) is None
    _one_warning(caplog, "(100000 characters)", "(1000015 characters)")
