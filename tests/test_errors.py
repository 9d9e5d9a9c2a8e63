"""One-line errors: reading a JSON document the user gave."""

from __future__ import annotations

import pytest

from gspo.errors import GspoError, read_json


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
