"""The whole-model pool holds the joint search's own ablations (gspo/search/driver.py): the input
on one stream, the input on Nimble's streams ("streams only"), the rules-only result, the
rules-only result on Nimble's streams and the result on the streams its pieces chose, each
verified and timed against the input, and the fastest confirmed one wins (timings scripted)."""

from __future__ import annotations

import numpy as np
import pytest

import gspo
from gspo import ir
from gspo.costmodel import CostModel, load_profile
from gspo.rules import GREEDY_RULES, apply_greedily
from gspo.runtime.executor import saved_schedule
from gspo.search import optimize
from gspo.search.budget import RunLog, Timebox
from gspo.search.build_costs import streams_seconds
from gspo.search.candidate import Candidate
from gspo.search.config import OptimizeConfig
from gspo.search.driver import _final_options, resolved
from gspo.search.prepared import Prepared
from gspo.search.strategies import Strategies
from gspo.streams import assign_streams
from gspo.zoo import build
from tests.search.fakes import FakeClock, ScriptedTimings

#: The ablations every run below puts in the final pool.
ABLATIONS = ("original", "optimized", "optimized+streams", "streams only", "optimized+joint")


class StreamsCost:
    """The shipped profile's estimates, a schedule on several streams ``factor`` x its one-stream
    estimate (0.5: each piece's search keeps its rewrites on streams, so that the pieces' own
    schedule is a whole-model option; no streams option is estimated clearly slower)."""

    def __init__(self, factor: float = 0.5):
        self.real, self.factor = CostModel(load_profile("cpu", force=True)), factor

    def cost(self, graph, schedule=None):
        streams = schedule is not None and schedule.num_streams > 1
        return self.real.cost(graph, None) * (self.factor if streams else 1.0)


def _optimize(fastest: str):
    """The tiny Inception-v3 optimized with the pieces' search results (on their streams) measuring twice as
    fast as the pieces as given, and ``fastest`` twice as fast as the original in every
    whole-model timing (every other whole-model option 100x slower)."""
    timings = ScriptedTimings({"candidate0": (0.5,) * 30, "original": (1.0,) * 30, fastest: (0.5,) * 30})
    result = optimize(build("inception_v3", "tiny"), jobs=1, time_budget=None, budget=4, timing_runs=5, backends=("ort",),
                      seed=0, strategies=Strategies(cost_model=StreamsCost(), measure=timings))
    return result, timings


@pytest.mark.parametrize("fastest", ["streams only", "optimized+joint", "optimized", "optimized+streams"])
def test_the_fastest_ablation_in_the_pool_is_the_pick(fastest):
    """Every ablation is verified (none rejected) and timed in the first whole-model timing; the
    one scripted fastest is confirmed against the original alone and chosen."""
    r, timings = _optimize(fastest)
    final = {c["label"]: c for c in r.report["final_candidates"]}
    assert set(ABLATIONS) <= set(final) and all(final[x]["rejected"] is None for x in ABLATIONS)
    assert set(ABLATIONS) <= set(timings.whole[0]) and timings.whole[1] == ("original", fastest)
    assert r.report["chosen"] == fastest and r.report["verdict"] == "faster"
    assert (r.schedule is not None) == (fastest != "optimized")
    assert bool(r.report["substitutions"]) == (fastest != "streams only")


