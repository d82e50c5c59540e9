"""What the attention notebook shows as tables: compact tables of its records (rounded; empty
columns dropped), and each pattern's density and the tiles flex can skip."""

from __future__ import annotations

import pandas as pd

from kernel_lib.attention import temporal_heads
from kernel_lib.attention.bench_gym import video_layout
from kernel_lib.attention.config import AttentionBenchConfig
from kernel_lib.attention.patterns import GYM_PATTERNS, PatternConfig
from kernel_lib.attention.reference import (
    dense_block_sparsity,
    dense_mask,
    mask_block_sparsity,
    temporal_heads_mask,
)
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


def gym_block_sparsity(cfg: AttentionBenchConfig, *, block_size: int) -> pd.DataFrame:
    """Percent of (query, key) tiles of `block_size` with no attended pair, from each gym
    pattern's dense reference mask at attn_seq_len (no compile)."""
    rows = [
        {
            "pattern": name,
            "block_sparsity_%": round(
                dense_block_sparsity(cfg.pattern(name), cfg.seq_len, block_size), 1
            ),
        }
        for name in GYM_PATTERNS
    ]
    return pd.DataFrame(rows).set_index("pattern")


def temporal_heads_sparsity(cfg: AttentionBenchConfig, *, block_size: int) -> pd.DataFrame:
    """Percent of (query block, key block) tiles skipped per head kind and over all heads: from
    the dense reference (`reference_%`) and from flex's per-head BlockMask (`flex_%`)."""
    layout, H = video_layout(cfg), cfg.heads
    dense = temporal_heads_mask(layout, H)
    kinds = {"spatial heads": slice(0, H, 2), "temporal heads": slice(1, H, 2), "all": slice(None)}
    rows = [
        {
            "heads": kind,
            "reference_%": round(mask_block_sparsity(dense[heads], block_size), 1),
            "flex_%": round(
                temporal_heads.block_sparsity(layout, H, block_size=block_size, heads=heads), 1
            ),
        }
        for kind, heads in kinds.items()
        if len(range(H)[heads])
    ]
    return pd.DataFrame(rows).set_index("heads")
