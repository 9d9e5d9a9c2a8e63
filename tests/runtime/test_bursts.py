"""The burst timing mode (issue 51): pause, one untimed call, a burst of timed calls, rotating
runners; on a fake clock and a fake sleep (no real timing)."""

from __future__ import annotations

import pytest

from gspo.runtime.bench import burst_sample, bursts


class Machine:
    """A fake clock and sleep: each runner's call takes the seconds it is scripted to, its first
    call after a sleep longer (the wake-up after idle); every event is logged."""

    def __init__(self, cold: dict[str, float], warm: dict[str, float]):
        self.now, self.cold, self.warm = 0.0, cold, warm
        self.idle = True
        self.log: list[tuple] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.log.append(("sleep", seconds))
        self.now += seconds
        self.idle = True

    def runner(self, label: str):
        def run():
            self.now += self.cold[label] if self.idle else self.warm[label]
            self.log.append(("call", label, self.idle))
            self.idle = False
        return label, run


def test_a_burst_sample_pauses_calls_once_untimed_then_times_the_burst_mean():
    m = Machine({"a": 10.0}, {"a": 1.0})
    sample = burst_sample(m.runner("a")[1], calls=3, pause=0.2, clock=m.clock, sleep=m.sleep)
    assert float(sample()) == pytest.approx(1.0)  # the cold call is the untimed one
    assert m.log == [("sleep", 0.2), ("call", "a", True), ("call", "a", False), ("call", "a", False),
                     ("call", "a", False)]


def test_burst_sizes_cycle_through_the_range():
    m = Machine({"a": 1.0}, {"a": 1.0})
    sample = burst_sample(m.runner("a")[1], calls=(3, 5), pause=0.0, clock=m.clock, sleep=m.sleep)
    counts = []
    for _ in range(4):
        before = len(m.log)
        sample()
        counts.append(len(m.log) - before - 1)  # the untimed call is not in the burst
    assert counts == [3, 4, 5, 3]
    assert not any(e[0] == "sleep" for e in m.log)  # no pause asked: no sleep


def test_bursts_rotate_the_runners_and_take_each_bursts_mean():
    # the second call after idle is still slow for b (a wake-up that lasts two calls): in bursts
    # of 3 b's mean is (3 + 1 + 1) / 3, a's 2
    m = Machine({"a": 5.0, "b": 5.0}, {"a": 2.0, "b": 1.0})
    state = {"after_idle": 0}

    def slow_start_b():
        state["after_idle"] = 0 if m.idle else state["after_idle"] + 1
        m.now += 5.0 if m.idle else (3.0 if state["after_idle"] == 1 else 1.0)
        m.log.append(("call", "b", m.idle))
        m.idle = False

    timings = bursts([m.runner("a"), ("b", slow_start_b)], rounds=4, calls=3, pause=0.2, warmup=1,
                     clock=m.clock, sleep=m.sleep)
    assert [t.label for t in timings] == ["a", "b"]
    assert timings[0].seconds == pytest.approx((2.0,) * 4)
    assert timings[1].seconds == pytest.approx((5.0 / 3,) * 4)
    firsts = [m.log[i + 1][1] for i, e in enumerate(m.log) if e[0] == "sleep"]
    assert firsts == ["a", "b"] + ["a", "b", "b", "a", "a", "b", "b", "a"]  # warm-up, then rotating
    assert sum(e[1] for e in m.log if e[0] == "sleep") == pytest.approx((4 + 1) * 2 * 0.2)


@pytest.mark.parametrize("calls,pause", [(0, 0.2), ((4, 3), 0.2), (3, -1.0)])
def test_bad_burst_shapes_are_refused(calls, pause):
    with pytest.raises(ValueError):
        burst_sample(lambda: None, calls=calls, pause=pause)
