"""The joint search and gspo optimize: equivalent, deterministic, never slower, never wrong."""

from __future__ import annotations

import numpy as np
import pytest

from gspo import ir
from gspo.errors import GspoError
from gspo.ir import Literal
from gspo.rules import DEFAULT_RULES, Rule
from gspo.rules.edit import Edit
from gspo.runtime import verify
from gspo.runtime.verify import Tolerance
from gspo.search import OptimizeError, SearchOptions, optimize, search
from gspo.search.backtrack import COST_ERROR
from gspo.search.strategies import Strategies
from gspo.timing import Deadline
from gspo.zoo import build
from tests.search.fakes import FakeClock

FAST = dict(budget=6, timing_runs=5, jobs=1, backends=("ort",))


def test_search_finds_the_nasrnn_gate_merges():
    from gspo.costmodel import CostModel, load_profile

    model = CostModel(load_profile("cpu", force=True))
    g = build("nasrnn", "tiny")
    result = search(g, model.cost, SearchOptions(max_expansions=30, use_streams=False))
    assert result.best.estimate < result.start.estimate
    assert {"MergeMatMulsIntoAdd", "MergeParallelMatMuls"} & set(result.best.rules)
    improving = [c for c in result.candidates if c.kind != "near"]
    assert improving and all(c.estimate < result.start.estimate for c in improving)
    assert [c.estimate for c in improving] == sorted(c.estimate for c in improving)  # no streams: one list
    near = result.candidates[len(improving):]  # within the cost model's error of the start, after them
    assert all(c.kind == "near" and c.estimate <= (1 + COST_ERROR) * result.start.estimate for c in near)
    assert len(near) <= SearchOptions().keep
    again = search(g, model.cost, SearchOptions(max_expansions=30, use_streams=False))
    assert again.best.graph.key == result.best.graph.key  # deterministic


def test_the_time_budget_stops_the_search_inside_an_expansion():
    """Each estimate takes 0.05 s on the search's clock: a deadline 0.12 s away ends the first
    expansion after its third estimate."""
    from gspo.costmodel import CostModel, load_profile

    model = CostModel(load_profile("cpu", force=True))
    g = build("nasrnn", "tiny")
    clock = FakeClock()

    def slow_cost(graph, schedule):
        clock.advance(0.05)
        return model.cost(graph, schedule)

    full = search(g, model.cost, SearchOptions(max_expansions=1, use_streams=False))
    assert full.generated > 4  # one expansion of this graph has many matches
    result = search(g, slow_cost, SearchOptions(max_expansions=1, use_streams=False), deadline=Deadline.after(0.12, clock))
    assert result.expanded == 1 and result.generated < full.generated and result.out_of_time
    assert result.seconds <= 0.12 + 0.05 + 1e-9  # at most one cost evaluation past the deadline


@pytest.mark.parametrize("name", ["nasrnn", "inception_v3", "bert"])
def test_optimize_output_is_equivalent(name, tmp_path):
    g = build(name, "tiny")
    result = optimize(g, **FAST)
    out = result.save(tmp_path / "o.onnx")
    assert verify(g, ir.load(out), Tolerance(rtol=1e-3, atol=1e-4), runs=2).equivalent
    r = result.report  # the figures reported are those of the timing that decided
    original = next(c["measured_ms"] for c in r["final_candidates"] if c["label"] == "original")
    decided = {c["label"]: (c["measured_ms"], original) for c in r["final_candidates"]}
    decided.update({c["label"]: (c["measured_ms"], c["original_ms"]) for c in r["confirmations"] if c["confirmed"]})
    assert (r["latency_after_ms"], r["latency_before_ms"]) == decided[r["chosen"]]
    assert ir.load(out).key == ir.load_bytes(ir.serialize(result.graph)).key  # what was chosen is what is saved


def test_merges_across_pieces_are_a_verified_whole_model_option():
    """NasRNN's pieces hold one step each: batching the steps' input projections needs the
    whole graph, so optimize verifies a whole-model greedy variant too (and it may win)."""
    g = build("nasrnn", "tiny")
    result = optimize(g, **FAST)
    labels = [c["label"] for c in result.report["final_candidates"]]
    assert result.report["pieces"] > 1 and "greedy-whole-model" in labels
    if result.report["chosen"] == "greedy-whole-model":
        assert result.report["substitutions"].get("BatchSharedWeightMatMuls") == 8
    no_batching = optimize(g, rules=tuple(r for r in DEFAULT_RULES if r.name != "BatchSharedWeightMatMuls"), **FAST)
    assert "BatchSharedWeightMatMuls" not in no_batching.report["substitutions"]


@pytest.mark.parametrize("name", ["nasrnn", "inception_v3"])
def test_same_seed_gives_the_same_bytes(tmp_path, name):
    """With selection by the cost model and no time limit cutting the search, the output is
    reproducible to the byte (selection by measured latency can differ between runs when
    candidates are within the machine's noise, and a time budget can cut a search early)."""
    g = build(name, "tiny")
    a = optimize(g, seed=3, select="estimated", time_budget=None, **FAST)
    b = optimize(g, seed=3, select="estimated", time_budget=None, **FAST)
    assert not a.unchanged
    assert a.save(tmp_path / "a.onnx").read_bytes() == b.save(tmp_path / "b.onnx").read_bytes()


def test_no_streams_writes_no_schedule_and_no_rules_changes_only_the_schedule(tmp_path):
    g = build("inception_v3", "tiny")
    r = optimize(g, use_streams=False, **FAST)
    assert r.schedule is None and all(n.stream is None for n in r.graph.nodes)
    assert b"gspo.schedule" not in ir.serialize(r.graph)
    r2 = optimize(g, use_rules=False, **FAST)
    assert r2.report["substitutions"] == {}
    stripped = r2.graph.with_nodes(tuple(n.replace(stream=None) for n in r2.graph.nodes))
    assert stripped.key == g.key


