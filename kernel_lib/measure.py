"""Check, then time: the one path from a benchmark case to its records.

A `Candidate` cannot be built without its check, and `compare` calls each candidate once, checks
that very output against its reference (same shape, dtype and mode as the timing), and times only
the candidates that passed, all interleaved in one process (`time_interleaved`), so every ratio
against the baseline comes with an interval from paired rounds. A correctness table shown in a
notebook (checked, never timed) becomes records through `check_table_records`.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from kernel_lib import records as rec
from kernel_lib.checks import Check, Unsupported, error_line
from kernel_lib.platform import DeviceFacts
from kernel_lib.profiling.pending import put
from kernel_lib.timing import ratio, time_interleaved

if TYPE_CHECKING:
    import pandas as pd

MIN_ROUNDS = 6  # the fewest paired rounds whose order statistics give a 95 % interval (96.9 %)
# TEST ONLY (kernel_lib.sensitivity, `ab --slow-b`): "implementation=fraction", several
# comma-separated, makes each named candidate's timed calls take 1 + its fraction times as long,
# and flags its records so they never pass as real figures.
TEST_SLOWDOWN_ENV = "KERNEL_WORKBOOK_TEST_SLOWDOWN"


@dataclass(frozen=True)
class Case:
    """What is being measured: the part of every record's identity its candidates share."""

    topic: str
    case: str
    shape: dict
    dtype: str | None = None
    mode: str | None = None  # forward, forward_backward, ... (record_id tells modes apart)


@dataclass(frozen=True)
class Candidate:
    """One implementation of a case. `fn()` is the timed call; `check(fn())` compares its result
    with an independent reference (kernel_lib.checks.against); the first call raising
    checks.Unsupported (or running out of memory) makes the record `skipped`, any other error
    `failed`."""

    implementation: str
    fn: Callable[[], object]
    check: Callable[[object], Check]
    flops: float | None = None
    bytes: float | None = None
    dtype: str | None = None  # when it differs from the case's (a baseline in another dtype)
    metrics: dict = field(default_factory=dict)
    plugin: dict | None = None  # a user's kernel: its Plugin.source, carried by its records

    def __post_init__(self):
        if not callable(self.check):
            raise TypeError(f"{self.implementation}: a candidate is never timed without its check")


def slowdowns(text: str) -> dict[str, float]:
    """A TEST_SLOWDOWN_ENV value ("a=0.1,b=0.2") as {implementation: fraction} ({} for "");
    ValueError naming the variable when it is malformed."""
    knobs = {}
    for knob in text.split(",") if text else ():
        name, _, fraction = (part.strip() for part in knob.partition("="))
        try:
            knobs[name] = float(fraction)
        except ValueError:
            name = ""
        if not name:
            raise ValueError(
                f"{TEST_SLOWDOWN_ENV}={text!r} must look like "
                "IMPLEMENTATION=FRACTION[,IMPL=FRACTION...]"
            )
    return knobs


def injected_slowdown(implementation: str) -> float:
    """The slowdown TEST_SLOWDOWN_ENV injects into `implementation` (0.0: none)."""
    return slowdowns(os.environ.get(TEST_SLOWDOWN_ENV, "")).get(implementation, 0.0)


def _slowed(fn: Callable[[], object], fraction: float) -> Callable[[], object]:
    """`fn` followed by a busy-wait for `fraction` of that call's own time: the same slowdown
    on every call, as if the kernel repeated that share of its work (host time: CPU kernels)."""
    if not fraction:
        return fn

    def slowed():
        start = time.perf_counter()
        out = fn()
        until = time.perf_counter() + fraction * (time.perf_counter() - start)
        while time.perf_counter() < until:
            pass
        return out

    return slowed


def _first_call(candidate: Candidate) -> tuple[Check | None, str | None, str | None]:
    """(check, None, None); (None, skip reason, None) when the path cannot run here; or (None,
    None, error line) when it raised anything else (a compile error, a RuntimeError at this
    shape): that candidate's record is `failed`, the others' go on."""
    try:
        return candidate.check(candidate.fn()), None, None
    except Unsupported as why:
        return None, str(why), None
    except torch.OutOfMemoryError as why:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return None, "out of memory: " + str(why).splitlines()[0][:200], None
    except Exception as err:  # noqa: BLE001 - one failing candidate costs only its own record
        return None, None, error_line(err)


