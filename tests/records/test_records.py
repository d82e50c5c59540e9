import json
import math

import pytest

from kernel_lib.records import (
    Record,
    as_headline,
    failed,
    load_records,
    measured,
    record_id,
    save_records,
    skipped,
    stamp,
    summary_table,
    verdict,
    with_datasheet,
    with_peak,
    with_ratio,
)  # fmt: skip
from kernel_lib.timing import Ratio, Timing


def timing(ms):
    return Timing(
        median_ms=ms,
        p10_ms=ms * 0.9,
        p90_ms=ms * 1.1,
        min_ms=ms * 0.8,
        reps=10,
        method="perf_counter + cpu synchronize",
        peak_mem_bytes=None,
    )


def test_rates_derive_from_counts_and_median(cpu_facts):
    r = measured(
        "t",
        "gemm",
        "mm",
        timing(2.0),
        facts=cpu_facts,
        dtype="float32",
        shape={"M": 8},
        flops=4e9,
        bytes=2e9,
    )
    assert r.tflops == pytest.approx(2.0)  # 4e9 FLOP in 2 ms
    assert r.gbps == pytest.approx(1000.0)
    assert (r.device, r.backend, r.method) == ("Test CPU", "cpu", "perf_counter + cpu synchronize")


def test_ratio_carries_its_interval_and_verdict(cpu_facts):
    base = measured("t", "c", "slow", timing(4.0), facts=cpu_facts)
    fast = with_ratio(
        measured("t", "c", "fast", timing(1.0), facts=cpu_facts),
        base,
        Ratio(4.0, 3.5, 4.4, 0.95, 10),
    )
    assert (fast.baseline, fast.ratio_vs_baseline, fast.ratio_low, fast.ratio_high) == (
        "slow",
        4.0,
        3.5,
        4.4,
    )
    assert fast.verdict == "faster"
    assert (
        verdict(1.3, 0.9, 1.6) == "no clear difference"
    )  # an interval containing 1 is no speed-up
    assert verdict(0.5, 0.4, 0.6) == "slower"
    assert verdict(2.0, None, None) == "no clear difference"  # too few rounds for an interval


def test_baseline_in_another_dtype_is_labelled(cpu_facts):
    base = measured("t", "c", "seed", timing(4.0), facts=cpu_facts, dtype="float32")
    ours = measured("t", "c", "ours", timing(1.0), facts=cpu_facts, dtype="bfloat16")
    assert with_ratio(ours, base, Ratio(4.0, 3.0, 5.0, 0.95, 10)).baseline == "seed (float32)"


def test_fraction_of_peak_above_one_is_flagged(cpu_facts):
    r = with_peak(
        measured("t", "c", "i", timing(1.0), facts=cpu_facts, flops=2e9), 1.0, basis="dense"
    )
    assert r.fraction_of_peak == 2.0 and "too low" in r.flags[0]
    assert (
        with_peak(
            measured("t", "c", "i", timing(1.0), facts=cpu_facts, flops=1e9), 2.0, basis="d"
        ).flags
        == ()
    )


def test_headline_needs_a_figure_against_something(cpu_facts):
    plain = measured("t", "c", "i", timing(1.0), facts=cpu_facts, flops=1e9)
    key = "fp8.quantize_vs_copy"
    with pytest.raises(ValueError, match="no ratio or fraction"):
        as_headline(plain, key)  # a ceiling alone is never a headline
    assert as_headline(with_peak(plain, 2.0, basis="b"), key).headline == key


def test_a_headline_is_declared_by_its_key(cpu_facts):
    fast = with_peak(
        measured("t", "c", "i", timing(1.0), facts=cpu_facts, flops=1e9), 2.0, basis="b"
    )
    with pytest.raises(ValueError, match="not declared in kernel_lib.headlines"):
        as_headline(fast, "x vs ceiling")  # free text is no key
    with pytest.raises(ValueError, match="not declared"):
        as_headline(fast, "flex.causal_vs_sdpa")  # a template needs its field
    assert as_headline(fast, "flex.causal_vs_sdpa.bfloat16").headline == (
        "flex.causal_vs_sdpa.bfloat16"
    )  # a template's field filled in


