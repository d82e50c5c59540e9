"""The profiled pass: after a section was timed, never while it is, each headline record's timed
call (every ok record's with profile mode `all`) runs a few more times under `torch.profiler`
(CPU, and CUDA/ROCm/XPU where torch supports them). The record gets `profile`: its Chrome trace
(gzipped, beside the report's results: `<notebook>.trace.<name>.json.gz`, a path relative to the
report), the top ops by self time (device kernels where a device ran any), its phases in ms per
call, and the overhead: a profiled call's time over the timed median.

`measure.check_then_time` hands over each timed candidate's call (`pending.put`); `suite.Suite.run`
profiles its section's records (`profiled`)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import SimpleNamespace

import torch

from kernel_lib.checks import error_line
from kernel_lib.profiling.pending import forget, identity, profile_mode, take
from kernel_lib.profiling.phases import PREFIX, coverage
from kernel_lib.records import NOTEBOOK_ENV, Record, resolve_results_dir
from kernel_lib.timing import synchronize

TOP = 10
OUTSIDE = "(in no op: Python, C called through ctypes)"
PROFILED_S = 0.2  # profiled calls take about this long in all: 2 to 10 calls
# Kineto's own log lines (two per profile, on stderr: into every notebook's outputs) stay out;
# read when the first profile starts, so a user's own setting wins.
KINETO_QUIET = ("KINETO_LOG_LEVEL", "6")


def _wanted(record: Record, mode: str) -> bool:
    return (
        record.status == "ok"
        and bool(record.median_ms)
        and record.profile is None  # profiled where it was timed (another process: a rank)
        and (mode == "all" or record.headline is not None)
    )


def profiled(records: Iterable[Record]) -> list[Record]:
    """`records` with a `profile` where the mode wants one (headlines, or all ok records), each
    trace written into the results folder; the calls put there forgotten. A profile that fails
    costs only its own record a flag."""
    records = list(records)
    try:
        mode = profile_mode()
        if mode == "off":
            return records
        directory = resolve_results_dir()
        return [_profiled(r, directory) if _wanted(r, mode) else r for r in records]
    finally:
        forget()


def trace_name(record: Record) -> str:
    """`<notebook>.trace.<headline key, or a hash of the record's id>.json.gz`: beside the
    notebook's results, so the runner keeps or sets it aside with them."""
    notebook = os.environ.get(NOTEBOOK_ENV) or record.topic
    slug = record.headline or hashlib.sha1(identity(record).encode()).hexdigest()[:12]
    slug = re.sub(r"[^\w.-]", "_", slug)
    return f"{notebook}.trace.{slug}.json.gz"


def _profiled(record: Record, directory: Path) -> Record:
    pending = take(record)
    if pending is None:
        why = "profile: no timed call of measure.check_then_time in this section to profile"
        return dataclasses.replace(record, flags=record.flags + (why,))
    try:
        fn, device = pending
        directory.mkdir(parents=True, exist_ok=True)
        trace = directory / trace_name(record)
        profile = profile_call(fn, device, record.median_ms, trace)
    except Exception as err:  # noqa: BLE001 - a profile that fails costs only its own record
        why = "profile failed: " + error_line(err)
        return dataclasses.replace(record, flags=record.flags + (why,))
    profile["trace"] = trace.name  # relative to the report: it lies beside the results
    flags = tuple(f"profile: {p}" for p in coverage(record.implementation, profile["phases"]))
    return dataclasses.replace(record, profile=profile, flags=record.flags + flags)


def _top(prof, calls: int, wall_ms: float) -> list[dict]:
    """The TOP ops by self time, device time where a device ran any, ms per profiled call. On
    the host, what no op covers (Python, a C kernel called through ctypes) is an entry too:
    inside a phase as the phase's own self time, outside any as OUTSIDE."""
    ops = list(prof.key_averages())
    on_device = any(a.self_device_time_total > 0 for a in ops)
    self_us = {
        a.key: a.self_device_time_total if on_device else a.self_cpu_time_total for a in ops
    }
    if not on_device:
        covered = sum(e.cpu_time_total for e in prof.events() if e.cpu_parent is None)
        self_us[OUTSIDE] = max(wall_ms * 1e3 - covered, 0.0)
        ops.append(SimpleNamespace(key=OUTSIDE, count=calls))
    total = sum(self_us.values()) or 1.0
    ranked = sorted((a for a in ops if self_us[a.key] > 0), key=lambda a: -self_us[a.key])
    return [
        {
            "name": a.key,
            "calls": a.count / calls,
            "self_ms": self_us[a.key] / 1e3 / calls,
            "share": self_us[a.key] / total,
        }
        for a in ranked[:TOP]
    ]


def _phases(averages, calls: int) -> dict[str, float]:
    """Each phase's inclusive time per profiled call in ms (device time where it has any)."""
    return {
        a.key.removeprefix(PREFIX): (a.device_time_total or a.cpu_time_total) / 1e3 / calls
        for a in averages
        if a.key.startswith(PREFIX)
    }


def profile_call(
    fn: Callable[[], object], device: torch.device | str, median_ms: float, trace: Path
) -> dict:
    """Profile a few calls of `fn` (after one unprofiled warm call): {"top", "phases",
    "overhead", "calls"}; the Chrome trace written gzipped to `trace`."""
    calls = max(2, min(10, round(PROFILED_S * 1e3 / median_ms)))
    os.environ.setdefault(*KINETO_QUIET)
    fn()
    synchronize(device)
    with torch.profiler.profile(activities=list(torch.profiler.supported_activities())) as prof:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        synchronize(device)
        wall_ms = (time.perf_counter() - start) * 1e3
    # torch gzips a trace whose name ends in .gz; written whole, then put in place
    written = trace.with_name(f".writing-{os.getpid()}.{trace.name}")
    prof.export_chrome_trace(str(written))
    os.replace(written, trace)
    return {
        "top": _top(prof, calls, wall_ms),
        "phases": _phases(prof.key_averages(), calls),
        "overhead": wall_ms / calls / median_ms,
        "calls": calls,
    }