class _Raised(Exception):
    """A timed call of candidate `index` raised `error` (after its checked first call)."""

    def __init__(self, index: int, error: Exception):
        super().__init__(index, error)
        self.index, self.error = index, error


def _reporting(index: int, fn: Callable[[], object]) -> Callable[[], object]:
    def call():
        try:
            return fn()
        except Exception as err:  # noqa: BLE001 - re-raised with the candidate it came from
            raise _Raised(index, err) from err

    return call


def check_then_time(
    case: Case,
    candidates: list[Candidate | rec.Record],
    *,
    facts: DeviceFacts,
    baseline: str | None = None,
    min_time_s: float = 0.2,
    rounds: int = 10,
    warmup: int = 2,
    progress: str | None = None,
) -> list[rec.Record]:
    """Records of every candidate, in order: `wrong` where its check failed, `skipped` where it
    cannot run, `failed` where it raised anything else (its error line; the others go on), else
    timed (interleaved with the others). With `baseline` (an implementation
    name among the candidates), every other ok record gets ratio_vs_baseline = baseline/this
    with its 95 % interval. Records passed in (already skipped) are kept in place."""
    if baseline is not None and rounds < MIN_ROUNDS:
        raise ValueError(
            f"rounds={rounds}: a ratio needs >= {MIN_ROUNDS} rounds for its 95 % interval"
        )
    out: list[rec.Record | None] = []
    timed: dict[int, Candidate] = {}
    checks: dict[int, Check] = {}
    ours = {c.implementation for c in candidates if not c.plugin}
    candidates = [
        _renamed(c) if isinstance(c, Candidate) and c.plugin and c.implementation in ours else c
        for c in candidates
    ]
    for index, c in enumerate(candidates):
        if isinstance(c, rec.Record):
            out.append(c)
            continue
        ident = {
            "facts": facts,
            "dtype": c.dtype or case.dtype,
            "shape": case.shape,
            "mode": case.mode,
        }
        check, reason, error = _first_call(c)
        if reason is not None:
            out.append(rec.skipped(case.topic, case.case, c.implementation, reason, **ident))
        elif error is not None:
            out.append(rec.failed(case.topic, case.case, c.implementation, error, **ident))
        elif not check.passed:
            out.append(rec.wrong(case.topic, case.case, c.implementation, check, **ident))
        else:
            out.append(None)
            timed[index], checks[index] = c, check
    timings = {}
    while timed:  # a candidate that raises while timed is `failed`; the rest are timed again
        try:
            timings = time_interleaved(
                {
                    i: _reporting(i, _slowed(c.fn, injected_slowdown(c.implementation)))
                    for i, c in timed.items()
                },
                device=facts.device,
                rounds=rounds,
                warmup=warmup,
                min_time_s=min_time_s,
                progress=progress,
            )
            break
        except _Raised as raised:
            c = timed.pop(raised.index)
            out[raised.index] = rec.failed(
                case.topic,
                case.case,
                c.implementation,
                "while timed: " + error_line(raised.error),
                facts=facts,
                dtype=c.dtype or case.dtype,
                shape=case.shape,
                mode=case.mode,
            )
    for index, c in timed.items():
        out[index] = rec.measured(
            case.topic,
            case.case,
            c.implementation,
            timings[index],
            facts=facts,
            dtype=c.dtype or case.dtype,
            shape=case.shape,
            mode=case.mode,
            flops=c.flops,
            bytes=c.bytes,
            metrics=c.metrics,
            check=checks[index],
        )
        put(out[index], c.fn, facts.device)  # for the profiled pass after the section
        if fraction := injected_slowdown(c.implementation):
            flag = f"TEST ONLY: slowed by {fraction:.0%} ({TEST_SLOWDOWN_ENV}), not a real figure"
            out[index] = dataclasses.replace(out[index], flags=out[index].flags + (flag,))
    out = [_with_plugin(r, c) for r, c in zip(out, candidates)]
    return with_baseline(out, baseline) if baseline is not None else out