def test_the_input_on_streams_wins_as_given_with_its_schedule_saved_and_the_same_pick_again(tmp_path):
    """When the input on Nimble's streams measures fastest, the result is the input's graph
    (no rewrite) on those streams, saved in the model, equivalent; and the same input and seed
    give the same bytes again."""
    g = build("inception_v3", "tiny")
    r, _ = _optimize("streams only")
    cfg = resolved(OptimizeConfig.of(jobs=1))
    assert r.report["chosen"] == "streams only" and r.report["substitutions"] == {}
    assert r.schedule == assign_streams(g, max_streams=cfg.search.max_streams) and r.report["streams"] > 1
    stripped = r.graph.with_nodes(tuple(n.replace(stream=None) for n in r.graph.nodes))
    assert stripped.key == g.key
    assert r.report["max_rel_err"] < 1e-5 and all(d["max_rel"] < 1e-3 for d in r.report["equivalence"].values())
    out = r.save(tmp_path / "out.onnx")
    assert saved_schedule(ir.load(out)) == r.schedule
    feeds = {v.name: np.random.default_rng(0).standard_normal(v.shape).astype(np.float32) for v in g.inputs}
    want = gspo.InferenceSession(ir.save(g, tmp_path / "in.onnx")).run(None, feeds)
    got = gspo.InferenceSession(out).run(None, feeds)
    assert all(np.allclose(w, x, rtol=1e-4, atol=1e-5) for w, x in zip(want, got))
    again, _ = _optimize("streams only")
    assert ir.serialize(again.graph) == ir.serialize(r.graph) and again.schedule == r.schedule


def _pool(original, merged, timebox: Timebox, chosen=()):
    """The final options of ``merged`` against ``original`` (as given and searched), and why the
    whole model on streams was not measured."""
    prepared = Prepared(original, original, [], [])
    cfg = resolved(OptimizeConfig.of(jobs=1, max_streams=2))
    tools = Strategies(cost_model=StreamsCost())
    return _final_options(prepared, merged, list(chosen), ("R",), cfg, tools, {r.name for r in cfg.search.rules},
                          timebox)


def _merged():
    g = build("inception_v3", "tiny")
    merged, _ = apply_greedily(g, GREEDY_RULES)
    assert merged.key != g.key and len(merged.nodes) < len(g.nodes)
    return g, merged


def test_the_pool_holds_the_input_on_streams_beside_the_result_on_streams():
    g, merged = _merged()
    options, skipped = _pool(g, merged, Timebox.of(None))
    by_label = {o.label: o for o in options}
    assert list(by_label)[:4] == ["original", "optimized", "optimized+streams", "streams only"] and skipped is None
    only, both = by_label["streams only"], by_label["optimized+streams"]
    assert only.graph is g and only.schedule == assign_streams(g, max_streams=2) and only.rules == ()
    assert both.graph is merged and both.schedule == assign_streams(merged, max_streams=2) and both.rules == ("R",)
    assert (only.kind, both.kind) == ("streams", "merged")


def test_the_pieces_schedule_is_kept_once_when_nimbles_is_the_same():
    """One piece on the streams Nimble gives the whole model: its schedule is the same candidate
    as the result on Nimble's streams, kept once."""
    g, merged = _merged()
    nimble = assign_streams(merged, max_streams=2)
    options, _ = _pool(g, merged, Timebox.of(None), [Candidate(merged, nimble, label="candidate0")])
    labels = [o.label for o in options]
    assert "optimized+streams" in labels and "optimized+joint" not in labels
    assert len({o.identity for o in options}) == len(options)


def test_each_ablation_on_streams_needs_the_time_to_assign_its_streams():
    """A budget that holds assigning streams to the (smaller) merged result but not to the input:
    the input on streams is skipped, and the skipped work says so."""
    g, merged = _merged()
    log = []
    between = (streams_seconds(len(merged.nodes)) + streams_seconds(len(g.nodes))) / 2
    options, skipped = _pool(g, merged, Timebox.of(between, clock=FakeClock(), run=RunLog(log)))
    labels = [o.label for o in options]
    assert "optimized+streams" in labels and "streams only" not in labels
    assert [s.what for s in log] == ["the input on streams"] and skipped.reason == "the time budget was spent"
    log.clear()
    options, _ = _pool(g, merged, Timebox.of(streams_seconds(len(merged.nodes)) / 2, clock=FakeClock(), run=RunLog(log)))
    assert [o.label for o in options][:2] == ["original", "optimized"] and len(options) == 2
    assert [s.what for s in log] == ["the whole model on streams", "the input on streams"]
