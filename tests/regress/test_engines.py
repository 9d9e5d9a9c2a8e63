"""The engines: Ray and local give the same verdicts; a lost job is ERROR, never ok."""

from __future__ import annotations

import json
import os

import onnx
import pytest

from gspo.errors import GspoError
from gspo.regress import Engine, run_gate
from gspo.regress.engines import RESOURCE, _check_resource, local_engine, ray_engine
from gspo.regress.job import Result
from tests.regress.test_gate import _tamper
from tests.regress.util import NODE_S, gspo, relu_chain, run_job_timed, write_set

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'gspo[ray]'; make installs it)")


@pytest.fixture(scope="module")
def cluster():
    """A local Ray 'cluster' of this machine, once for the module, offering the timing resource once."""
    ray.init(num_cpus=2, resources={RESOURCE: 1}, include_dashboard=False, object_store_memory=80 * 2**20,
             logging_level="ERROR", log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture
def three(tmp_path):
    """A three-model set recorded; then "b" gets a much slower export and "c"'s stored result is broken."""
    ms = write_set(tmp_path, {"a": relu_chain(), "b": relu_chain(), "c": relu_chain(1)})
    assert gspo("regress", ms, "--record", tmp_path / "base").exit_code == 0
    onnx.save(relu_chain(40), tmp_path / "b.onnx")
    _tamper(tmp_path / "base", "c", relu_chain(1, shift=0.5))
    return ms, tmp_path / "base"


def test_ray_and_local_give_the_same_verdicts_on_three_models(cluster, three, tmp_path, monkeypatch):
    import functools

    from gspo.regress.engines import ENGINES

    monkeypatch.setitem(ENGINES, "ray", functools.partial(ray_engine, run=run_job_timed))  # the workers' clock too
    ms, base = three
    local = run_gate(ms, against=base)
    remote = run_gate(ms, against=base, engine=Engine("ray", "auto"))
    expected = ["ok", "REGRESSED", "NOT EQUIVALENT"]
    assert [r.verdict for r in local.results] == expected
    assert [r.verdict for r in remote.results] == expected, [r.reason for r in remote.results]
    assert remote.exit_code == local.exit_code == 1
    for run in (local, remote):  # timed on the virtual clock here and on the workers: "a" has one node
        assert set(run.results[0].samples["candidate"]) == {NODE_S}
    # through the command line, with the outputs written by the driver
    out = tmp_path / "ray.json"
    r = gspo("regress", ms, "--against", base, "--engine", "ray", "--address", "auto", "--json", out)
    assert r.exit_code == 1 and [m["verdict"] for m in json.loads(out.read_text())["models"]] == expected


def _dies(job):
    os._exit(1)  # the worker process vanishes, as on a lost node


def test_a_job_lost_on_every_try_is_error_never_ok(cluster):
    results = ray_engine([lambda: None] * 2, ["a", "b"], run=_dies)
    assert [r.verdict for r in results] == ["ERROR", "ERROR"]
    assert all(f"lost on the cluster after {2} retries" in r.reason for r in results)


def test_a_cluster_without_the_timing_resource_is_a_one_line_error():
    class NoResource:
        @staticmethod
        def cluster_resources():
            return {"CPU": 8.0}

    with pytest.raises(GspoError, match="ray start .* --resources"):
        _check_resource(NoResource)


def test_the_local_engine_runs_the_given_job_runner():
    seen = []
    results = local_engine([lambda: "job"], ["m"], run=lambda job: seen.append(job) or Result("m", "ok"))
    assert seen == ["job"] and results[0].verdict == "ok"
