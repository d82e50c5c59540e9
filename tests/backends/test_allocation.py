"""The allocator section: checked workloads, one process per allocator and round, ratios paired by
round, skips for allocators that are not installed."""

import dataclasses

import pytest

from kernel_lib import allocator
from kernel_lib.backends import allocation
from kernel_lib.timing import time_fn


def test_each_workload_passes_its_check_and_allocates_a_fresh_output():
    for case, (fn, check) in allocation.workloads(9, 5, 7).items():
        first, second = fn(), fn()
        assert check(first).passed, case
        assert first.data_ptr() != second.data_ptr() or first.numel() == 0, case


def test_a_broken_relu_fails_its_check():
    fn, check = allocation.workloads(9, 5, 7)["relu_fresh_output"]
    assert not check(fn() + 2**-6).passed


@pytest.mark.slow
def test_a_child_process_runs_under_its_allocator():
    out = allocation._run_child("system_kept", {"shape": [8, 4, 8], "min_time_s": 0.001})
    assert out["allocator"] == allocator.describe("system_kept")
    assert all(out[case]["check"]["passed"] and out[case]["timing"] for case in allocation.CASES)


def _fake_child(slow: dict[str, float]):
    """A stand-in process: times a trivial call, then scales its samples by `slow[name]`."""

    def run(name, request):
        out = {"allocator": name}
        for case, (fn, check) in allocation.workloads(*request["shape"]).items():
            timing = time_fn(fn, warmup=0, reps=5)
            scaled = [s * slow[name] for s in timing.samples_ms]
            timing = dataclasses.replace(
                timing, samples_ms=tuple(scaled), median_ms=timing.median_ms * slow[name]
            )
            out[case] = {
                "check": dataclasses.asdict(check(fn())),
                "timing": dataclasses.asdict(timing),
            }
        return out

    return run


def test_ratios_are_against_system_and_a_missing_one_is_skipped(
    monkeypatch, cpu_target, tiny, tmp_path
):
    monkeypatch.setattr(allocation, "_run_child", _fake_child({"system": 3.0, "system_kept": 1.0}))
    monkeypatch.setattr(allocator, "_library_dirs", lambda: [tmp_path])
    cfg = dataclasses.replace(
        tiny, allocators=("system", "system_kept", "jemalloc"), allocator_shape=(8, 4, 8)
    )
    records = allocation.allocator_effect(cpu_target, cfg)
    got = {(r.case, r.implementation): r for r in records}
    assert len(records) == 6
    kept = got["gemm_fresh_output", "system_kept"]
    assert kept.ratio_vs_baseline == pytest.approx(3.0, rel=0.5) and kept.baseline == "system"
    assert len(kept.round_medians_ms) == cfg.allocator_rounds
    skipped = got["relu_fresh_output", "jemalloc"]
    assert skipped.status == "skipped" and "apt-get install libjemalloc2" in skipped.reason


def test_a_wrong_output_in_any_round_is_never_timed(monkeypatch, cpu_target, tiny):
    good = _fake_child({"system": 1.0, "system_kept": 1.0})

    def broken(name, request):
        out = good(name, request)
        out["relu_fresh_output"]["check"]["passed"] = name != "system_kept"
        return out

    monkeypatch.setattr(allocation, "_run_child", broken)
    cfg = dataclasses.replace(
        tiny, allocators=("system", "system_kept"), allocator_shape=(8, 4, 8)
    )
    records = allocation.allocator_effect(cpu_target, cfg)
    wrong = [r for r in records if r.status == "wrong"]
    assert [(r.case, r.implementation) for r in wrong] == [("relu_fresh_output", "system_kept")]
    assert wrong[0].median_ms is None


def test_an_absent_cpu_records_only_skips(tiny):
    from kernel_lib.backends.target import find_target

    records = allocation.allocator_effect(find_target("nvidia"), tiny)
    assert records and {r.status for r in records} == {"skipped"}
