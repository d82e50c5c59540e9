import json
import math

import pytest

from kernel_lib.records import (
    Record, failed, load_records, measured, save_records, skipped, summary_table, with_baseline,
    with_datasheet, with_peak,
)  # fmt: skip
from kernel_lib.timing import Timing


def timing(ms):
    return Timing(median_ms=ms, p10_ms=ms * 0.9, p90_ms=ms * 1.1, min_ms=ms * 0.8, reps=10,
                  method="perf_counter + cpu synchronize", peak_mem_bytes=None)


def test_rates_derive_from_counts_and_median(cpu_facts):
    r = measured("t", "gemm", "mm", timing(2.0), facts=cpu_facts, dtype="float32",
                 shape={"M": 8}, flops=4e9, bytes=2e9)
    assert r.tflops == pytest.approx(2.0)  # 4e9 FLOP in 2 ms
    assert r.gbps == pytest.approx(1000.0)
    assert (r.device, r.backend, r.method) == ("Test CPU", "cpu", "perf_counter + cpu synchronize")


def test_ratio_vs_baseline_is_baseline_time_over_this_time(cpu_facts):
    base = measured("t", "c", "slow", timing(4.0), facts=cpu_facts)
    fast = with_baseline(measured("t", "c", "fast", timing(1.0), facts=cpu_facts), base)
    assert (fast.baseline, fast.ratio_vs_baseline) == ("slow", 4.0)


def test_fractions_of_measured_and_datasheet_peaks(cpu_facts):
    r = measured("t", "c", "i", timing(1.0), facts=cpu_facts, flops=1e9)  # 1 TFLOP/s
    r = with_datasheet(with_peak(r, 2.0, basis="best measured"), 4.0, basis="datasheet: X")
    assert (r.fraction_of_peak, r.peak_basis) == (0.5, "best measured")
    assert (r.fraction_of_datasheet, r.datasheet_basis) == (0.25, "datasheet: X")
    assert with_peak(skipped("t", "c", "i", "why", facts=cpu_facts), 2.0, basis="b").fraction_of_peak is None


def test_skipped_and_failed_need_a_reason(cpu_facts):
    assert skipped("t", "c", "i", "no GPU", facts=cpu_facts).status == "skipped"
    assert failed("t", "c", "i", "wrong answer", facts=cpu_facts).status == "failed"
    with pytest.raises(ValueError, match="reason"):
        Record(topic="t", case="c", implementation="i", device="d", backend="cpu", status="skipped")
    with pytest.raises(ValueError, match="status"):
        Record(topic="t", case="c", implementation="i", device="d", backend="cpu", status="maybe")


def test_save_and_load_round_trip(tmp_path, cpu_facts):
    rows = [measured("t", "c", "i", timing(1.0), facts=cpu_facts, shape={"N": 3}, metrics={"err": math.nan}),
            skipped("t", "c", "j", "no GPU", facts=cpu_facts)]
    path = save_records(rows, "nb", tmp_path)
    assert json.loads(path.read_text())[0]["metrics"]["err"] is None  # NaN is not JSON
    assert (tmp_path / "nb.results.csv").exists()
    frame = load_records(tmp_path)
    assert list(frame["status"]) == ["ok", "skipped"]
    assert frame["shape.N"].iloc[0] == 3


def test_summary_table_drops_empty_columns(cpu_facts):
    table = summary_table([measured("t", "c", "i", timing(1.0), facts=cpu_facts)])
    assert "tflops" not in table and "median_ms" in table
