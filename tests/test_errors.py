"""One-line errors: reading a JSON document the user gave."""

from __future__ import annotations

import pytest

from gspo.errors import GspoError, clipped, read_json


def test_read_json_reads_a_document_and_names_the_file_in_one_line_otherwise(tmp_path):
    good = tmp_path / "set.json"
    good.write_text('{"version": 1}')
    assert read_json(good, "model set") == {"version": 1}
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(GspoError, match=r"bad.json: the baseline is not valid JSON$"):
        read_json(bad, "baseline")
    with pytest.raises(GspoError, match=r"missing.json: cannot read the model set \(No such file or directory\)$"):
        read_json(tmp_path / "missing.json", "model set")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(GspoError, match="not valid JSON"):
        read_json(deep, "baseline")


def test_clipped_cuts_what_the_user_gave_to_one_short_line():
    assert clipped("Relu_1") == "Relu_1" and clipped("Relu_1", quote=True) == "'Relu_1'"
    assert clipped("a" * 10_000_000) == "a" * 80 + "... (10000000 characters)"
    assert clipped("a" * 10_000_000, 10, quote=True) == "'aaaaaaaaaa'... (10000000 characters)"
    assert clipped("a" * 80) == "a" * 80  # as long as the limit: whole
    assert clipped("x\ny\u2028z\x00") == "x\\ny\\u2028z\\x00"  # no line break reaches the line
    assert clipped(b"\xff" * 100, 8) == "b'\\xff\\x... (403 characters)"  # not text: its repr, cut
    assert "\n" not in clipped("\n" * 1000, quote=True)
