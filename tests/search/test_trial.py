"""On-board verification of options: rejected with a reason when refused or different, timed otherwise."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from gspo import ir
from gspo.ir import Attr
from gspo.runtime import CpuExecutor, Timing, random_inputs
from gspo.search.candidate import Candidate, Measured
from gspo.search.stats import PAIRED_ALPHA, pick, rounds_faster, sign_test
from gspo.search.trial import ReferenceError_, Trial
from gspo.timing import Deadline


def _relu(times: int = 1):
    b = ir.builder.GraphBuilder()
    x = b.input("x", (1, 4))
    for _ in range(times - 1):
        x = b.op("Relu", [x])
    return b.output(b.op("Relu", [x], out="y")).build()


def test_a_trial_builds_each_session_once(monkeypatch):
    """The reference's own graph shares its session, and a second timing (the confirmation of a
    final choice) reuses the sessions instead of building them again (onnxruntime's sessions
    counted as they are made)."""
    import onnxruntime as ort

    built = []
    real = ort.InferenceSession.__init__

    def counted(self, *args, **kwargs):
        built.append(self)
        real(self, *args, **kwargs)

    monkeypatch.setattr(ort.InferenceSession, "__init__", counted)
    plain, twice = _relu(1), _relu(2)
    feeds = [random_inputs(plain, 0)]
    with Trial(plain, [Candidate(plain, label="original"), Candidate(twice, label="twice")], feeds) as trial:
        first = trial.time(runs=5)
        again = trial.time(runs=5, labels=("twice",))
    assert len(built) == 2  # the reference (shared by "original") and "twice"
    assert [o.label for o in first] == ["original", "twice"] and all(o.median_s > 0 for o in first)
    assert [o.label for o in again] == ["twice"]


def test_an_option_onnxruntime_refuses_is_rejected_with_its_reason():
    g = _relu(1)
    relu = g.nodes[0]
    broken = g.replace_nodes([relu], [relu.replace(op_type="NoSuchOp")])
    with Trial(g, [Candidate(g, label="original"), Candidate(broken, label="broken")], [random_inputs(g, 0)]) as trial:
        out = trial.time(runs=5)
    rejected = [o for o in out if o.rejected]
    assert [o.label for o in rejected] == ["broken"]
    assert rejected[0].rejected.startswith("onnxruntime refused it")
    assert [o.label for o in out if o.timing] == ["original"]


def test_an_option_that_fails_at_run_time_is_rejected():
    b = ir.builder.GraphBuilder()
    x = b.input("x", (2, 6))
    g = b.output(b.op("Reshape", [x, b.const("shape", np.array([3, 4], np.int64))], out="y")).build()
    node = g.nodes[0]
    wrong = ir.Literal.from_array(np.array([5, 4], np.int64))  # 12 elements cannot become 20
    bad = g.replace_nodes(weights={node.inputs[1]: wrong})
    with Trial(g, [Candidate(g, label="original"), Candidate(bad, label="bad")], [random_inputs(g, 0)]) as trial:
        out = trial.time(runs=5)
    (rej,) = [o for o in out if o.rejected]
    assert rej.label == "bad" and "onnxruntime" in rej.rejected


def test_an_option_that_fails_while_timed_is_rejected_and_the_rest_timed():
    """Verified, then failing on a later run (as a stream race did): rejected with the reason,
    not the end of the run; the reference failing is still an error."""
    flaky_key = _relu(2).key

    class Flaky:
        def __init__(self, ex):
            self.ex, self.calls = ex, 0

        def run(self, feeds):
            self.calls += 1
            if self.calls > 3:
                raise ReferenceError_("onnxruntime failed on stream 1: 'a'")
            return self.ex.run(feeds)

        def close(self):
            self.ex.close()

    def executor(g, schedule, placement, settings):
        ex = CpuExecutor(g, None, settings.session_config(), placement=placement)
        return Flaky(ex) if g.key == flaky_key else ex

    plain = _relu(1)
    options = [Candidate(plain, label="original"), Candidate(_relu(2), label="flaky"), Candidate(_relu(3), label="thrice")]
    with Trial(plain, options, [random_inputs(plain, 0)], executor=executor) as trial:
        out = trial.time(runs=5)
    assert [o.label for o in out if o.timing] == ["original", "thrice"]
    (rej,) = [o for o in out if o.rejected]
    assert rej.label == "flaky" and rej.rejected.startswith("failed while timed: onnxruntime failed on stream 1")


def test_an_option_with_different_outputs_is_rejected_and_says_which():
    g = _relu(1)
    sig = g.replace_nodes([g.nodes[0]], [g.nodes[0].replace(op_type="Sigmoid")])
    with Trial(g, [Candidate(g, label="original"), Candidate(sig, label="sigmoid")], [random_inputs(g, 0)]) as trial:
        out = trial.time(runs=5)
    (rej,) = [o for o in out if o.rejected]
    assert rej.rejected.startswith("output y differs") and rej.diffs and not rej.diffs[0].ok


def test_a_reference_that_cannot_run_is_an_error():
    g = _relu(1)
    broken = g.replace_nodes([g.nodes[0]], [g.nodes[0].replace(attrs=(Attr("alpha", 1, 0.5),), op_type="Relu")])
    with pytest.raises(ReferenceError_):
        Trial(broken, [Candidate(broken, label="original")], [random_inputs(g, 0)])


def test_pick_needs_the_margin_and_estimated_selection_ignores_timings():
    g = _relu(1)
    with Trial(g, [Candidate(g, label="original"), Candidate(_relu(2), label="same")], [random_inputs(g, 0)]) as trial:
        out = trial.time(runs=5)
    by = {o.label: o for o in out}
    assert pick(out, "original", margin=0.99).label == "original"  # nothing is 100x faster
    chosen = pick(out, "original", 0.0, "estimated", lambda o: 1.0 if o.label == "same" else 2.0)
    assert chosen is by["same"]


def test_rounds_faster_pairs_the_rounds_and_counts_wins_beyond_the_margin():
    ref = Timing("a", (1.0, 2.0, 1.0, 2.0))
    other = Timing("b", (0.95, 1.0, 0.99, 2.5))  # 5%, 50%, 1%, -25%
    assert rounds_faster(ref, other, 0.02) == (2, 4)
    assert rounds_faster(ref, other, 0.0) == (3, 4)


def test_the_sign_test_is_a_fair_coins_tail():
    assert sign_test(0, 10) == 1.0
    assert sign_test(10, 10) == pytest.approx(1 / 1024)
    assert sign_test(9, 10) == pytest.approx(11 / 1024)
    assert sign_test(22, 30) < PAIRED_ALPHA < sign_test(21, 30)
    assert sign_test(6, 6) > PAIRED_ALPHA  # six rounds can never rule chance out at 1%
    assert sign_test(1, 0) == 1.0


def test_a_quantized_output_one_step_off_passes_and_two_steps_off_is_rejected(tmp_path):
    """Another backend's integer kernels may round a DequantizeLinear's output one step of its
    scale away from onnxruntime's; more than that is a different result."""
    from gspo.runtime import CpuExecutor
    from tests.runtime.test_verify import _qdq

    g = _qdq(tmp_path, 0.25)

    class Shifted:
        """onnxruntime's outputs, the quantized one moved by ``steps`` steps."""

        def __init__(self, steps):
            self.steps, self.inner = steps, CpuExecutor(g)

        def run(self, feeds):
            out = self.inner.run(feeds)
            return {**out, "y": out["y"] + np.float32(0.25 * self.steps)}

        def close(self):
            self.inner.close()

    shifts = {"one step": 1, "two steps": 2}
    options = [Candidate(g, kind="other", label=label) for label in shifts]
    labels = iter(shifts.values())
    with Trial(g, options, [random_inputs(g, 0)], executor=lambda *args: Shifted(next(labels))) as trial:
        out = trial.time(runs=5)
    assert [o.label for o in out if o.timing] == ["one step"]
    (two,) = [o for o in out if o.rejected]
    assert two.label == "two steps" and "output y differs" in two.rejected and "2 quantization steps" in two.rejected


