"""Every value reaching optimize's API is checked as the command line checks it (issue 42, case
12): one line (GspoError) naming the option, never a raw ValueError, TypeError or OverflowError
from deep inside, and never an accepted value the command line refuses."""

from __future__ import annotations

import pytest

from gspo.errors import GspoError
from gspo.search.config import MAX_SECONDS, MAX_SEED, OptimizeConfig, check_options, validate


def test_the_bounds_are_the_command_lines():
    from gspo.cli.common import MAX_SECONDS as CLI_MAX_SECONDS
    from gspo.cli.common import SEED

    assert MAX_SECONDS == CLI_MAX_SECONDS
    assert (0, MAX_SEED) == (SEED.min, SEED.max)


@pytest.mark.parametrize("options, says", [
    (dict(seed=-1), "the seed must be a non-negative integer (got -1)"),
    (dict(seed=2**32), "the seed must be an integer in [0, 4294967295] (got 4294967296)"),
    (dict(seed=1.5), "the seed must be a non-negative integer (got 1.5)"),
    (dict(seed="3"), "the seed must be a non-negative integer (got '3')"),
    (dict(seed=True), "the seed must be a non-negative integer (got True)"),
    (dict(time_budget=1e308), "--time-budget must be positive and at most 604800 s"),
    (dict(time_budget=float("inf")), "--time-budget must be a finite number"),
    (dict(time_budget="10"), "--time-budget must be a finite number or None (got '10')"),
    (dict(budget=1.5), "--budget must be an integer (got 1.5)"),
    (dict(threshold=1), "--threshold must be an integer in [2, inf]"),
    (dict(keep=0), "keep must be an integer in [1, inf]"),
    (dict(timing_runs=0), "timing_runs must be an integer in [5, inf]"),
    (dict(verify_runs=0), "verify_runs must be an integer in [1, inf]"),
    (dict(piece_timing_budget=1e308), "piece_timing_budget must be in (0, 604800]"),
    (dict(final_timing_budget=0), "final_timing_budget must be in (0, 604800]"),
    (dict(margin=-0.1), "margin: margins must be in [0, 1)"),
    (dict(backends="ort"), "--backends must be a list of backend names or None (got 'ort')"),
    (dict(use_streams="no"), "use_streams must be True or False"),
    (dict(profile=5), "--profile must be a name, a path or None"),
    (dict(rules=("SplitConv",)), "rules must be a list of gspo rules"),
    (dict(jobs=-1), "--jobs must be an integer in [0, inf]"),
    (dict(bogus=1), "unknown option(s) bogus (known: alpha,"),
])
def test_a_bad_value_is_one_line_naming_the_option(options, says):
    with pytest.raises(GspoError) as e:
        check_options(options)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_good_values_pass_and_lists_become_tuples():
    cfg = check_options(dict(seed=MAX_SEED, time_budget=MAX_SECONDS, backends=["ort"], budget=2**70, jobs=2**70))
    assert cfg.device.backends == ("ort",) and cfg.verify.seed == MAX_SEED
    validate(OptimizeConfig())


def test_jobs_beyond_the_cores_are_capped_not_refused():
    from gspo.search.driver import resolved

    assert resolved(check_options(dict(jobs=64)), cores=2).search.jobs == 2


def test_the_settings_are_grouped_by_concern_and_named_flat_as_the_report_shows_them():
    """The keyword options and the report's ``config`` keys are the flat names, in the order the
    report has always had; each lands in its concern (the tolerance one record), and a config
    passed whole takes keyword options over it."""
    from gspo.runtime.verify import Tolerance

    cfg = check_options(dict(rtol=0.5, budget=7, select="estimated"), OptimizeConfig.of(seed=9))
    assert cfg.verify.tolerance == Tolerance(rtol=0.5) and cfg.verify.seed == 9
    assert cfg.search.max_expansions == 7 and cfg.timing.select == "estimated"
    assert list(cfg.to_json()) == REPORT_KEYS
    assert list(cfg.options()) == REPORT_KEYS[:27] + ["rules"] + REPORT_KEYS[27:]
    assert OptimizeConfig.from_json(cfg.to_json()) == cfg
    with pytest.raises(GspoError, match="unknown option"):
        check_options(dict(max_expansions=3))


#: The report's ``config`` keys, in its order (what users and stored reports read).
REPORT_KEYS = [
    "device", "cuda_runtime", "profile", "force_profile", "alpha", "budget", "time_budget", "threshold",
    "max_streams", "jobs", "use_rules", "use_streams", "keep", "seed", "rtol", "atol", "ntol", "verify_runs",
    "timing_runs", "piece_timing_budget", "final_timing_budget", "margin", "final_margin", "select", "frontend",
    "backends", "db_path", "precision", "max_error", "calibration", "validation"]


def test_every_flat_option_has_its_check():
    from gspo.search.config import CHECKS
    from gspo.search.options import settings

    assert set(CHECKS) == {s.name for s in settings()}
