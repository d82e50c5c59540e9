"""`python -m kernel_lib regressions`: did the latest run get slower than the runs before it?

Per platform (all in the store, or `--platform`): the latest report's runs (one run, or the N
runs of `run --repeat N`) against the PREVIOUS_RUNS runs before it of the same platform and device
name, record by record with `compare`'s rules (kernel_lib.compare.verdict: the ratio of the run
medians beyond the factor, a permutation test on them, the runs apart; the factor from a noise
floor of this platform and device: `--noise-floor`, else the one an A/A of `ab` kept in
.cache/ab/noise-floor-<platform>.json; else 1.1). With at least 3 runs a side the permutation test on the run medians confirms a slowdown; with fewer (a cron job's
single `run`) the runs' raw samples do: the whole 95 % bootstrap interval of the ratio beyond the
factor (compare.verdict.samples_verdict); a change beyond the factor whose interval reaches
within it is counted as unconfirmed and never fails. One line per confirmed slowdown (or a
record lost: ok before, not now).

Exit codes: 1 when a slowdown or loss is confirmed; 0 otherwise, also when a platform has no
earlier run on its device to compare with (a fresh VM's first cron run is not an alarm; one line
says so); 2 for bad input (a missing or damaged store, an unknown platform).
"""

from __future__ import annotations

from pathlib import Path

from kernel_lib import ab
from kernel_lib.compare.comparison import FAILING, compare_runs
from kernel_lib.compare.noise import kept_noise_floor
from kernel_lib.compare.runs import CompareError, stored_runs
from kernel_lib.compare.verdict import MIN_RUNS
from kernel_lib.history import store
from kernel_lib.params import ParameterError

PREVIOUS_RUNS = 5  # the earlier runs the latest is compared with


def _describe(rows: list[dict]) -> str:
    gits = sorted({r["git"] or "?" for r in rows})
    return f"{len(rows)} run(s), git {','.join(gits)}"


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
        noise_floor = kept_noise_floor(ab.STORE, latest["platform"], latest["device"])
    try:
        c = compare_runs(
            stored_runs(path, a_rows),
            stored_runs(path, b_rows),
            factor=factor,
            noise_floor=noise_floor,
        )
    except CompareError as err:  # no record in common, a bad --factor
        raise CompareError(f"{where}: {err}") from None
    lines = []
    for row in c.table.itertuples():
        if row.verdict in FAILING:
            interval = f" [{row.low:.3f}, {row.high:.3f}]" if row.low == row.low else ""
            figure = f" {row.ratio:.3f}x{interval} ({row.a_ms:.4g} -> {row.b_ms:.4g} ms)"
            lines.append(
                f"{row.verdict}: {where}: {row.key}{figure if row.verdict == 'slower' else ''}"
            )
    counts = ", ".join(f"{n} {v}" for v, n in sorted(c.counts.items()))
    lines.append(
        f"{where}: report {latest['report']} ({_describe(b_rows)}) vs the {_describe(a_rows)} "
        f"before it: {counts or 'no records'}; factor {c.factor:g} ({c.factor_from})"
    )
    if min(len(a_rows), len(b_rows)) < MIN_RUNS and c.counts.get("unconfirmed"):
        busy = [r.run_id for r in (*c.a, *c.b) if r.busy]
        lines.append(
            f"{where}: with fewer than {MIN_RUNS} runs a side a change is confirmed only when its "
            f"samples' 95 % bootstrap interval is beyond the factor"
            + (f" and no run shared a busy machine (busy: {', '.join(busy)})" if busy else "")
            + f": run --repeat {MIN_RUNS} to test the runs"
        )
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
