"""The one timing harness: warm-up, many reps, median and spread, synchronised per backend."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import torch
from tqdm import tqdm

# Larger than any L2 we target (H100 50 MB, MI300X Infinity Cache 256 MB); zeroed between reps.
_FLUSH_BYTES = 512 * 2**20


@dataclass(frozen=True)
class Timing:
    """Per-call wall time of `fn` in milliseconds; `method` says how it was measured."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    min_ms: float
    reps: int
    method: str
    peak_mem_bytes: int | None
    samples_ms: tuple[float, ...] = ()  # every timed call, in order
    round_medians_ms: tuple[float, ...] = ()  # per interleaving round (time_interleaved only)


@dataclass(frozen=True)
class Ratio:
    """baseline / subject per interleaving round: its median and a distribution-free interval.

    Each round times both functions back to back, so a round's ratio is one paired observation;
    the interval is the order-statistic confidence interval of the median of those ratios.
    """

    value: float
    low: float
    high: float
    confidence: float
    rounds: int


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(median, low, high): the widest-needed order statistics x(k), x(n+1-k) whose coverage of
    the median is >= `confidence` under the binomial(n, 1/2) law; with too few values to reach
    it (n < 6 at 95 %), the interval is (-inf, inf)."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("median_interval of no values")
    median = statistics.median(ordered)
    k = 0  # largest k with P(x(k) <= median < x(n+1-k)) >= confidence
    for j in range(1, n // 2 + 1):
        tail = sum(math.comb(n, i) for i in range(j)) / 2**n
        if 1 - 2 * tail >= confidence:
            k = j
    if k == 0:
        return median, -math.inf, math.inf
    return median, ordered[k - 1], ordered[n - k]


def ratio(baseline_rounds_ms, subject_rounds_ms, *, confidence: float = 0.95) -> Ratio:
    """baseline / subject (> 1: subject is faster) from the per-round medians of two functions
    timed in one `time_interleaved` call (Timing.round_medians_ms), paired by round."""
    pairs = list(zip(baseline_rounds_ms, subject_rounds_ms))
    if not pairs or len(baseline_rounds_ms) != len(subject_rounds_ms):
        raise ValueError(
            "a ratio needs the rounds of two functions timed in one time_interleaved call"
        )
    value, low, high = median_interval([b / s for b, s in pairs], confidence)
    return Ratio(value, low, high, confidence, len(pairs))


def device_kind(device: torch.device | str) -> str:
    """'cuda' (NVIDIA and ROCm), 'xpu', 'xla', 'mps' or 'cpu'."""
    return torch.device(device).type


def synchronize(device: torch.device | str) -> None:
    """Block until all work queued on `device` has finished."""
    kind = device_kind(device)
    if kind == "cuda":
        torch.cuda.synchronize(device)
    elif kind == "xpu":
        torch.xpu.synchronize(device)
    elif kind == "mps":
        torch.mps.synchronize()
    elif kind == "xla":
        import torch_xla  # only present in the TPU/XLA environment

        torch_xla.sync()
        torch_xla._XLAC._xla_wait_device_ops(devices=[])


def _percentile(sorted_ms: list[float], q: float) -> float:
    """Linear-interpolated percentile of an ascending list (q in [0, 1])."""
    pos = q * (len(sorted_ms) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_ms) - 1)
    return sorted_ms[lo] + (sorted_ms[hi] - sorted_ms[lo]) * (pos - lo)


def _reset_peak_memory(kind: str, device: torch.device) -> None:
    if kind == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    elif kind == "xpu":
        torch.xpu.reset_peak_memory_stats(device)


def _peak_memory(kind: str, device: torch.device) -> int | None:
    """Allocator high-water mark; None where the backend has no allocator statistics (CPU, XLA)."""
    if kind == "cuda":
        return torch.cuda.max_memory_allocated(device)
    if kind == "xpu":
        return torch.xpu.max_memory_allocated(device)
    return None


def time_fn(
    fn: Callable[[], object],
    *,
    device: torch.device | str = "cpu",
    warmup: int = 3,
    reps: int | None = None,
    min_time_s: float = 0.2,
    max_reps: int = 1000,
    flush_cache: bool = False,
) -> Timing:
    """Time `fn()` on `device`.

    Runs `warmup` untimed calls, then `reps` timed calls, or (reps=None) as many as fit in
    `min_time_s`, at least 5 and at most `max_reps`. CUDA/ROCm use device events around each call;
    other backends synchronise and read `time.perf_counter`. Each call's result is held until that
    sync: on a lazy device (XLA) a result dropped before the sync is never computed. `flush_cache`
    zeroes a 512 MiB buffer before each GPU rep so every rep starts with a cold L2 (the zeroing is
    outside the timed span).
    """
    if reps is not None and reps < 1:
        raise ValueError(f"reps={reps} must be >= 1")
    if warmup < 0:
        raise ValueError(f"warmup={warmup} must be >= 0")
    device = torch.device(device)
    kind = device_kind(device)
    flush = None
    if flush_cache and kind in ("cuda", "xpu"):
        flush = torch.empty(_FLUSH_BYTES, dtype=torch.uint8, device=device)

    _warm_up(fn, warmup, device)
    _reset_peak_memory(kind, device)
    if reps is None:
        reps = _reps_for(fn, device, min_time_s, max_reps, at_least=5)
    samples = _samples(fn, device, reps, flush)
    return _summary(samples, _method(kind, flush, ""), _peak_memory(kind, device))


