from __future__ import annotations

import pytest

from gspo.runtime import interleaved


def test_interleaved_rotates_order_and_counts_runs():
    calls = []
    runners = [(name, lambda name=name: calls.append(name)) for name in "ABC"]
    timings = interleaved(runners, runs=3, warmup=1)
    assert calls[:3] == ["A", "B", "C"]  # warm-up
    assert calls[3:] == ["A", "B", "C", "B", "C", "A", "C", "A", "B"]
    assert [t.label for t in timings] == ["A", "B", "C"] and all(len(t.seconds) == 3 for t in timings)
    assert timings[0].ratio_to(timings[0]) == 1.0


def test_interleaved_rejects_bad_counts():
    with pytest.raises(ValueError):
        interleaved([("A", lambda: None)], runs=0)


def _ticking(monkeypatch, tick: float) -> None:
    """The harness's clock advances ``tick`` seconds at each reading (no real time is read)."""
    import itertools
    import types

    import gspo.runtime.bench as bench

    readings = itertools.count()
    monkeypatch.setattr(bench, "time", types.SimpleNamespace(perf_counter=lambda: tick * next(readings),
                                                             sleep=lambda s: None))


def test_a_runner_that_times_itself_on_the_device_is_taken_at_its_word(monkeypatch):
    from gspo.runtime.bench import DeviceTime

    _ticking(monkeypatch, 0.001)
    timings = interleaved([("device", lambda: DeviceTime(0.25)), ("host", lambda: 0.25)], runs=2, warmup=0)
    assert timings[0].seconds == (0.25, 0.25)
    assert timings[1].seconds == pytest.approx((0.001, 0.001))  # a plain float return is no timing: the clock's


def test_timed_runner_prefers_the_executors_own_and_falls_back_to_run():
    from gspo.runtime.bench import DeviceTime, measure_once, timed_runner

    class Plain:
        def run(self, feeds):
            return {"y": feeds["x"]}

    class Device(Plain):
        def timed_runner(self, feeds):
            return lambda: DeviceTime(0.5)

    assert timed_runner(Plain(), {"x": 1})() == {"y": 1}
    assert measure_once(timed_runner(Device(), {"x": 1})) == 0.5


def test_median_seconds_warms_up_then_runs_until_the_target_or_the_cap():
    from gspo.runtime import Repeats, median_seconds
    from gspo.runtime.bench import DeviceTime

    calls = []

    def run():  # the warm-up calls' times (9 s) are left out; the timed ones take 5, 1, 3, 7 s
        calls.append(1)
        return DeviceTime([9.0, 9.0, 5.0, 1.0, 3.0, 7.0][len(calls) - 1])

    assert median_seconds(run, Repeats(min_runs=3, max_runs=4, target_s=0.0, warmup=2)) == 3.0
    assert len(calls) == 2 + 3  # the target is met at once: the minimum
    calls.clear()
    assert median_seconds(run, Repeats(min_runs=3, max_runs=4, target_s=60.0, warmup=2)) == 4.0
    assert len(calls) == 2 + 4  # the target is never met: the cap
    calls.clear()
    assert median_seconds(run, Repeats(min_runs=2, max_runs=4, target_s=8.0, warmup=2)) == 3.0
    assert len(calls) == 2 + 3  # 9 s spent after 3 runs: the target


def test_a_warm_sample_calls_once_untimed_then_times_the_calls_in_a_row():
    from gspo.runtime.bench import DeviceTime, warm_sample

    durations = iter([9.0, 1.0, 3.0])  # the untimed call's time is left out
    sample = warm_sample(lambda: DeviceTime(next(durations)), calls=2)
    first = sample()
    assert first == 2.0 and isinstance(first, DeviceTime)
    calls = []
    plain = warm_sample(lambda: calls.append(1), calls=3)
    assert isinstance(plain(), DeviceTime) and len(calls) == 4
    with pytest.raises(ValueError):
        warm_sample(lambda: None, calls=0)
