import time
import weakref

import pytest
import torch

from kernel_lib.timing import _percentile, time_fn, time_interleaved


def test_known_sleep_is_timed_within_tolerance():
    timing = time_fn(lambda: time.sleep(0.01), warmup=1, reps=7)
    assert 9.5 <= timing.median_ms <= 30, timing
    assert timing.reps == 7
    assert timing.method == "perf_counter + cpu synchronize"


def test_stats_are_ordered():
    timing = time_fn(lambda: torch.ones(1000).sum(), reps=50)
    assert timing.min_ms <= timing.p10_ms <= timing.median_ms <= timing.p90_ms


def test_min_time_decides_reps_when_reps_not_given():
    timing = time_fn(lambda: time.sleep(0.002), warmup=0, min_time_s=0.05)
    assert 5 <= timing.reps <= 30


def test_max_reps_caps_fast_functions():
    assert time_fn(lambda: None, min_time_s=1.0, max_reps=40).reps == 40


def test_warmup_calls_are_not_timed():
    calls = []
    time_fn(lambda: calls.append(1), warmup=4, reps=6)
    assert len(calls) == 4 + 6


def test_each_result_lives_until_the_sync(monkeypatch):
    """A lazy device (XLA) computes only what is still referenced when it synchronises."""
    from kernel_lib import timing as harness

    alive_at_sync = []
    refs = []

    def make():
        out = torch.zeros(1)
        refs.append(weakref.ref(out))
        return out

    monkeypatch.setattr(
        harness, "synchronize", lambda device: alive_at_sync.append(refs[-1]() is not None)
    )
    time_fn(make, warmup=2, reps=3)
    assert alive_at_sync and all(alive_at_sync)


def test_percentile_interpolates():
    assert _percentile([0.0, 10.0], 0.5) == 5.0
    assert _percentile([1.0, 2.0, 3.0, 4.0, 5.0], 0.1) == pytest.approx(1.4)


def test_cpu_has_no_allocator_peak():
    assert time_fn(lambda: None, reps=5).peak_mem_bytes is None


@pytest.mark.parametrize("kwargs, name", [({"reps": 0}, "reps"), ({"warmup": -1}, "warmup")])
def test_bad_arguments_name_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=name):
        time_fn(lambda: None, **kwargs)


def test_interleaved_alternates_and_times_each():
    calls = []
    fns = {
        "short": lambda: (calls.append("short"), time.sleep(0.002)),
        "long": lambda: (calls.append("long"), time.sleep(0.006)),
    }
    timings = time_interleaved(fns, rounds=3, warmup=1, min_time_s=0.06, progress="two sleeps")
    assert 1.9 <= timings["short"].median_ms < timings["long"].median_ms, timings
    assert timings["short"].reps % 3 == 0 and timings["long"].reps >= 3
    assert "interleaved over 3 rounds" in timings["long"].method
    assert len(timings["short"].round_medians_ms) == 3


def test_interleaved_rejects_no_rounds():
    with pytest.raises(ValueError, match="rounds"):
        time_interleaved({"f": lambda: None}, rounds=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA/AMD GPU")
def test_cuda_events_and_peak_memory():
    x = torch.randn(1024, 1024, device="cuda")
    timing = time_fn(lambda: x @ x, device="cuda", reps=10, flush_cache=True)
    assert timing.method == "cuda events, L2 flushed"
    assert timing.peak_mem_bytes > 0


def test_median_interval_order_statistics():
    from kernel_lib.timing import median_interval

    assert median_interval(list(range(10))) == (4.5, 1, 8)  # x(2), x(9): 97.9 % coverage
    assert median_interval(list(range(20)))[1:] == (5, 14)  # x(6), x(15)
    low, high = median_interval([1.0, 2.0, 3.0])[1:]
    assert (low, high) == (float("-inf"), float("inf"))  # too few to reach 95 %


def test_ratio_pairs_rounds():
    from kernel_lib.timing import ratio

    r = ratio([2.0] * 10, [1.0] * 9 + [4.0])  # subject twice as fast in 9 of 10 rounds
    assert r.value == 2.0 and r.rounds == 10 and not r.low <= 1.0 <= r.high
    with pytest.raises(ValueError, match="time_interleaved"):
        ratio([1.0, 2.0], [1.0])


def test_interleaved_rounds_alternate_order():
    order = []
    time_interleaved(
        {"a": lambda: order.append("a"), "b": lambda: order.append("b")},
        rounds=4,
        warmup=0,
        min_time_s=0,
        max_reps=1,
    )
    timed = order[2:]  # after one calibration call each
    assert timed == ["a", "b", "b", "a", "a", "b", "b", "a"]


@pytest.mark.slow
def test_a_function_against_itself_shows_no_clear_difference():
    """A/A: the same function timed against itself. Under exchangeable rounds the 97.9 % order-
    statistic interval misses 1 with probability ~2 %: require two of three A/A runs to contain it."""
    from kernel_lib.timing import ratio

    a = torch.randn(192, 192)
    contains = 0
    for _ in range(3):
        t = time_interleaved({"a": lambda: a @ a, "b": lambda: a @ a}, rounds=10, min_time_s=0.05)
        r = ratio(t["a"].round_medians_ms, t["b"].round_medians_ms)
        contains += r.low <= 1.0 <= r.high
    assert contains >= 2
