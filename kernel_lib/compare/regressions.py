"""`python -m kernel_lib regressions`: did the latest run get slower than the runs before it?

Per platform (all in the store, or `--platform`): the latest report's runs (one run, or the N
runs of `run --repeat N`) against the PREVIOUS_RUNS runs before it of the same platform and device
name, record by record with `compare`'s rules (kernel_lib.compare.verdict: the ratio of the run
medians beyond the factor, a permutation test on them with >= 3 runs a side, the runs apart; with
fewer, a cron job's single `run`, the whole 95 % bootstrap interval of the ratio from the runs' raw
samples beyond the factor). compare's factor f: `--factor`, else `--noise-floor`, else the one an
A/A of `ab` kept in .cache/ab/noise-floor-<platform>.json, else 1.1.

What one run's samples cannot show is the machine's run-to-run spread: on a shared VM a kernel's
speed sits in one state for a whole process, states 1.1-1.4x apart (and, here, up to 3.9x), with
intervals of +-1 % inside each run (docs/speed-states.md). So each record of a single-run
comparison (fewer than 3 runs a side) gets its own factor f_rec, never below f nor below the
single-run factor: QUIET_SINGLE_RUN_FACTOR where no run on either side was flagged busy, else
SINGLE_RUN_FACTOR (below); where >= 2 earlier runs hold the record, their medians' spread
w = max / min can raise it to 1 + 2 (w - 1) (compare's "twice the widest excursion" rule for a
noise floor, verdict.spread_factor). With >= 3 runs a side the permutation test decides, at f
or the history's factor.
A slowdown is confirmed only when, at f_rec, compare's rules call it AND the latest runs lie beyond
the slowest earlier median by f_rec AND its samples' 95 % interval is narrower than f_rec (high /
low < f_rec: a run whose samples moved between states mid-run has no median to trust); `faster`
likewise. A change beyond f that f_rec does not confirm is `unconfirmed`: it never fails.
compare's busy rule (a run the runner flagged busy, its 1-min load above the cores or CPU steal,
confirms nothing from its samples) stands for runs of several threads: two threads on a loaded
machine wait for each other's time slice. It is lifted where every run of both sides measured on
one torch thread (run.json's compute_units "1 threads"), whose run-to-run spread the factors
above were measured on.

Measured (AMD EPYC, 2 vCPU, no AMX, torch 2.13, `run --platform ci --only fp8` of one frozen
revision, 57 timed records):
- Quiet (1-min load 1-2, no run flagged busy), 2 torch threads (the default), 6 A/A runs, 15 pairs
  (855 record pairs): ratios p50 1.027, p90 1.246, p99 1.405, widest 1.445 (a µs-size C
  dequantising linear; the first run against the others). Every run as the latest against the
  ones before it: 0 of 5 checks exit 1. A factor from 3 earlier runs' own spread alone (1.106x)
  cried wolf on the fourth (a 2.7 µs record at 1.128x [1.109, 1.157]), and a floor from all
  records' spread (the p90 of 5 earlier runs, 1.06x: all in one state) on a later run whose
  GEMMs sat 1.16-1.44x slower in another state: hence the floor on every single run. In 4 more
  runs an unslowed record moved 2.02x (a µs-size bf16 grouped GEMM): QUIET_SINGLE_RUN_FACTOR 2.5.
  bf16_linear slowed (KERNEL_WORKBOOK_TEST_SLOWDOWN): 3x after 1 earlier run, 6 of its 7 records
  `slower` (2.58-3.14x) and nothing else, exit 1; 3x after 6, its block record, exit 1; 2x and
  1.3x after 1 or 6: `unconfirmed`, exit 0: a single run shows only slowdowns beyond ~2.5x.
- Busy (1-min load 8-9 from other jobs, every run flagged):
  - 2 torch threads, 8 A/A runs: records up to 1700x apart between runs (sections whose threads
    waited for their time slice), so no factor covers them: the busy rule stays.
  - 1 torch thread (OMP_NUM_THREADS=1), 7 A/A runs, 21 pairs (1197 record pairs): ratios p50
    1.023, p90 1.16, p99 1.91, widest 3.85 (a compiled dequantising linear): SINGLE_RUN_FACTOR
    4.0. 0 of 99 checks (1-5 earlier runs each) exit 1. bf16_linear slowed 2x and 1.3x: exit 1
    after 3 and 5 earlier runs when a record's history alone set its factor (20 of 20 checks),
    which the quiet A/A above showed cries wolf.
Each line says which factor its verdict used and where it came from (its history of N runs, the
single-run factor, or compare's: the default, `--factor`, a noise floor).

Exit codes: 1 when a slowdown or loss is confirmed; 0 otherwise, also when a platform has no
earlier run on its device to compare with (a fresh VM's first cron run is not an alarm) or no
record in common with them (a fresh clone's check run, its results not committed): one line says
so, and the other platforms go on; 2 for bad input (a missing or damaged store, an unknown
platform).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from kernel_lib.compare import ab_layout
from kernel_lib.compare.comparison import FAILING, Comparison, _samples, compare_runs
from kernel_lib.compare.noise import kept_noise_floor
from kernel_lib.compare.runs import CompareError, _by_key, stored_runs
from kernel_lib.compare.verdict import MIN_RUNS, record_verdict, spread_factor
from kernel_lib.params import ParameterError
from kernel_lib.results import store

PREVIOUS_RUNS = 5  # the earlier runs the latest is compared with
# A single run's factor at least (docstring): where no run on either side was busy, above the
# widest swing of quiet runs (2.02x); else (one thread), above the widest busy A/A pair (3.85x).
QUIET_SINGLE_RUN_FACTOR = 2.5
SINGLE_RUN_FACTOR = 4.0
SOURCES = ("history", "single-run factor")  # where a record's factor came from, besides compare's


def _describe(rows: list[dict]) -> str:
    gits = sorted({r["git"] or "?" for r in rows})
    return f"{len(rows)} run(s), git {','.join(gits)}"


def record_factor(
    factor: float, factor_from: str, earlier: list[float], latest: int = 1, *, quiet: bool = False
) -> tuple[float, str, str]:
    """(factor, where it came from, which of SOURCES or '' for compare's own) for a record whose
    medians in the earlier runs are `earlier` and that the latest report ran `latest` times,
    compare's factor being `factor` (`factor_from`); `quiet`: no run on either side was busy."""
    chosen, why, source = factor, factor_from, ""
    if earlier and min(len(earlier), latest) < MIN_RUNS:  # decided by the runs' samples
        single, state = (
            (QUIET_SINGLE_RUN_FACTOR, "quiet") if quiet else (SINGLE_RUN_FACTOR, "busy")
        )
        if single > factor:
            chosen, source = single, SOURCES[1]
            why = f"the single-run factor of {state} runs"
    if len(earlier) >= 2:
        widest = max(earlier) / min(earlier) if min(earlier) > 0 else math.inf
        spread = f"its history of {len(earlier)} runs, {widest:.3f}x apart"
        if spread_factor(widest) > chosen:
            return spread_factor(widest), spread, SOURCES[0]
        why = f"{why}; {spread}"
    return chosen, why, source


def threads(row: dict) -> int | None:
    """The torch threads a stored run measured on (its run.json's environment.compute_units,
    "N threads"); None where it says none (a GPU's SMs)."""
    units = (json.loads(row["run_json"]).get("environment") or {}).get("compute_units")
    count, _, kind = str(units or "").partition(" ")
    return int(count) if kind == "threads" and count.isdigit() else None


def decided(c: Comparison, busy: bool, quiet: bool = False) -> Comparison:
    """`c` with each timed record decided at its own factor (record_factor) by compare's rules,
    beyond the closest earlier run by it, its samples' interval narrower than it; `busy`:
    compare's busy rule applies (a run flagged busy confirms nothing from its samples); `quiet`:
    no run was flagged busy."""
    a_rows, b_rows = _by_key(c.a), _by_key(c.b)
    table = c.table.assign(factor=math.nan, factor_from="", source="")
    for i, row in zip(table.index, table.itertuples()):
        if not isinstance(row.a_run_ms, list):  # not timed on both sides
            continue
        factor, why, source = record_factor(
            c.factor, c.factor_from, row.a_run_ms, len(row.b_run_ms), quiet=quiet
        )
        verdict = record_verdict(
            row.a_run_ms, row.b_run_ms, _samples(a_rows[row.key]), _samples(b_rows[row.key]),
            factor, busy=busy,
        )[0]  # fmt: skip
        beyond = row.apart > factor if verdict == "slower" else row.apart < 1 / factor
        steady = not row.high / row.low >= factor  # its samples' interval narrower (or none)
        if verdict in ("slower", "faster") and not (beyond and steady):
            verdict = "unconfirmed"
        elif verdict == "same" and row.verdict != "same":  # beyond compare's factor, not its own
            verdict = "unconfirmed"
        table.loc[i, ["verdict", "factor", "factor_from", "source"]] = [
            verdict, factor, why, source,
        ]  # fmt: skip
    return dataclasses.replace(c, table=table)


def _factors(c: Comparison) -> str:
    """How many records took their factor from each source, and the range of those factors."""
    parts = []
    for source in SOURCES:
        chosen = c.table.loc[c.table["source"] == source, "factor"]
        if len(chosen):
            span = f"{chosen.min():g}" + (
                f"-{chosen.max():g}" if chosen.max() > chosen.min() else ""
            )
            parts.append(f"{len(chosen)} at {span} ({source})")
    return f"; per record: {', '.join(parts)}" if parts else ""


def check_platform(
    path: Path, rows: list[dict], *, factor: float | None, noise_floor: dict | None
) -> tuple[list[str], int]:
    """(lines, exit code) for one platform's runs, oldest first."""
    latest = rows[-1]
    b_rows = [r for r in rows if r["report"] == latest["report"]]
    a_rows = [
        r for r in rows if r["report"] != latest["report"] and r["device"] == latest["device"]
    ][-PREVIOUS_RUNS:]
    where = f"{latest['platform']} on {latest['device']}"
    if not a_rows:
        return [f"{where}: no earlier run on this device in the store: nothing to compare"], 0
    if noise_floor is None:  # the one an A/A of `ab` kept for this platform and device
        noise_floor = kept_noise_floor(ab_layout.CACHE, latest["platform"], latest["device"])
    a, b = stored_runs(path, a_rows), stored_runs(path, b_rows)
    if not set(_by_key(a)) & set(_by_key(b)):  # a check run without its results, say
        return [
            f"{where}: report {latest['report']} and the {_describe(a_rows)} before it have no "
            "record in common: nothing to compare"
        ], 0
    try:
        c = compare_runs(a, b, factor=factor, noise_floor=noise_floor)
    except CompareError as err:  # a bad --factor
        raise CompareError(f"{where}: {err}") from None
    one_thread = all(threads(r) == 1 for r in (*a_rows, *b_rows))
    busy = [r.run_id for r in (*c.a, *c.b) if r.busy]
    c = decided(c, bool(busy) and not one_thread, quiet=not busy)
    lines = []
    for row in c.table.itertuples():
        if row.verdict in FAILING:
            interval = f" [{row.low:.3f}, {row.high:.3f}]" if row.low == row.low else ""
            figure = (
                f" {row.ratio:.3f}x{interval} ({row.a_ms:.4g} -> {row.b_ms:.4g} ms); "
                f"factor {row.factor:g} ({row.factor_from})"
            )
            lines.append(
                f"{row.verdict}: {where}: {row.key}{figure if row.verdict == 'slower' else ''}"
            )
    counts = ", ".join(f"{n} {v}" for v, n in sorted(c.counts.items()))
    lines.append(
        f"{where}: report {latest['report']} ({_describe(b_rows)}) vs the {_describe(a_rows)} "
        f"before it: {counts or 'no records'}; factor {c.factor:g} ({c.factor_from}){_factors(c)}"
    )
    if min(len(a_rows), len(b_rows)) < MIN_RUNS and c.counts.get("unconfirmed"):
        vetoed = busy and not one_thread
        lines.append(
            f"{where}: with fewer than {MIN_RUNS} runs a side a change is confirmed only when its "
            f"samples' 95 % bootstrap interval and the runs are beyond the record's factor"
            + (f" and no run of several threads shared a busy machine (busy: {', '.join(busy)})"
               if vetoed else "")
            + f": run --repeat {MIN_RUNS} to test the runs"
        )  # fmt: skip
    return lines, c.exit_code


def regressions(
    path: Path,
    platform: str | None = None,
    *,
    factor: float | None = None,
    noise_floor: dict | None = None,
) -> tuple[list[str], int]:
    """(lines, exit code) for each platform's latest report in the store at `path`."""
    rows = store.runs(path, platform)
    if platform and not rows:
        raise ParameterError(f"--platform {platform}: no run of it in the store {path}")
    if not rows:
        return [f"{path}: no run in the store: nothing to compare"], 0
    lines, code = [], 0
    for name in sorted({r["platform"] or "" for r in rows}):
        found, failed = check_platform(
            path, [r for r in rows if (r["platform"] or "") == name], factor=factor,
            noise_floor=noise_floor,
        )  # fmt: skip
        lines += found
        code = max(code, failed)
    return lines, code
