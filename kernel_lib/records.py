"""The one records schema: every measured, skipped or failed case, with its context."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from kernel_lib import ROOT
from kernel_lib.headlines import headline

if TYPE_CHECKING:
    from kernel_lib.checks import Check
    from kernel_lib.platform import DeviceFacts
    from kernel_lib.timing import Ratio, Timing

# ok: measured and checked; skipped: cannot run here; failed: raised; wrong: its check failed
STATUSES = ("ok", "skipped", "failed", "wrong")
RESULTS_SUFFIX = ".results.json"
# The runner hands each notebook kernel its run's identity through these.
RUN_ID_ENV, PLATFORM_ENV = "KERNEL_WORKBOOK_RUN_ID", "KERNEL_WORKBOOK_PLATFORM"
# ... and the folder its results go to (the report being staged): see `resolve_results_dir`.
RESULTS_DIR_ENV = "KERNEL_WORKBOOK_RESULTS_DIR"
# ... and the notebook it executes: each section's records are saved as it ends (`save_sections`).
NOTEBOOK_ENV = "KERNEL_WORKBOOK_NOTEBOOK"
# Where results go when nothing says otherwise (JupyterLab; papermill without an output path).
LOCAL_RESULTS_DIR = ROOT / "outputs" / "local"
_PROCESS_RUN_ID = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class Record:
    """One result. Rates are derived from FLOP/byte counts here, never typed in by callers."""

    topic: str
    case: str
    implementation: str
    device: str
    backend: str
    dtype: str | None = None
    shape: dict[str, float | str | None] = field(default_factory=dict)
    mode: str | None = None  # forward, forward_backward, compiled, ... (part of record_id)
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
    ratio_vs_baseline: float | None = (
        None  # baseline/this per interleaved round, median: > 1 faster
    )
    ratio_low: float | None = None  # its 95 % interval (order statistics of the rounds' ratios)
    ratio_high: float | None = None
    peak_mem_bytes: int | None = None
    status: str = "ok"
    reason: str = ""
    check: dict | None = None  # Check.as_dict() of the output at this shape, dtype and mode
    headline: str | None = None  # the topic declared this figure a headline (its key)
    variant: str | None = None  # the candidate chosen by measurement on this machine (variants.py)
    flags: tuple[str, ...] = ()  # measurement problems, e.g. a fraction_of_peak above 1
    samples_ms: tuple[float, ...] = ()  # every timed call
    round_medians_ms: tuple[float, ...] = ()  # per interleaving round: what ratios are paired by
    metrics: dict = field(default_factory=dict)  # topic-specific figures (errors, tokens/s, drops)
    # where the time went, profiled after timing (kernel_lib.profiling.capture): trace (relative
    # to the report), top ops, phases (ms per call), overhead (profiled / timed median)
    profile: dict | None = None
    allocator: str | None = None  # the host malloc in effect (CPU: kernel_lib.allocator.in_effect)
    platform: str | None = None  # stamped when saved: parameter file name
    run_id: str | None = None
    record_id: str | None = None

    @property
    def verdict(self) -> str | None:
        return verdict(self.ratio_vs_baseline, self.ratio_low, self.ratio_high)

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status={self.status!r} must be one of {STATUSES}")
        if self.status != "ok" and not self.reason:
            raise ValueError(f"a {self.status} record needs a reason")


RATIO_COLUMNS = ("ratio_vs_baseline", "ratio_low", "ratio_high")


def verdict(ratio: float | None, low: float | None, high: float | None) -> str | None:
    """How to read a ratio: 'faster' or 'slower' than the baseline only when its interval
    excludes 1, else 'no clear difference' (also when it has no interval)."""
    if ratio is None:
        return None
    if low is None or high is None or low <= 1.0 <= high:
        return "no clear difference"
    return "faster" if ratio > 1 else "slower"


def _context(facts: DeviceFacts) -> dict:
    return {
        "device": facts.name,
        "backend": facts.backend,
        "allocator": facts.versions.get("allocator"),
    }


def measured(
    topic: str,
    case: str,
    implementation: str,
    timing: Timing,
    *,
    facts: DeviceFacts,
    dtype: str | None = None,
    shape: dict | None = None,
    mode: str | None = None,
    flops: float | None = None,
    bytes: float | None = None,
    metrics: dict | None = None,
    check: Check | None = None,
) -> Record:
    """A record of a timed run; TFLOP/s and GB/s follow from `flops`/`bytes` and the median.
    Records of kernels carry the `check` of their output (kernel_lib.measure makes sure)."""
    seconds = timing.median_ms / 1e3
    return Record(
        topic=topic,
        case=case,
        implementation=implementation,
        dtype=dtype,
        shape=dict(shape or {}),
        mode=mode,
        check=check.as_dict() if check is not None else None,
        samples_ms=tuple(timing.samples_ms),
        round_medians_ms=tuple(timing.round_medians_ms),
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


def info(topic: str, case: str, implementation: str, *, facts: DeviceFacts, **fields) -> Record:
    """A result that is not a timing (memory, errors, losses, probes): metrics only."""
    return Record(
        topic=topic, case=case, implementation=implementation, **fields, **_context(facts)
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
    mode: str | None = None,
    metrics: dict | None = None,
) -> Record:
    """A case that could not run here; `reason` is shown to the reader as 'skipped: <reason>'."""
    return Record(
        topic=topic,
        case=case,
        implementation=implementation,
        dtype=dtype,
        shape=dict(shape or {}),
        mode=mode,
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
    mode: str | None = None,
) -> Record:
    """A case that raised where it should have run; `reason` says what."""
    return dataclasses.replace(
        skipped(
            topic, case, implementation, reason, facts=facts, dtype=dtype, shape=shape, mode=mode
        ),
        status="failed",
    )


def wrong(
    topic: str,
    case: str,
    implementation: str,
    check: Check,
    *,
    facts: DeviceFacts,
    dtype: str | None = None,
    shape: dict | None = None,
    mode: str | None = None,
) -> Record:
    """A case whose output failed its check: never timed, so no time is ever shown for it."""
    return dataclasses.replace(
        skipped(
            topic,
            case,
            implementation,
            check.describe(),
            facts=facts,
            dtype=dtype,
            shape=shape,
            mode=mode,
        ),
        status="wrong",
        check=check.as_dict(),
    )


def with_peak(record: Record, peak: float, *, basis: str, rate: str = "tflops") -> Record:
    """Set fraction_of_peak = record.<rate> / peak, where `peak` was measured (say how in `basis`)."""
    value = getattr(record, rate)
    if value is None or not peak:
        return record
    fraction = value / peak
    flags = record.flags
    if fraction > 1:  # faster than its own ceiling: the ceiling was under-measured
        flags += (
            f"fraction_of_peak {fraction:.2f} > 1: the measured ceiling ({basis}) is too low",
        )
    return dataclasses.replace(record, fraction_of_peak=fraction, peak_basis=basis, flags=flags)


def with_datasheet(
    record: Record, peak: float | None, *, basis: str, rate: str = "tflops"
) -> Record:
    """Set fraction_of_datasheet = record.<rate> / peak; `basis` names the datasheet and its source."""
    value = getattr(record, rate)
    if value is None or not peak:
        return record
    return dataclasses.replace(record, fraction_of_datasheet=value / peak, datasheet_basis=basis)


def with_ratio(record: Record, baseline: Record, ratio: Ratio) -> Record:
    """Set ratio_vs_baseline and its interval from an interleaved `timing.ratio` (baseline/this:
    > 1 is faster than the baseline). The only way a record gets a ratio."""
    return dataclasses.replace(
        record,
        baseline=baseline.implementation
        + (f" ({baseline.dtype})" if baseline.dtype != record.dtype else ""),
        ratio_vs_baseline=ratio.value,
        ratio_low=ratio.low if math.isfinite(ratio.low) else None,
        ratio_high=ratio.high if math.isfinite(ratio.high) else None,
    )


def as_headline(record: Record, key: str) -> Record:
    """Declare `record` one of its topic's headline figures (a subject against its baseline or
    ceiling, never a baseline or ceiling itself) under `key`, declared in kernel_lib.headlines."""
    if headline(key) is None:
        raise ValueError(f"headline {key!r} is not declared in kernel_lib.headlines")
    if (
        record.status == "ok"
        and record.ratio_vs_baseline is None
        and record.fraction_of_peak is None
    ):
        raise ValueError(
            f"headline {key!r}: {record.implementation} has no ratio or fraction to show"
        )
    return dataclasses.replace(record, headline=key)


def shape_key(shape: dict) -> str:
    """A shape as 'K=256,M=133,N=128': by name, so the same shape reads the same wherever built."""
    return ",".join(f"{k}={shape[k]}" for k in sorted(shape))


def shape_text(row: pd.Series) -> str:
    """A loaded record's shape (its `shape.*` columns) as `batch=1,head_dim=64,...`: by name, as in
    its record_id, so the same shape reads the same whatever order the columns were loaded in."""
    return shape_key(
        {
            k[6:]: int(v) if isinstance(v, float) and v.is_integer() else v
            for k, v in row.items()
            if k.startswith("shape.") and pd.notna(v)
        }
    )


def record_id(record: Record, platform: str) -> str:
    """platform/topic/case/implementation/dtype/mode/shape: stable across runs of one revision."""
    shape = shape_key(record.shape)
    parts = (
        platform,
        record.topic,
        record.case,
        record.implementation,
        record.dtype or "-",
        record.mode or "-",
        shape or "-",
    )
    return "/".join(str(p) for p in parts)


def run_context() -> tuple[str, str]:
    """(run_id, platform) of this run: from the runner's environment, else this process's own id
    and the detected platform ('unknown' where no parameter file matches)."""
    platform = os.environ.get(PLATFORM_ENV)
    if not platform:
        from kernel_lib.platform import detect_platform  # torch: only where no platform was set

        try:
            platform = detect_platform()
        except ValueError:
            platform = "unknown"
    return os.environ.get(RUN_ID_ENV, _PROCESS_RUN_ID), platform


def stamp(
    records: Iterable[Record], *, run_id: str | None = None, platform: str | None = None
) -> list[Record]:
    """Records with run_id, platform and record_id set (default: `run_context()`); raises
    ValueError when two records would share an id (they could not be matched across runs)."""
    if run_id is None or platform is None:
        default_run, default_platform = run_context()
        run_id, platform = run_id or default_run, platform or default_platform
    out, seen = [], {}
    for r in records:
        rid = record_id(r, platform)
        if rid in seen:
            raise ValueError(f"two records share record_id {rid!r}")
        seen[rid] = r
        out.append(dataclasses.replace(r, run_id=run_id, platform=platform, record_id=rid))
    return out


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


def resolve_results_dir(
    explicit: str | Path | None = "", output_path: str | Path | None = None
) -> Path:
    """The absolute folder a notebook's results go to, never the current directory by default:
    1. `explicit` (the notebook's `results_dir` parameter) when not empty;
    2. else the folder of `output_path`: the output notebook that papermill names in
       PAPERMILL_OUTPUT_PATH with `--inject-output-path` (a relative one is taken from the kernel's
       working directory: papermill's own unless `--cwd` moved it; '-' and URLs don't count);
    3. else $KERNEL_WORKBOOK_RESULTS_DIR, which the runner sets to its report folder;
    4. else `outputs/local/` in the repository (JupyterLab, or papermill without 1 or 2)."""
    if explicit:
        return Path(explicit).expanduser().resolve()
    if output_path and str(output_path) != "-" and "://" not in str(output_path):
        return Path(output_path).expanduser().resolve().parent
    if env := os.environ.get(RESULTS_DIR_ENV):
        return Path(env).expanduser().resolve()
    return LOCAL_RESULTS_DIR


def save_notebook_records(records: Iterable[Record], name: str, namespace: dict) -> None:
    """`save_records` from a notebook, which passes its `globals()`: its `results_dir` parameter
    and papermill's PAPERMILL_OUTPUT_PATH decide where (`resolve_results_dir`). Prints one line
    saying where (relative to the working directory when inside it, as in a report)."""
    directory = resolve_results_dir(
        namespace.get("results_dir", ""), namespace.get("PAPERMILL_OUTPUT_PATH")
    )
    path = save_records(records, name, directory)
    cwd = Path.cwd().resolve()
    shown = path.relative_to(cwd) if path.is_relative_to(cwd) else path
    print(f"results: {shown} and {shown.with_suffix('.csv').name}")


def save_sections(records: Iterable[Record]) -> Path | None:
    """In a notebook the runner executes (it names the notebook and its report folder): the
    records made so far saved as the notebook's results, so that a notebook stopped later keeps
    the sections it finished. Elsewhere (by hand, `bench`, `check`) nothing: None."""
    name, directory = os.environ.get(NOTEBOOK_ENV), os.environ.get(RESULTS_DIR_ENV)
    return save_records(records, name, directory) if name and directory else None


def save_records(
    records: Iterable[Record], name: str, directory: str | Path | None = None
) -> Path:
    """Stamp the records (`stamp`) and write `<name>.results.json` and `<name>.results.csv` into
    `directory` (default: `resolve_results_dir()`, the runner's report folder or outputs/local/);
    return the JSON path."""
    records = stamp(records)
    directory = Path(directory) if directory is not None else resolve_results_dir()
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
    return to_frame_with_verdict(rows)


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
