import math

import pytest
import torch

from kernel_lib.fp8.numerics import (
    error_metrics,
    quantization_error_table,
    relative_errors,
    sample_tensor,
)


def test_error_metrics_known_values():
    ref = torch.ones(100)
    m = error_metrics(ref, ref * 1.01)
    assert m["rel_error"] == pytest.approx(0.01)
    assert m["sqnr_db"] == pytest.approx(40.0)
    assert error_metrics(ref, ref)["sqnr_db"] == math.inf


def test_sqnr_matches_the_published_anchor():
    # perf_anchors.md 2.1: tensorwise N(0,1): e4m3 31.5 dB, e5m2 25.6 dB (4096^2; here 512^2).
    table = quantization_error_table(
        sample_tensor("normal", (512, 512)),
        formats=["e4m3fn", "e5m2"],
        granularities=["tensorwise"],
    ).set_index("format")
    assert table.loc["e4m3fn", "sqnr_db"] == pytest.approx(31.5, abs=0.5)
    assert table.loc["e5m2", "sqnr_db"] == pytest.approx(25.6, abs=0.5)


def test_rowwise_beats_tensorwise_on_outlier_rows():
    table = quantization_error_table(
        sample_tensor("outlier_rows", (256, 256)),
        formats=["e4m3fn"],
        granularities=["tensorwise", "rowwise"],
    ).set_index("granularity")
    assert (
        table.loc["rowwise", "median_row_sqnr_db"]
        > table.loc["tensorwise", "median_row_sqnr_db"] + 3
    )


def test_relative_errors_frame_and_bad_kind():
    frame = relative_errors(
        sample_tensor("lognormal", (32, 32)), formats=["e4m3fn", "e5m2"], granularity="rowwise"
    )
    assert set(frame["format"]) == {"e4m3fn", "e5m2"} and (frame["rel_error"] >= 0).all()
    with pytest.raises(ValueError, match="kind"):
        sample_tensor("uniform", (4, 4))
