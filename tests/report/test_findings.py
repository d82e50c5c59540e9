"""A report's headlines (report.findings): only the declared ones, each its figure against its
baseline (a ratio with its verdict) or its ceiling (a fraction), its shape and dtype; skipped ones
say why. The pages: test_pages.py."""

import dataclasses

import pandas as pd
import pytest

from kernel_lib.records import (
    as_headline,
    measured,
    shape_text,
    skipped,
    to_frame,
    to_frame_with_verdict,
    with_peak,
    with_ratio,
)  # fmt: skip
from kernel_lib.report.findings import headline_rows, headlines
from kernel_lib.timing import Ratio, Timing

T = Timing(2.0, 1.9, 2.2, 1.8, 10, "perf_counter + cpu synchronize", None)


def test_headlines_of_nothing_measured(cpu_facts):
    assert headlines(to_frame([skipped("t", "c", "i", "no GPU", facts=cpu_facts)])) == []


def _declared(cpu_facts, key="moe.seed_same_dtype"):
    dense = measured(
        "moe", "forward", "dense_gemm", T, facts=cpu_facts, dtype="bfloat16", flops=8e9
    )
    fast = measured(
        "moe", "forward", "dispatch_x", T, facts=cpu_facts, dtype="bfloat16", flops=4e9
    )
    ratio = Ratio(0.9, 0.85, 0.95, 0.95, 10)
    return dense, as_headline(with_ratio(fast, dense, ratio), key)


def test_only_declared_headlines_are_shown(cpu_facts):
    dense, fast = _declared(cpu_facts)
    lines = headlines(to_frame_with_verdict([dense, fast]))
    assert lines == [
        "MoE forward: dispatch chosen here vs seed-style, both fp32: 0.90x [0.85, 0.95] vs "
        "dense_gemm (slower) (dispatch_x bfloat16)"
    ]  # its declared title, figure, baseline, verdict; the faster dense one is not a headline


def test_a_ceiling_headline_is_a_fraction_of_its_ceiling_without_verdict(cpu_facts):
    dense, fast = _declared(cpu_facts, "moe.forward_vs_dense")
    (row,) = headline_rows(to_frame_with_verdict([dense, fast]), "cpu").to_dict("records")
    assert (row["key"], row["kind"], row["verdict"]) == ("moe.forward_vs_dense", "ceiling", "")
    assert row["against"] == "the dense GEMM pair of the same FLOPs"
    assert headlines(to_frame_with_verdict([dense, fast])) == [
        "MoE forward: dispatch chosen here / dense GEMM: 0.90 [0.85, 0.95] of the dense GEMM "
        "pair of the same FLOPs (dispatch_x bfloat16)"
    ]  # not "x", not "vs", no "(slower)": it can at best reach its ceiling


def test_headline_shape_may_hold_text(cpu_facts):
    dense, fast = _declared(cpu_facts)
    fast = dataclasses.replace(fast, shape={"T": 4096, "mask": "causal"})
    assert headlines(to_frame_with_verdict([fast]))[0].endswith(
        "(dispatch_x bfloat16 T=4096,mask=causal)"
    )


def test_a_shape_reads_the_same_in_any_column_order():
    # records of two platforms load with their shape columns in different orders
    a = pd.Series({"shape.T": 4096.0, "shape.E": 8, "shape.capacity": None})
    b = pd.Series({"shape.E": 8, "shape.T": 4096, "dtype": "bfloat16"})
    assert shape_text(a) == shape_text(b) == "E=8,T=4096"


def test_headline_inside_the_noise_says_so(cpu_facts):
    dense, fast = _declared(cpu_facts)
    fast = with_ratio(fast, dense, Ratio(1.02, 0.97, 1.08, 0.95, 10))
    assert "no clear difference" in headlines(to_frame_with_verdict([fast]))[0]


def test_headline_over_its_ceiling_is_a_measurement_problem(cpu_facts):
    fast = measured("moe", "forward", "dispatch_x", T, facts=cpu_facts, flops=8e9)
    fast = as_headline(with_peak(fast, 1.0, basis="dense"), "fp8.quantize_vs_copy")
    (line,) = headlines(to_frame_with_verdict([fast]))
    assert "measurement problem" in line and " of dense " in line  # its basis: a fraction of it


def test_skipped_headline_says_why(cpu_facts):
    rec = as_headline(
        skipped("fp8", "linear", "fp8_linear", "emulated: never timed", facts=cpu_facts),
        "fp8.linear_vs_bf16",
    )
    assert headlines(to_frame([rec])) == [
        "FP8 linear vs bf16 linear: skipped: emulated: never timed"
    ]


def test_a_ceiling_headline_shows_the_rates_fraction_not_the_time_ratio(cpu_facts):
    """A quantiser moves 5/8 of the bytes its fp32 copy does: at the same time its figure is 0.625
    of the copy's bandwidth, not the time ratio (1.5 here). The interval scales with it."""
    copy = measured("fp8", "quantize", "copy", T, facts=cpu_facts, bytes=8e6)
    quant = measured("fp8", "quantize", "q", T, facts=cpu_facts, bytes=5e6)
    quant = with_ratio(quant, copy, Ratio(1.5, 1.2, 1.8, 0.95, 10))
    quant = with_peak(quant, copy.gbps, basis="copy", rate="gbps")
    frame = to_frame_with_verdict([as_headline(quant, "fp8.quantize_vs_copy")])
    (row,) = headline_rows(frame, "cpu").to_dict("records")
    assert (row["kind"], row["against"]) == ("ceiling", "copy")
    assert row["value"] == pytest.approx(0.625)
    assert (row["low"], row["high"]) == pytest.approx((0.5, 0.75))
