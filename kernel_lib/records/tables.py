"""Records as plain dicts and DataFrames: `shape.*` and `metrics.*` flattened, each ratio's
verdict, the summary a reader scans first."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

import pandas as pd

from kernel_lib.records.schema import RATIO_COLUMNS, Record, verdict


def _jsonable(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def to_dicts(records: Iterable[Record]) -> list[dict]:
    """Plain JSON-ready dicts (non-finite floats become null)."""
    return [_jsonable(dataclasses.asdict(r)) for r in records]


def to_frame(records: Iterable[Record] | list[dict]) -> pd.DataFrame:
    """A DataFrame with `shape.*` and `metrics.*` flattened into columns."""
    rows = [r if isinstance(r, dict) else dataclasses.asdict(r) for r in records]
    if not rows:
        return pd.DataFrame(columns=[f.name for f in dataclasses.fields(Record)])
    return pd.json_normalize(rows)


SUMMARY_COLUMNS = [
    "case", "implementation", "dtype", "mode", "median_ms", "p10_ms", "p90_ms", "reps", "tflops",
    "gbps", "fraction_of_peak", "ratio_vs_baseline", "ratio_low", "ratio_high", "verdict",
    "baseline", "check.pass", "status", "reason",
]  # fmt: skip


def to_frame_with_verdict(records: Iterable[Record] | list[dict]) -> pd.DataFrame:
    """to_frame plus the `verdict` column (how to read each ratio)."""
    frame = to_frame(records)
    if len(frame) and "ratio_vs_baseline" in frame:
        cols = [frame.get(c, pd.Series(index=frame.index)) for c in RATIO_COLUMNS]
        frame["verdict"] = [
            verdict(*(None if pd.isna(v) else v for v in vals)) for vals in zip(*cols)
        ]
    return frame


def summary_table(records: Iterable[Record], *, digits: int = 3) -> pd.DataFrame:
    """The columns a reader scans first, rounded; empty columns dropped."""
    frame = to_frame_with_verdict(records)
    columns = [c for c in SUMMARY_COLUMNS if c in frame and frame[c].notna().any()]
    return frame[columns].round(digits)
