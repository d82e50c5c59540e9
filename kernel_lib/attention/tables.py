"""Compact tables of attention records for the notebook (rounded; empty columns dropped)."""

from __future__ import annotations

import pandas as pd

from kernel_lib.records import Record, to_frame

COLUMNS = {
    "case": "case",
    "implementation": "implementation",
    "median_ms": "median_ms",
    "tflops": "tflops_needed",
    "metrics.dense_tflops": "tflops_dense_eq",
    "ratio_vs_baseline": "ratio_vs_best_sdpa",
    "baseline": "baseline",
    "metrics.block_sparsity_%": "block_sparsity_%",
    "metrics.compile_s": "compile_s",
    "metrics.speedup_vs_causal": "speedup_vs_causal",
    "metrics.ideal_speedup": "ideal_speedup",
}


def section_table(records: list[Record], section: str, *, digits: int = 3) -> pd.DataFrame:
    """The measured rows of one notebook section (patterns, backward, window_sweep, ...)."""
    frame = to_frame(records)
    frame = frame[(frame["status"] == "ok") & (frame["metrics.section"] == section)]
    columns = [c for c in COLUMNS if c in frame and frame[c].notna().any()]
    return frame[columns].rename(columns=COLUMNS).round(digits).reset_index(drop=True)


def skipped_cases(records: list[Record]) -> pd.DataFrame:
    """Every skipped or failed case with its reason: one row per (implementation, reason)."""
    frame = to_frame(records)
    frame = frame[frame["status"] != "ok"]
    grouped = frame.groupby(["implementation", "status", "reason"], sort=False)["case"]
    return grouped.apply(lambda cases: ", ".join(dict.fromkeys(cases))).reset_index()
