"""optimize's settings in one shape: the flat names (keyword options, the report's ``config``
keys) come from the records' own fields, and each value is read once, where it enters."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from gspo.errors import GspoError
from gspo.search.options import (
    MaxError,
    OptimizeConfig,
    PrecisionOptions,
    SearchOptions,
    Setting,
    TimingOptions,
    settings,
)
from tests.search.test_config_bounds import REPORT_KEYS


@dataclass(frozen=True)
class _Wider(SearchOptions):
    """The search with two settings more: one named by its field, one by its keyword and shown
    after another setting."""

    beam: int = 4
    width: int = field(default=2, metadata={"keyword": "beam_width", "after": "margin"})


@dataclass(frozen=True)
class _Config(OptimizeConfig):
    search: _Wider = field(default_factory=_Wider)


def test_a_new_field_is_a_keyword_option_and_a_report_key_without_a_table_edit():
    cfg = _Config.of(beam=8, beam_width=3, budget=5)
    assert (cfg.search.beam, cfg.search.width, cfg.search.max_expansions) == (8, 3, 5)
    shown = list(cfg.to_json())
    assert shown == REPORT_KEYS[:13] + ["beam"] + REPORT_KEYS[13:22] + ["beam_width"] + REPORT_KEYS[22:]
    assert cfg.to_json()["beam"] == 8 and cfg.options()["beam_width"] == 3
    assert _Config.from_json(cfg.to_json()) == cfg
    assert "beam" not in OptimizeConfig().to_json()  # the records' fields, not a shared table


def test_the_flat_names_are_the_fields_or_their_keywords_and_the_tolerance_its_terms():
    by_name = {s.name: s for s in settings()}
    assert by_name["budget"] == Setting("budget", "search", "max_expansions")
    assert by_name["rtol"] == Setting("rtol", "verify", "tolerance", "rtol")
    assert (by_name["timing_runs"].concern, by_name["verify_runs"].concern) == ("timing", "verify")
    assert not by_name["rules"].shown and "rules" in OptimizeConfig().options()
    assert "step" not in by_name  # a field of the tolerance, not a setting
    assert list(OptimizeConfig().to_json()) == REPORT_KEYS


def test_an_after_that_names_no_setting_is_refused():
    @dataclass(frozen=True)
    class Lost(TimingOptions):
        late: int = field(default=0, metadata={"after": "no_such_setting"})

    @dataclass(frozen=True)
    class Config(OptimizeConfig):
        timing: Lost = field(default_factory=Lost)

    with pytest.raises(TypeError, match="the options late come after no setting"):
        settings(Config)


def test_each_value_is_read_once_as_it_enters():
    cfg = OptimizeConfig.of(precision="bf16, INT8", max_error="nmse=1e-3", backends=["ort"])
    assert cfg.precision.precisions == ("bf16", "int8") and cfg.device.backends == ("ort",)
    assert cfg.precision.max_error == MaxError.parse("nmse=1e-3")
    assert str(cfg.precision.max_error.budget) == "nmse=0.001"  # the precision block's canonical form
    assert cfg.to_json()["max_error"] == "nmse=1e-3"  # the config block: as given
    parsed = cfg.precision.max_error
    assert cfg.replace(seed=3).precision.max_error is parsed  # carried, never parsed again
    assert OptimizeConfig.of(max_error=parsed).precision.max_error is parsed
    with pytest.raises(GspoError, match="--max-error: unknown metric 'nmsq'"):
        OptimizeConfig.of(max_error="nmsq=1")


def test_a_max_error_that_is_not_a_budget_is_one_line():
    from gspo.search.config import validate

    cfg = OptimizeConfig(precision=PrecisionOptions(precisions=("int8",), max_error=0.001))
    with pytest.raises(GspoError, match=r"--max-error must be an accuracy budget such as 'nmse=1e-3' or None "
                                        r"\(got 0.001\)"):
        validate(cfg)


def test_the_search_reads_the_search_options_themselves():
    """No copy with defaults of its own (it capped streams at 2 where the options said the device's)."""
    from types import SimpleNamespace

    from gspo.search.driver import resolved
    from gspo.search.pool import search_pieces
    from tests.helpers import branchy

    class Stop(Exception):
        pass

    seen = []

    def searched(graph, cost_fn, config, deadline):
        seen.append(config)
        raise Stop

    cfg = resolved(OptimizeConfig.of(jobs=1, budget=7), cores=4)
    with pytest.raises(Stop):
        search_pieces([SimpleNamespace(graph=branchy())], None, cfg, None, None, search_fn=searched)
    assert seen[0] is cfg.search and seen[0].max_streams == 4


def test_max_error_is_parsed_once_through_optimize(monkeypatch):
    """Once as the keyword enters; neither the checks nor the precision stage parse it again."""
    from gspo.precision.accuracy import ErrorBudget
    from gspo.search import optimize
    from gspo.search.strategies import Strategies
    from tests.helpers import branchy
    from tests.search.fakes import ScriptedTimings

    parse = ErrorBudget.parse.__func__
    specs = []

    def counted(cls, spec):
        specs.append(spec)
        return parse(cls, spec)

    monkeypatch.setattr(ErrorBudget, "parse", classmethod(counted))
    result = optimize(branchy(channels=8, size=8), precision="int8", max_error="nmse=1e-14", time_budget=None,
                      backends=("ort",), jobs=1, strategies=Strategies(measure=ScriptedTimings()))
    assert specs == ["nmse=1e-14"]
    assert result.report["precision"]["max_error"] == "nmse=1e-14"
    assert result.report["config"]["max_error"] == "nmse=1e-14"
