"""Compact tables of attention records for the notebook (rounded; empty columns dropped)."""

from __future__ import annotations

import pandas as pd

from kernel_lib.attention.patterns import PatternConfig
from kernel_lib.attention.reference import dense_block_sparsity, dense_mask
from kernel_lib.records import Record, to_frame

COLUMNS = {
    "case": "case",
    "implementation": "implementation",
    "mode": "mode",
    "dtype": "dtype",
    "variant": "variant",
    "median_ms": "median_ms",
    "tflops": "tflops_needed",
    "metrics.dense_tflops": "tflops_dense_eq",
    "ratio_vs_baseline": "ratio_vs_baseline",
    "ratio_low": "ratio_low",
    "ratio_high": "ratio_high",
    "baseline": "baseline",
    "metrics.block_sparsity_%": "block_sparsity_%",
    "metrics.new_graphs": "new_graphs",
    "metrics.ideal_speedup": "ideal_speedup",
}


def section_table(records: list[Record], section: str, *, digits: int = 3) -> pd.DataFrame:
    """The measured rows of one notebook section (flex_variants, patterns, backward,
    window_sweep, seq_sweep, compile)."""
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


def pattern_table(configs: list[PatternConfig], *, seq_len: int, block_size: int) -> pd.DataFrame:
    """Per pattern: share of (query, key) pairs attended and of tiles flex can skip, from the
    dense reference mask, in whole percent (stable text for nbval)."""
    return pd.DataFrame({
        "pattern": [c.name for c in configs],
        "density_%": [round(100 * float(dense_mask(c, seq_len).float().mean())) for c in configs],
        "block_sparsity_%": [round(dense_block_sparsity(c, seq_len, block_size)) for c in configs],
    })  # fmt: skip
