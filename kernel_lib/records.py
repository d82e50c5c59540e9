"""The one records schema: every measured, skipped or failed case, with its context."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

import pandas as pd

if TYPE_CHECKING:
    from kernel_lib.platform import DeviceFacts
    from kernel_lib.timing import Timing

STATUSES = ("ok", "skipped", "failed")
RESULTS_SUFFIX = ".results.json"


@dataclass(frozen=True)
class Record:
    """One result. Rates are derived from FLOP/byte counts here, never typed in by callers."""

    topic: str
    case: str
    implementation: str
    device: str
    backend: str
    dtype: str | None = None
    shape: dict = field(default_factory=dict)
    median_ms: float | None = None
    p10_ms: float | None = None
    p90_ms: float | None = None
    min_ms: float | None = None
    reps: int | None = None
    method: str | None = None
    flops: float | None = None  # work really executed by this implementation
    bytes: float | None = None  # bytes read + written
    tflops: float | None = None
    gbps: float | None = None
    fraction_of_peak: float | None = None  # over a *measured* ceiling named by peak_basis
    peak_basis: str | None = None
    fraction_of_datasheet: float | None = None  # over a datasheet figure named by datasheet_basis
    datasheet_basis: str | None = None
    baseline: str | None = None
    ratio_vs_baseline: float | None = None  # baseline median / this median: > 1 is faster
    peak_mem_bytes: int | None = None
    status: str = "ok"
    reason: str = ""
    metrics: dict = field(default_factory=dict)  # topic-specific figures (errors, tokens/s, drops)

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status={self.status!r} must be one of {STATUSES}")
        if self.status != "ok" and not self.reason:
            raise ValueError(f"a {self.status} record needs a reason")


def _context(facts: DeviceFacts) -> dict:
    return {"device": facts.name, "backend": facts.backend}


def measured(
    topic: str,
    case: str,
    implementation: str,
    timing: Timing,
    *,
    facts: DeviceFacts,
    dtype: str | None = None,
    shape: dict | None = None,
    flops: float | None = None,
    bytes: float | None = None,
    metrics: dict | None = None,
) -> Record:
    """A record of a timed run; TFLOP/s and GB/s follow from `flops`/`bytes` and the median."""
    seconds = timing.median_ms / 1e3
    return Record(
        topic=topic,
        case=case,
        implementation=implementation,
        dtype=dtype,
        shape=dict(shape or {}),
        median_ms=timing.median_ms,
        p10_ms=timing.p10_ms,
        p90_ms=timing.p90_ms,
        min_ms=timing.min_ms,
        reps=timing.reps,
        method=timing.method,
        flops=flops,
        bytes=bytes,
        tflops=flops / seconds / 1e12 if flops and seconds > 0 else None,
        gbps=bytes / seconds / 1e9 if bytes and seconds > 0 else None,
        peak_mem_bytes=timing.peak_mem_bytes,
        metrics=dict(metrics or {}),
        **_context(facts),
    )


def skipped(
    topic: str,
    case: str,
    implementation: str,
    reason: str,
    *,
    facts: DeviceFacts,
    dtype: str | None = None,
    shape: dict | None = None,
    metrics: dict | None = None,
) -> Record:
    """A case that could not run here; `reason` is shown to the reader as 'skipped: <reason>'."""
    return Record(
        topic=topic,
        case=case,
        implementation=implementation,
        dtype=dtype,
        shape=dict(shape or {}),
        status="skipped",
        reason=reason,
        metrics=dict(metrics or {}),
        **_context(facts),
    )


def failed(
    topic: str,
    case: str,
    implementation: str,
    reason: str,
    *,
    facts: DeviceFacts,
    dtype: str | None = None,
    shape: dict | None = None,
) -> Record:
    """A case that ran and went wrong (an error, or a wrong answer); `reason` says what."""
    return dataclasses.replace(
        skipped(topic, case, implementation, reason, facts=facts, dtype=dtype, shape=shape),
        status="failed",
    )


def with_peak(record: Record, peak: float, *, basis: str, rate: str = "tflops") -> Record:
    """Set fraction_of_peak = record.<rate> / peak, where `peak` was measured (say how in `basis`)."""
    value = getattr(record, rate)
    if value is None or not peak:
        return record
    return dataclasses.replace(record, fraction_of_peak=value / peak, peak_basis=basis)


def with_datasheet(record: Record, peak: float | None, *, basis: str, rate: str = "tflops") -> Record:
    """Set fraction_of_datasheet = record.<rate> / peak; `basis` names the datasheet and its source."""
    value = getattr(record, rate)
    if value is None or not peak:
        return record
    return dataclasses.replace(record, fraction_of_datasheet=value / peak, datasheet_basis=basis)


def with_baseline(record: Record, baseline: Record) -> Record:
    """Set ratio_vs_baseline = baseline median / this median (> 1: faster than the baseline)."""
    if record.median_ms is None or baseline.median_ms is None:
        return dataclasses.replace(record, baseline=baseline.implementation)
    return dataclasses.replace(
        record,
        baseline=baseline.implementation,
        ratio_vs_baseline=baseline.median_ms / record.median_ms,
    )


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


def save_records(records: Iterable[Record], name: str, directory: str | Path = ".") -> Path:
    """Write `<name>.results.json` and `<name>.results.csv` into `directory`; return the JSON path."""
    records = list(records)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}{RESULTS_SUFFIX}"
    path.write_text(json.dumps(to_dicts(records), indent=1) + "\n")
    to_frame(records).to_csv(directory / f"{name}.results.csv", index=False)
    return path


def load_records(path: str | Path) -> pd.DataFrame:
    """Records from one `.results.json` file, or from every one in a folder, as a DataFrame."""
    path = Path(path)
    files = sorted(path.glob(f"*{RESULTS_SUFFIX}")) if path.is_dir() else [path]
    rows = [row for f in files for row in json.loads(f.read_text())]
    return to_frame(rows)


SUMMARY_COLUMNS = [
    "case", "implementation", "dtype", "median_ms", "p10_ms", "p90_ms", "reps", "tflops", "gbps",
    "fraction_of_peak", "ratio_vs_baseline", "baseline", "status", "reason",
]  # fmt: skip


def summary_table(records: Iterable[Record], *, digits: int = 3) -> pd.DataFrame:
    """The columns a reader scans first, rounded; empty columns dropped."""
    frame = to_frame(records)
    columns = [c for c in SUMMARY_COLUMNS if c in frame and frame[c].notna().any()]
    return frame[columns].round(digits)
