"""Model sets are checked in full before any work, with one line naming the problem."""

from __future__ import annotations

import json
import os

import pytest

from gspo.errors import GspoError
from gspo.regress import load_modelset
from tests.helpers import one_line_error
from tests.regress.util import gspo


def write(tmp_path, models=None, **top):
    data = {"version": 1, "models": models or [{"name": "rnn", "zoo": "nasrnn"}], **top}
    p = tmp_path / "set.json"
    p.write_text(json.dumps(data))
    return p


def test_jobs_beyond_the_cores_are_capped_with_a_note(tmp_path):
    cores = os.cpu_count() or 1
    mset = load_modelset(write(tmp_path, options={"jobs": cores + 10}))
    assert mset.models[0].options["jobs"] == cores
    assert any("capped" in n for n in mset.notes)


@pytest.mark.parametrize("options, says", [
    ({"jobs": "4"}, "jobs must be an integer"),
    ({"budget": -1}, "budget must be an integer in [0, inf]"),
    ({"use_streams": 1}, "use_streams must be true or false"),
    ({"time_budget": 0}, "time_budget must be a number > 0"),
    ({"alpha": float("nan")}, "alpha must be a finite number"),
    ({"select": "fastest"}, "select must be one of"),
    ({"budgte": 4}, "unknown key(s) budgte"),
])
def test_option_types_and_unknown_keys_are_named(tmp_path, options, says):
    with pytest.raises(GspoError) as e:
        load_modelset(write(tmp_path, options=options))
    assert says in str(e.value)


def test_input_shapes_as_a_list_is_a_one_line_error(tmp_path):
    p = write(tmp_path, models=[{"name": "m", "path": "m.onnx", "input_shapes": [1, 3, 224, 224]}])
    error = one_line_error(gspo("regress", p, "--estimate"))
    assert "input_shapes must be an object of input name -> [dims]" in error


def test_a_models_own_settings_are_checked_and_win(tmp_path):
    p = write(tmp_path, gate={"threshold": 0.1}, models=[
        {"name": "a", "zoo": "nasrnn", "gate": {"threshold": 0.2, "rounds": 10}, "options": {"budget": 2}},
        {"name": "b", "zoo": "bert"}])
    a, b = load_modelset(p, threshold=0.07).models
    assert (a.threshold, a.rounds, a.options["budget"]) == (0.2, 10, 2)
    assert b.threshold == 0.07
    with pytest.raises(GspoError, match="threshold must be a number > 0"):
        load_modelset(write(tmp_path, models=[{"name": "a", "zoo": "nasrnn", "gate": {"threshold": -1}}]))
    with pytest.raises(GspoError, match="unknown key"):
        load_modelset(write(tmp_path, models=[{"name": "a", "zoo": "nasrnn", "treshold": 1}]))


def test_names_must_be_folder_names_and_unique(tmp_path):
    with pytest.raises(GspoError, match="artifact folder"):
        load_modelset(write(tmp_path, models=[{"name": "../x", "zoo": "nasrnn"}]))
    with pytest.raises(GspoError, match="appears twice"):
        load_modelset(write(tmp_path, models=[{"name": "x", "zoo": "nasrnn"}, {"name": "x", "zoo": "bert"}]))