def test_record_id_names_every_part_and_stamp_refuses_duplicates(cpu_facts):
    r = measured(
        "moe",
        "forward",
        "dispatch_loop",
        timing(1.0),
        facts=cpu_facts,
        dtype="bfloat16",
        shape={"T": 8, "D": 4},
        mode="forward",
    )
    assert record_id(r, "cpu") == "cpu/moe/forward/dispatch_loop/bfloat16/forward/D=4,T=8"
    (stamped,) = stamp([r], run_id="run-1", platform="cpu")
    assert (stamped.run_id, stamped.platform, stamped.record_id) == (
        "run-1",
        "cpu",
        record_id(r, "cpu"),
    )
    with pytest.raises(ValueError, match="share record_id"):
        stamp([r, r], run_id="run-1", platform="cpu")
    other_mode = measured(
        "moe",
        "forward",
        "dispatch_loop",
        timing(1.0),
        facts=cpu_facts,
        dtype="bfloat16",
        shape={"T": 8, "D": 4},
        mode="forward_backward",
    )
    assert len(stamp([r, other_mode], run_id="r", platform="cpu")) == 2


def test_fractions_of_measured_and_datasheet_peaks(cpu_facts):
    r = measured("t", "c", "i", timing(1.0), facts=cpu_facts, flops=1e9)  # 1 TFLOP/s
    r = with_datasheet(with_peak(r, 2.0, basis="best measured"), 4.0, basis="datasheet: X")
    assert (r.fraction_of_peak, r.peak_basis) == (0.5, "best measured")
    assert (r.fraction_of_datasheet, r.datasheet_basis) == (0.25, "datasheet: X")
    assert (
        with_peak(skipped("t", "c", "i", "why", facts=cpu_facts), 2.0, basis="b").fraction_of_peak
        is None
    )


def test_samples_are_kept(cpu_facts):
    t = Timing(1.0, 0.9, 1.1, 0.9, 3, "m", None, samples_ms=(0.9, 1.0, 1.1))
    assert measured("t", "c", "i", t, facts=cpu_facts).samples_ms == (0.9, 1.0, 1.1)


def test_skipped_and_failed_need_a_reason(cpu_facts):
    assert skipped("t", "c", "i", "no GPU", facts=cpu_facts).status == "skipped"
    assert failed("t", "c", "i", "wrong answer", facts=cpu_facts).status == "failed"
    with pytest.raises(ValueError, match="reason"):
        Record(
            topic="t", case="c", implementation="i", device="d", backend="cpu", status="skipped"
        )
    with pytest.raises(ValueError, match="status"):
        Record(topic="t", case="c", implementation="i", device="d", backend="cpu", status="maybe")


def test_save_and_load_round_trip(tmp_path, cpu_facts):
    rows = [
        measured(
            "t", "c", "i", timing(1.0), facts=cpu_facts, shape={"N": 3}, metrics={"err": math.nan}
        ),
        skipped("t", "c", "j", "no GPU", facts=cpu_facts),
    ]
    path = save_records(rows, "nb", tmp_path)
    saved = json.loads(path.read_text())
    assert saved[0]["metrics"]["err"] is None  # NaN is not JSON
    assert (
        saved[0]["run_id"] == saved[1]["run_id"] and saved[0]["record_id"] != saved[1]["record_id"]
    )
    assert (tmp_path / "nb.results.csv").exists()
    frame = load_records(tmp_path)
    assert list(frame["status"]) == ["ok", "skipped"]
    assert frame["shape.N"].iloc[0] == 3


def test_summary_table_drops_empty_columns(cpu_facts):
    table = summary_table([measured("t", "c", "i", timing(1.0), facts=cpu_facts)])
    assert "tflops" not in table and "median_ms" in table


def test_a_record_says_which_allocator_it_was_measured_under(cpu_facts, monkeypatch):
    from kernel_lib import allocator
    from kernel_lib.platform import device_facts

    monkeypatch.setenv(allocator.ENV, "system_kept")
    record = measured("t", "c", "x", timing(1.0), facts=device_facts())
    assert record.allocator.startswith("system_kept (MALLOC_MMAP_THRESHOLD_=")
    assert measured("t", "c", "x", timing(1.0), facts=cpu_facts).allocator is None