def test_a_timings_warm_up_rounds_come_out_of_its_budget(monkeypatch):
    """A budget of ten rounds' time holds the warm-up and seven timed rounds, not ten more."""
    import time as clock

    from gspo.search.trial import WARMUP_ROUNDS

    monkeypatch.setattr(sys.modules["gspo.search.trial"], "WARM_BELOW_S", 0.005)  # one call a sample
    g = _relu(1)

    class Slow:
        def run(self, feeds):
            clock.sleep(0.01)
            return {"y": np.maximum(feeds["x"], 0)}

        def close(self):
            pass

    with Trial(g, [Candidate(_relu(2), label="slow")], [random_inputs(g, 0)], executor=lambda *args: Slow()) as trial:
        out = trial.time(runs=30, until=Deadline(0.1, clock=lambda: 0.0), labels=("slow",))
    (slow,) = out
    assert 5 <= len(slow.timing.seconds) <= 10 - WARMUP_ROUNDS


def test_the_final_comparison_keeps_time_to_confirm_a_win_with_enough_rounds():
    """An option enters the final comparison only when a confirmation of CONFIRM_ROUNDS rounds
    (enough for a steady gain to pass the sign test) still fits after its first timing."""
    from gspo.search.budget import Timebox
    from gspo.search.trial import CONFIRM_ROUNDS, MIN_ROUNDS, WARMUP_ROUNDS

    assert CONFIRM_ROUNDS > MIN_ROUNDS + WARMUP_ROUNDS
    assert sign_test(MIN_ROUNDS + WARMUP_ROUNDS - 1, MIN_ROUNDS + WARMUP_ROUNDS) > PAIRED_ALPHA  # 7 of 8 is not enough
    assert sign_test(CONFIRM_ROUNDS - WARMUP_ROUNDS - 1, CONFIRM_ROUNDS - WARMUP_ROUNDS) < PAIRED_ALPHA  # 10 of 11 is
    g = _relu(1)
    clock = [0.0]
    timebox = Timebox.of(100.0, clock=lambda: clock[0])
    with Trial(g, [], [random_inputs(g, 0)], timebox=timebox, stage="final") as trial:
        trial.run_s = 1.0
        option = Candidate(_relu(2), label="other")
        from gspo.search.trial import build_seconds

        first = build_seconds(option, timebox.rates) + 1.0 + (MIN_ROUNDS + WARMUP_ROUNDS) * 1.0 * (len(trial._ok) + 2)
        clock[0] = 100.0 - (first + CONFIRM_ROUNDS * 2 * 1.0) - 0.5
        assert trial._fits(option)
        clock[0] += 1.0
        assert not trial._fits(option)