class _StreamsCost:
    """The shipped profile's estimates, a schedule on several streams ``factor`` x its one-stream estimate."""

    def __init__(self, factor: float):
        from gspo.costmodel import CostModel, load_profile

        self.real, self.factor = CostModel(load_profile("cpu", force=True)), factor

    def cost(self, graph, schedule=None):
        streams = schedule is not None and schedule.num_streams > 1
        return self.real.cost(graph, None) * (self.factor if streams else 1.0)


def test_whole_model_streams_are_measured_only_when_not_estimated_clearly_slower():
    g = build("nasnet_mobile", "tiny")
    r = optimize(g, use_rules=False, **FAST, strategies=Strategies(cost_model=_StreamsCost(10.0)))
    assert "optimized+streams" not in [c["label"] for c in r.report["final_candidates"]]
    assert r.report["final_streams_skipped"]["estimated_ms"] > 0 and r.schedule is None
    r = optimize(g, use_rules=False, **FAST, strategies=Strategies(cost_model=_StreamsCost(1.2)))
    assert "optimized+streams" in [c["label"] for c in r.report["final_candidates"]]
    assert r.report["final_streams_skipped"] is None


def test_when_nothing_beats_the_input_the_output_is_the_input():
    b = ir.builder.GraphBuilder()
    g = b.output(b.op("Relu", [b.input("x", (1, 4))])).build()
    r = optimize(g, **FAST)
    assert r.unchanged and r.report["unchanged"] and r.graph.key == g.key


def test_an_unchanged_model_file_is_written_back_byte_for_byte(tmp_path):
    b = ir.builder.GraphBuilder()
    g = b.output(b.op("Relu", [b.input("x", (1, 4))])).build()
    src = ir.save(g, tmp_path / "in.onnx")
    r = optimize(src, **FAST)
    assert r.unchanged
    assert r.save(tmp_path / "out.onnx").read_bytes() == src.read_bytes()


class BreakConvs(Rule):
    """Test-only rule: scales a Conv weight by 2 (changes the outputs)."""

    pattern = ("Conv",)

    def check(self, graph, site):
        return self._match(site)

    def apply(self, graph, match):
        conv = match.nodes[0]
        e = Edit(graph).drop(conv)
        w = graph.weights[conv.inputs[1]].evaluate(graph.store) * 2
        e.node("Conv", [conv.inputs[0], e.weight("w", Literal.from_array(w.astype(np.float32))), *conv.inputs[2:]],
               conv.attrs, outputs=[conv.outputs[0].name], like=conv)
        return e.commit()


def test_a_corrupting_rule_is_caught_by_verification_and_never_written():
    from gspo.costmodel import CostModel, load_profile

    g = build("squeezenet", "tiny")
    real = CostModel(load_profile("cpu", force=True))
    broken_keys = set()  # the broken rewrites are made to look cheaper to the cost model

    class Cheap(CostModel):
        def cost(self, graph, schedule=None):
            return real.cost(graph, schedule) * (0.5 if graph.key in broken_keys else 1.0)

    rule = BreakConvs()
    original_apply = rule.apply

    def apply(graph, match):
        out = original_apply(graph, match)
        broken_keys.add(out.key)
        return out

    rule.apply = apply
    r = optimize(g, rules=(rule,), use_streams=False, **FAST,
                 strategies=Strategies(cost_model=Cheap(load_profile("cpu", force=True))))
    assert r.report["candidates_rejected_by_verification"] >= 1
    assert verify(g, r.graph, Tolerance(rtol=1e-3, atol=1e-4)).equivalent


def test_a_wrong_final_model_is_refused(monkeypatch):
    from gspo.partition import Partition

    g = build("squeezenet", "tiny")
    real_merge = Partition.merge

    def broken_merge(self, replacements=None):
        merged = real_merge(self, replacements)
        conv = next(n for n in merged.nodes if n.op_type == "Conv")
        w = merged.weights[conv.inputs[1]].evaluate(merged.store) * 3
        return merged.replace_nodes(weights={conv.inputs[1]: Literal.from_array(w.astype(np.float32))})

    monkeypatch.setattr(Partition, "merge", broken_merge)
    with pytest.raises(OptimizeError, match="differs from the original"):
        optimize(g, **FAST)


@pytest.mark.parametrize("options, message", [
    (dict(alpha=0.5), "--alpha must be at least 1"),
    (dict(budget=-1), "--budget must not be negative"),
    (dict(time_budget=-3), "--time-budget must be positive"),
    (dict(max_streams=0), "--max-streams"),
    (dict(profile="no-such-profile"), "no profile named"),
    (dict(select="random"), "--select"),
    (dict(final_margin=1.5), "margins must be in"),
])
def test_bad_options(options, message):
    with pytest.raises(GspoError, match=message):
        optimize(build("squeezenet", "tiny"), **options)


def test_a_profile_for_another_device_is_refused_without_force(tmp_path):
    import json

    from gspo.costmodel.profile import PROFILE_DIRS

    data = json.loads((PROFILE_DIRS[0] / "cpu.json").read_text())
    data["device"] = "cpu:Some Other CPU:64c"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    with pytest.raises(GspoError, match="made for device"):
        optimize(build("squeezenet", "tiny"), profile=str(other), **FAST)
    forced = optimize(build("squeezenet", "tiny"), profile=str(other), force_profile=True, **FAST)
    assert forced.report["profile_device"] == "cpu:Some Other CPU:64c"
