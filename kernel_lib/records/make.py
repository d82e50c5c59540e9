"""Records made: timed, info, skipped, failed or wrong, and the figures set on them afterwards
(fractions of a peak, a ratio to a baseline, a headline key)."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

from kernel_lib.headlines import headline
from kernel_lib.records.schema import Record

if TYPE_CHECKING:
    from kernel_lib.checks import Check
    from kernel_lib.platform import DeviceFacts
    from kernel_lib.timing import Ratio, Timing


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
