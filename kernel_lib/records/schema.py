"""The one records schema: a `Record` (every measured, skipped or failed case, with its context)
and how to read its ratio (`verdict`)."""

from __future__ import annotations

from dataclasses import dataclass, field

# ok: measured and checked; skipped: cannot run here; failed: raised; wrong: its check failed
STATUSES = ("ok", "skipped", "failed", "wrong")


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
    # a user's kernel (kernel_lib.plugins): its slot, name and the code that ran; None: ours
    plugin: dict | None = None
    allocator: str | None = None  # the host malloc in effect (CPU: kernel_lib.allocator.in_effect)
    lock: str | None = None  # stamped when saved: the environment's lock (kernel_lib.locks)
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