def _renamed(c: Candidate) -> Candidate:
    """A plug-in named as one of ours in this case: `failed` under `<name>.plugin` (record ids
    stay unique), never timed in its place."""

    def fn():
        raise ValueError(f"plug-in name {c.implementation!r} is a built-in's here: rename it")

    return dataclasses.replace(c, implementation=c.implementation + ".plugin", fn=fn)


def _with_plugin(r: rec.Record, c: Candidate | rec.Record) -> rec.Record:
    return dataclasses.replace(r, plugin=c.plugin) if c.plugin and r is not c else r


def with_baseline(records: list[rec.Record], baseline: str) -> list[rec.Record]:
    """Records of one `compare` call with ratio_vs_baseline (and its 95 % interval, paired by
    interleaving round) set against the ok record named `baseline`; unchanged where that one
    was skipped or wrong."""
    names = [r.implementation for r in records]
    if baseline not in names:
        raise ValueError(f"baseline={baseline!r} is not among the candidates {names}")
    base = records[names.index(baseline)]
    if base.status != "ok":
        return records
    return [
        rec.with_ratio(r, base, ratio(base.round_medians_ms, r.round_medians_ms))
        if r.status == "ok" and r is not base and r.round_medians_ms
        else r
        for r in records
    ]


def relabel(records: list[rec.Record], **fields) -> list[rec.Record]:
    """The same records with `fields` replaced (e.g. a sweep's case name)."""
    return [dataclasses.replace(r, **fields) for r in records]


VERDICTS = ("PASS", "FAIL", "skipped", "failed")  # the `check` column of a correctness table


def check_table_records(
    table: pd.DataFrame,
    case: Case,
    *,
    facts: DeviceFacts,
    implementation: Callable[[dict], str],
    reference: str,
    error: str = "rel_error",
    shape_columns: Sequence[str] = (),
    metrics: Sequence[str] = (),
) -> list[rec.Record]:
    """One untimed record per row of a correctness table, whose `check` column is one of
    VERDICTS: `skipped` or `failed` with the row's `reason`; else its Check (the `error` column:
    relative error against `reference`, with `max_abs_error` and `tolerance`), `wrong` where
    FAIL, else metrics-only with the `metrics` columns. Identity: `case` (its shape plus the
    row's `shape_columns`) and `implementation(row)`."""
    out = []
    for row in table.to_dict("records"):
        if row["check"] not in VERDICTS:
            raise ValueError(f"check={row['check']!r} must be one of {VERDICTS}")
        name = implementation(row)
        known = {
            "facts": facts,
            "dtype": case.dtype,
            "shape": case.shape | {c: row[c] for c in shape_columns},
            "mode": case.mode,
        }
        if row["check"] in ("skipped", "failed"):
            make = rec.skipped if row["check"] == "skipped" else rec.failed
            out.append(make(case.topic, case.case, name, row["reason"], **known))
            continue
        passed = row["check"] == "PASS"
        check = Check(
            reference, row["max_abs_error"], row[error], row["tolerance"], "rel_error", passed
        )
        if not passed:
            out.append(rec.wrong(case.topic, case.case, name, check, **known))
            continue
        values = {m: row[m] for m in metrics}
        out.append(
            rec.info(case.topic, case.case, name, metrics=values, check=check.as_dict(), **known)
        )
    return out


def require_passed(table: pd.DataFrame, what: str) -> pd.DataFrame:
    """`table` (a correctness table, its `check` column one of VERDICTS) where no row FAILed;
    else AssertionError naming `what` and listing the rows that did (a notebook's check cell
    fails, after its records were kept)."""
    failed = table[table["check"] == "FAIL"]
    if len(failed):
        raise AssertionError(f"{what}: {len(failed)} check(s) failed:\n{failed}")
    return table