def time_interleaved(
    fns: dict[Hashable, Callable[[], object]],
    *,
    device: torch.device | str = "cpu",
    rounds: int = 10,
    warmup: int = 3,
    min_time_s: float = 0.2,
    max_reps: int = 1000,
    progress: str | None = None,
) -> dict[Hashable, Timing]:
    """Time several functions in alternation: after each one's warm-up, `rounds` rounds that run
    every fn for its share of `min_time_s` (per fn, as in `time_fn`), in reversed order every
    other round so no fn always runs first. On a shared or throttling machine, load that comes
    and goes then lands on all of them alike, so their ratios hold even when the absolute times
    drift; `ratio` pairs the rounds' medians. `progress`: a tqdm bar's title."""
    if rounds < 1:
        raise ValueError(f"rounds={rounds} must be >= 1")
    device = torch.device(device)
    kind = device_kind(device)
    bar = tqdm(total=len(fns) + rounds, desc=progress, disable=progress is None)
    reps = {}
    for name, fn in fns.items():
        _warm_up(fn, warmup, device)
        reps[name] = max(1, _reps_for(fn, device, min_time_s, max_reps, at_least=rounds) // rounds)
        bar.update()
    samples = {name: [] for name in fns}
    medians = {name: [] for name in fns}
    order = list(fns)
    for index in range(rounds):
        for name in order if index % 2 == 0 else order[::-1]:
            got = _samples(fns[name], device, reps[name], None)
            samples[name] += got
            medians[name].append(statistics.median(got))
        bar.update()
    bar.close()
    others = len(fns) - 1
    method = _method(
        kind, None, f", interleaved over {rounds} rounds with {others} other functions"
    )
    return {
        name: _summary(s, method, None, round_medians=medians[name]) for name, s in samples.items()
    }


def merge_rounds(timings: list[Timing], method: str) -> Timing:
    """One Timing from the rounds of a function timed by separate `time_fn` calls (one process
    per round, interleaved with other functions by the caller): every sample, a median per round,
    so `ratio` pairs them by round as it does `time_interleaved`'s."""
    if not timings:
        raise ValueError("merge_rounds of no timings")
    samples = [s for t in timings for s in t.samples_ms]
    return _summary(samples, method, None, round_medians=[t.median_ms for t in timings])


def _warm_up(fn: Callable[[], object], warmup: int, device: torch.device) -> None:
    result = None
    for _ in range(warmup):
        result = fn()
    synchronize(device)
    del result


def _reps_for(
    fn: Callable[[], object],
    device: torch.device,
    min_time_s: float,
    max_reps: int,
    *,
    at_least: int,
) -> int:
    """How many calls of fn fit in min_time_s (one timed call decides), within [at_least, max_reps]."""
    start = time.perf_counter()
    result = fn()
    synchronize(device)
    del result
    once = max(time.perf_counter() - start, 1e-7)
    return int(min(max_reps, max(at_least, min_time_s / once)))


def _samples(
    fn: Callable[[], object], device: torch.device, reps: int, flush: torch.Tensor | None
) -> list[float]:
    """Per-call milliseconds of `reps` calls: CUDA events, or a sync and `perf_counter` per call."""
    if device_kind(device) == "cuda":
        return _cuda_event_samples(fn, reps, flush)
    samples = []
    for _ in range(reps):
        if flush is not None:
            flush.zero_()
            synchronize(device)
        start = time.perf_counter()
        result = fn()
        synchronize(device)
        samples.append((time.perf_counter() - start) * 1e3)
        del result
    return samples


def _method(kind: str, flush: torch.Tensor | None, suffix: str) -> str:
    method = "cuda events" if kind == "cuda" else f"perf_counter + {kind} synchronize"
    return method + (", L2 flushed" if flush is not None else "") + suffix


def _summary(
    samples: list[float], method: str, peak_mem_bytes: int | None, *, round_medians=()
) -> Timing:
    ordered = sorted(samples)
    return Timing(
        median_ms=statistics.median(ordered),
        p10_ms=_percentile(ordered, 0.1),
        p90_ms=_percentile(ordered, 0.9),
        min_ms=ordered[0],
        reps=len(ordered),
        method=method,
        peak_mem_bytes=peak_mem_bytes,
        samples_ms=tuple(samples),
        round_medians_ms=tuple(round_medians),
    )


def _cuda_event_samples(fn: Callable[[], object], reps: int, flush: torch.Tensor | None):
    """Per-rep milliseconds from CUDA events (ROCm builds map these to HIP events)."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for start, end in zip(starts, ends):
        if flush is not None:
            flush.zero_()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in zip(starts, ends)]