class _Switching:
    """A fake executor whose call is slow right after another executor's (its idle threads
    waking) and fast when called in a row; logs every call."""

    last = [None]

    def __init__(self, name, log, cold_s=0.004, warm_s=0.001):
        self.name, self.log, self.cold_s, self.warm_s = name, log, cold_s, warm_s

    def run(self, feeds):
        import time as clock

        clock.sleep(self.cold_s if self.last[0] is not self else self.warm_s)
        self.last[0] = self
        self.log.append(self.name)
        return {"y": np.maximum(feeds["x"], 0)}

    def close(self):
        pass


def _time_switching(runs: int) -> tuple[list[Measured], list[str]]:
    """Two options on :class:`_Switching` executors timed ``runs`` rounds: their outcomes and
    the calls of the timing, in order."""
    g = _relu(1)
    log: list[str] = []
    made = iter(["a", "b"])
    with Trial(g, [Candidate(_relu(2), label="a"), Candidate(_relu(3), label="b")], [random_inputs(g, 0)],
               executor=lambda *args: _Switching(next(made), log)) as trial:
        start = len(log)
        out = trial.time(runs=runs, labels=("a", "b"))
    return out, log[start:]


def test_a_fast_model_is_timed_in_a_row_after_an_untimed_call():
    """Timed right after another runtime's call, an option pays a switch its deployment, called
    in a row, does not: each timed sample follows an untimed call of the same option."""
    _, timing = _time_switching(6)
    assert len(timing) == 2 + (3 + 6) * 2 * 2  # first calls, then rounds of (untimed + timed) per option
    assert all(timing[k] == timing[k + 1] for k in range(2, len(timing), 2))


def test_a_slow_model_is_timed_one_call_a_sample(monkeypatch):
    trial_mod = sys.modules["gspo.search.trial"]
    monkeypatch.setattr(trial_mod, "WARM_BELOW_S", 0.0005)
    _, timing = _time_switching(6)
    assert len(timing) == 2 + (3 + 6) * 2
