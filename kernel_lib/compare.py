"""`python -m kernel_lib compare A... -- B...`: did report(s) B get slower than report(s) A?

Each side is one or more report folders (`outputs/<platform>/` of `python -m kernel_lib run`); a
folder holding `run-<k>/` subfolders counts as those runs. Records are matched by `record_id`
without its leading platform (`topic/case/implementation/dtype/mode/shape`). A notebook that the
runner marked `stale_results` (it failed and the report kept an earlier run's records) is left out.

Same device (every run on both sides has one platform and one device name):
- Per record and side, the per-run medians (each run's `median_ms`). `ratio` = median of B's run
  medians / median of A's (> 1: B is slower).
- `apart` = the ratio between the closest runs of the two sides, in the direction of `ratio`:
  fastest B run / slowest A run when B is slower (slowest B / fastest A when faster).
- `slower` / `faster`: the ratio is beyond the factor (> f or < 1/f, default f = 1.1) AND, with at
  least 3 runs a side, an exact permutation test on the per-run medians says p <= 0.05 AND, with
  fewer than 5 runs on a side, the runs are apart by the factor (`apart` beyond f too: every run
  of B is more than f times slower, or faster, than every run of A).
- `unconfirmed`: beyond the factor, but fewer than 3 runs a side, the test is not significant, or
  (fewer than 5 runs on a side) some runs of the two sides lie within the factor of each other.
- `same`: within the factor.
- `lost`: ok in A, failed/skipped/wrong in B (a side's status is `ok` only if every run has it ok);
  `recovered`: the reverse; `not run`: not ok on either side; `untimed`: ok on both sides but
  without a time (device facts, probes); `new` / `gone`: the id is only in B / only in A.
- Correctness figures that changed (`check.*` errors and pass, and numeric `metrics.*` that are
  not timing-derived: SQNR, errors, drop counts, losses, ...) are listed separately from timings.

The permutation test. Statistic: the difference of the means of the per-run medians, mean(B) -
mean(A). Every one of the C(n+m, n) relabellings of the pooled run medians into groups of n and m
is enumerated (exact; beyond 200 000 relabellings a seeded sample of 100 000 is drawn instead,
p = (hits + 1) / (draws + 1)). The test is ONE-SIDED, in the direction of the observed ratio (B
slower: P(stat >= observed); B faster: P(stat <= observed)). Why: with 3 runs a side the smallest
exact p is 1/C(6, 3) = 1/20 = 0.05 one-sided, but 2/20 = 0.10 two-sided, so a two-sided test at
0.05 could never confirm anything with 3 runs. The price: choosing the side after looking makes
this a two-sided test at 0.10 in effect (a record with no change passes the test, in one
direction or the other, up to 10 % of the time). The factor gates are what keep noise out. Why
`apart` as well as `ratio`: on a shared VM the machine's speed for a kernel sits in one of two
states for seconds to minutes while two threads work, and each run meets one (measured here: a
small MLP at 0.48 or 0.63 ms, fp32 GEMMs 10-20 % apart, from one process to the next; not the
process's memory layout, thread pinning, malloc arenas or huge pages: README). With 3 runs a
side the test's smallest p is its threshold, so it confirms complete separation and nothing
finer; the runs of one side all land in the slow state 1 time in 20 by chance, the medians
then differ by the gap between the states, and with tens of records compared at once some
record does so in most A/A comparisons (2 real A/A pairs of backend_cpu + fp8, 38
timed records: 3 and 6 `slower` without this gate, 1 and 0 with it). A real change moves every
run of a side; asking that the runs themselves be apart by the factor keeps a change smaller than
the run-to-run spread `unconfirmed`. From 5 runs a side the test resolves on its own (smallest p
1/252) and the gate would only cost power: one slow outlier among 5 runs would veto a real 20 %
slowdown (measured with `sensitivity`: 8 of 10 trials instead of 10). For a strict two-sided 5 %
test use >= 4 runs a side (min p = 2/70). What no test on the runs can see: the machine's own drift
between two reports made one after the other (a section 10-35 % apart in every run; full-workbook
A/As here: 1-3 verdicts of 313-333 records in each of six sequential pairs, 0 and 1 in two with
the runs of the two sides interleaved). Interleave the runs of the two sides when comparing
revisions: `python -m kernel_lib ab` (docs/revisions.md).

What a verdict rests on is printed with it: the runs of each side, the factor, and the noise floor
when one is at hand (`--noise-floor FILE`: what an A/A of `python -m kernel_lib ab REV REV` measured,
its noise-floor.json, or the folder holding it); per record, the run medians of both sides
(`a_run_ms`, `b_run_ms`).

Different devices (platform or device name differ between runs): no verdict words at all. The
table shows the ratio of medians with a spread interval [min over B's runs of p10 / max over A's
runs of p90, max over B's runs of p90 / min over A's runs of p10]: the ratio between the fast tail
of one side and the slow tail of the other, so it covers within-run spread and run-to-run spread
(it is a range, not a confidence interval; it is defined with one run a side). The declared
headline records (records with `headline`) of both sides are shown side by side, by label.

Exit codes: 0 nothing slower or lost (always 0 across devices), 1 something slower or lost, 2 bad
input (one line: a missing folder, a folder that is not a report, a damaged run.json or results
file, no records in common, no `--`).
"""

from __future__ import annotations

import argparse
import html
import itertools
import json
import math
import random
import statistics
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from kernel_lib.params import ParameterError
from kernel_lib.records import RESULTS_SUFFIX, record_id
from kernel_lib.report import aggregate
from kernel_lib.reportfiles import read_results, read_run

ALPHA = 0.05
MIN_RUNS = 3  # runs a side before the permutation test can confirm a verdict
RESOLVED_RUNS = 5  # runs a side from which the test alone confirms (below: the runs must be apart)
DEFAULT_FACTOR = 1.1
EXACT_LIMIT = 200_000  # relabellings enumerated exactly; beyond it, a seeded random sample
SAMPLED_RELABELLINGS = 100_000
FAILING = ("slower", "lost")  # verdicts that make the exit code 1
# Timing-derived metrics are not correctness figures: they vary with the timing itself.
TIMING_METRIC_MARKS = ("per_s", "tflops", "gbps", "_ms", "us_per", "seconds")
CHECK_FIELDS = ("rel_error", "max_abs_error", "tolerance", "pass")
VERDICT_WORDS = (
    "slower", "faster", "unconfirmed", "same", "lost", "recovered", "not run", "untimed", "new",
    "gone",
)  # fmt: skip


class CompareError(ParameterError):
    """Bad input: shown as one line, exit code 2."""


@dataclass(frozen=True)
class Run:
    """One run of the workbook: its folder, identity and records keyed by match key."""

    folder: Path
    platform: str | None
    device: str | None
    run_id: str | None
    git: str | None
    records: dict[str, dict] = field(repr=False)
    stale: tuple[str, ...] = ()  # notebooks left out: the report kept an earlier run's records

    def describe(self) -> str:
        parts = [str(self.folder), self.platform or "?", self.device or "?"]
        if self.git:
            parts.append(f"git {self.git}")
        text = " · ".join(parts)
        return text + (f" (left out, stale: {', '.join(self.stale)})" if self.stale else "")


# ---------------------------------------------------------------------------------------- input


def match_key(row: dict) -> str:
    """A record's `record_id` without its leading platform, so runs of two platform files (or
    devices) match; built from the record's fields when it has no id."""
    platform = row.get("platform") or ""
    rid = row.get("record_id")
    if not rid:
        fields = {k: row.get(k) for k in ("topic", "case", "implementation", "dtype", "mode")}
        rid = record_id(SimpleNamespace(shape=row.get("shape") or {}, **fields), platform)
    prefix = f"{platform}/"
    return rid[len(prefix) :] if platform and rid.startswith(prefix) else rid


def run_folders(folder: str | Path) -> list[Path]:
    """The runs a report folder holds: its `run-<k>/` subfolders (in k order) if it has any, else
    the folder itself. Raises CompareError for a missing folder or one without records."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CompareError(f"{folder}: no such folder")
    runs = aggregate.run_folders(folder) or [folder]
    for run in runs:
        if not any(run.glob(f"*{RESULTS_SUFFIX}")):
            raise CompareError(f"{run}: not a report folder (no *{RESULTS_SUFFIX})")
    return runs


def load_run(folder: str | Path) -> Run:
    """One run's records (from every `*.results.json`) and identity (from `run.json` where
    present, else from the records); ParameterError naming a damaged file."""
    folder = Path(folder)
    meta = read_run(folder / "run.json") if (folder / "run.json").exists() else {}
    stale = tuple(nb["notebook"] for nb in meta.get("notebooks", []) if nb.get("stale_results"))
    records: dict[str, dict] = {}
    for path in sorted(folder.glob(f"*{RESULTS_SUFFIX}")):
        if path.name[: -len(RESULTS_SUFFIX)] in stale:
            continue
        for row in read_results(path):
            records[match_key(row)] = row
    devices = Counter(r.get("device") for r in records.values() if r.get("device"))
    platforms = Counter(r.get("platform") for r in records.values() if r.get("platform"))
    env = meta.get("environment") or {}
    return Run(
        folder=folder,
        platform=meta.get("platform") or (platforms.most_common(1)[0][0] if platforms else None),
        device=env.get("name") or (devices.most_common(1)[0][0] if devices else None),
        run_id=meta.get("run_id"),
        git=meta.get("git"),
        records=records,
        stale=stale,
    )


def load_side(folders: list[str | Path]) -> list[Run]:
    """Every run of the given report folders, in order."""
    if not folders:
        raise CompareError("a side has no report folder")
    return [load_run(run) for folder in folders for run in run_folders(folder)]


# ----------------------------------------------------------------------------------- statistics


def permutation_p(a: list[float], b: list[float], *, alternative: str = "two-sided") -> float:
    """p-value of an exact permutation test of mean(b) - mean(a) over all C(n+m, n) relabellings
    of the pooled values (a seeded sample of them beyond EXACT_LIMIT). `alternative`: 'greater'
    (b larger), 'less' (b smaller) or 'two-sided' (|difference| at least as large)."""
    if alternative not in ("greater", "less", "two-sided"):
        raise ValueError(f"alternative={alternative!r}")
    n, m = len(a), len(b)
    if n == 0 or m == 0:
        raise ValueError("a permutation test needs values on both sides")
    pooled = [float(v) for v in (*a, *b)]
    total = sum(pooled)

    def diff(sum_a: float) -> float:
        return (total - sum_a) / m - sum_a / n

    observed = diff(sum(pooled[:n]))
    slack = 1e-12 * max(1.0, *(abs(v) for v in pooled))  # equal sums up to rounding are ties

    def extreme(d: float) -> bool:
        if alternative == "greater":
            return d >= observed - slack
        if alternative == "less":
            return d <= observed + slack
        return abs(d) >= abs(observed) - slack

    if math.comb(n + m, n) <= EXACT_LIMIT:
        labellings = itertools.combinations(range(n + m), n)
        hits = count = 0
        for idx in labellings:
            hits += extreme(diff(sum(pooled[i] for i in idx)))
            count += 1
        return hits / count
    rng = random.Random(0)
    hits = sum(extreme(diff(sum(rng.sample(pooled, n)))) for _ in range(SAMPLED_RELABELLINGS))
    return (hits + 1) / (SAMPLED_RELABELLINGS + 1)


def _ratio(a: list[float], b: list[float]) -> float:
    ma, mb = statistics.median(a), statistics.median(b)
    if ma > 0:
        return mb / ma
    return math.inf if mb > 0 else math.nan


def apart(a: list[float], b: list[float]) -> float:
    """The ratio between the closest runs of the two sides, in the direction of the ratio of the
    medians: min(B) / max(A) when B is slower, max(B) / min(A) when faster."""
    if _ratio(a, b) >= 1:
        return min(b) / max(a) if max(a) > 0 else math.nan
    return max(b) / min(a) if min(a) > 0 else math.nan


def timing_verdict(
    a: list[float], b: list[float], factor: float = DEFAULT_FACTOR
) -> tuple[str, float, float | None]:
    """(verdict, ratio B/A of the medians of the run medians, p or None) for one record's per-run
    medians: see the module docstring."""
    ratio = _ratio(a, b)
    p = None
    if len(a) >= MIN_RUNS and len(b) >= MIN_RUNS:
        direction = "greater" if ratio >= 1 else "less"
        p = permutation_p(a, b, alternative=direction)
    if not (ratio > factor or ratio < 1 / factor):  # within the factor (or undefined)
        return "same", ratio, p
    slower = ratio > factor
    gap = apart(a, b)
    separated = gap > factor if slower else gap < 1 / factor
    if p is None or p > ALPHA or (min(len(a), len(b)) < RESOLVED_RUNS and not separated):
        return "unconfirmed", ratio, p
    return "slower" if slower else "faster", ratio, p


def spread_interval(a_rows: list[dict], b_rows: list[dict]) -> tuple[float, float]:
    """[min_B p10 / max_A p90, max_B p90 / min_A p10] over the runs (a run without p10/p90 uses
    its median): the range of B/A between the tails of the two sides."""

    def tails(rows: list[dict]) -> tuple[list[float], list[float]]:
        lows = [r.get("p10_ms") or r["median_ms"] for r in rows]
        highs = [r.get("p90_ms") or r["median_ms"] for r in rows]
        return lows, highs

    a_low, a_high = tails(a_rows)
    b_low, b_high = tails(b_rows)
    low = min(b_low) / max(a_high) if max(a_high) > 0 else math.nan
    high = max(b_high) / min(a_low) if min(a_low) > 0 else math.nan
    return low, high


# ---------------------------------------------------------------------------------- comparison


@dataclass(frozen=True)
class Comparison:
    """The outcome: `table` (one row per record id), `metrics` (correctness figures that
    changed), `headlines` (across devices: the declared headlines side by side)."""

    a: list[Run]
    b: list[Run]
    factor: float
    cross_platform: bool
    table: pd.DataFrame
    metrics: pd.DataFrame
    headlines: pd.DataFrame
    noise_floor: dict | None = None  # an A/A's figures (noise_floor), shown beside the verdicts

    @property
    def counts(self) -> dict[str, int]:
        if self.cross_platform or self.table.empty:
            return {}
        return {k: int(v) for k, v in self.table["verdict"].value_counts().items()}

    @property
    def exit_code(self) -> int:
        return 1 if any(self.counts.get(v) for v in FAILING) else 0


def _side_status(rows: list[dict]) -> str:
    statuses = [r.get("status", "ok") for r in rows]
    if all(s == "ok" for s in statuses):
        return "ok"
    return next(s for s in ("failed", "wrong", "skipped", *statuses) if s in statuses)


def _timed(rows: list[dict]) -> bool:
    return all(r.get("status", "ok") == "ok" and r.get("median_ms") is not None for r in rows)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def correctness_fields(row: dict) -> dict[str, object]:
    """The correctness figures of one record: `check.<field>` and the numeric, boolean or
    list-valued `metrics.*` that are not derived from the timing."""
    out: dict[str, object] = {}
    check = row.get("check") or {}
    for name in CHECK_FIELDS:
        if check.get(name) is not None:
            out[f"check.{name}"] = check[name]
    for name, value in (row.get("metrics") or {}).items():
        if any(mark in name for mark in TIMING_METRIC_MARKS) or value is None:
            continue
        if _is_number(value) or isinstance(value, (bool, list)):
            out[f"metrics.{name}"] = value
    return out


def _side_value(values: list):
    if all(_is_number(v) for v in values):
        return statistics.median(values)
    return values[-1]


def _changed(a, b, rel_tol: float) -> bool:
    if _is_number(a) and _is_number(b):
        if math.isnan(a) and math.isnan(b):
            return False
        return not math.isclose(a, b, rel_tol=rel_tol, abs_tol=0.0)
    return a != b


def metric_changes(
    a_rows: dict[str, list[dict]], b_rows: dict[str, list[dict]], *, rel_tol: float = 1e-6
) -> pd.DataFrame:
    """key, field, a, b for each correctness figure that differs (numbers beyond `rel_tol`
    relative; a side's number is the median over its runs, other values its last run's)."""
    rows = []
    for key in sorted(set(a_rows) & set(b_rows)):
        fa = [correctness_fields(r) for r in a_rows[key]]
        fb = [correctness_fields(r) for r in b_rows[key]]
        for name in sorted({n for f in (*fa, *fb) for n in f}):
            va = [f[name] for f in fa if name in f]
            vb = [f[name] for f in fb if name in f]
            a = _side_value(va) if va else None
            b = _side_value(vb) if vb else None
            if (a is None) != (b is None) or (a is not None and _changed(a, b, rel_tol)):
                rows.append({"key": key, "field": name, "a": a, "b": b})
    return pd.DataFrame(rows, columns=["key", "field", "a", "b"])


def _by_key(runs: list[Run]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for run in runs:
        for key, row in run.records.items():
            out.setdefault(key, []).append(row)
    return out


def _median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _figure(rows: list[dict]) -> str:
    """A headline's figure over its runs, without verdict words: a ratio with its interval, a
    fraction of a ceiling, or the status and reason."""
    status = _side_status(rows)
    if status != "ok":
        reason = rows[-1].get("reason") or ""
        return f"{status}: {reason[:60]}{'...' if len(reason) > 60 else ''}"
    ratios = [r["ratio_vs_baseline"] for r in rows if r.get("ratio_vs_baseline") is not None]
    if ratios:
        lows = [r["ratio_low"] for r in rows if r.get("ratio_low") is not None]
        highs = [r["ratio_high"] for r in rows if r.get("ratio_high") is not None]
        interval = f" [{min(lows):.2f}, {max(highs):.2f}]" if lows and highs else ""
        return f"{statistics.median(ratios):.2f}x{interval} vs {rows[-1].get('baseline')}"
    fractions = [r["fraction_of_peak"] for r in rows if r.get("fraction_of_peak") is not None]
    if fractions:
        return f"{statistics.median(fractions):.2f} of {rows[-1].get('peak_basis')}"
    median = _median_or_none([r["median_ms"] for r in rows if r.get("median_ms") is not None])
    return f"{median:.4g} ms" if median is not None else "ok"


def headline_table(a_rows: dict[str, list[dict]], b_rows: dict[str, list[dict]]) -> pd.DataFrame:
    """The declared headlines of both sides, matched by label."""

    def by_label(rows: dict[str, list[dict]]) -> dict[str, tuple[str, list[dict]]]:
        out = {}
        for key, rs in rows.items():
            label = next((r["headline"] for r in rs if r.get("headline")), None)
            if label:
                out[label] = (key, rs)
        return out

    la, lb = by_label(a_rows), by_label(b_rows)
    rows = []
    for label in sorted(set(la) | set(lb)):
        ka, ra = la.get(label, (None, None))
        kb, rb = lb.get(label, (None, None))
        rows.append(
            {
                "headline": label,
                "a": _figure(ra) if ra else "",
                "b": _figure(rb) if rb else "",
                "a_record": ka or "",
                "b_record": kb or "",
            }
        )
    return pd.DataFrame(rows, columns=["headline", "a", "b", "a_record", "b_record"])


def compare_runs(
    a: list[Run], b: list[Run], *, factor: float = DEFAULT_FACTOR, noise_floor: dict | None = None
) -> Comparison:
    """Compare two sides' runs (`noise_floor`: read_noise_floor's, shown with the verdicts);
    raises CompareError when they share no record."""
    if not factor > 1:
        raise CompareError(f"--factor {factor}: must be > 1")
    a_rows, b_rows = _by_key(a), _by_key(b)
    common = set(a_rows) & set(b_rows)
    if not common:
        raise CompareError("the two sides have no record in common")
    identities = {(r.platform, r.device) for r in (*a, *b)}
    cross = len(identities) > 1
    rows = []
    for key in sorted(set(a_rows) | set(b_rows)):
        ra, rb = a_rows.get(key), b_rows.get(key)
        row: dict = {"key": key}
        if ra is None or rb is None:
            if cross:
                continue  # counted, not tabled: shapes usually differ between platform files
            row["verdict"] = "new" if ra is None else "gone"
            rows.append(row)
            continue
        sa, sb = _side_status(ra), _side_status(rb)
        row.update(a_status=sa, b_status=sb, a_runs=len(ra), b_runs=len(rb))
        timed = sa == sb == "ok" and _timed(ra) and _timed(rb)
        if timed:
            ma = [float(r["median_ms"]) for r in ra]
            mb = [float(r["median_ms"]) for r in rb]
            row.update(a_ms=statistics.median(ma), b_ms=statistics.median(mb))
            if not cross:
                row.update(a_run_ms=ma, b_run_ms=mb)
        if cross:
            if timed:
                low, high = spread_interval(ra, rb)
                row.update(ratio=_ratio(ma, mb), low=low, high=high)
            rows.append(row)
            continue
        if timed:
            verdict, ratio, p = timing_verdict(ma, mb, factor)
            row.update(verdict=verdict, ratio=ratio, apart=apart(ma, mb), p=p)
        elif sa == "ok" and sb != "ok":
            row["verdict"] = "lost"
        elif sa != "ok" and sb == "ok":
            row["verdict"] = "recovered"
        elif sa != "ok" and sb != "ok":
            row["verdict"] = "not run"
        else:
            row["verdict"] = "untimed"
        rows.append(row)
    if cross:
        columns = ["key", "a_ms", "b_ms", "ratio", "low", "high", "a_runs", "b_runs"]
        columns += ["a_status", "b_status"]
    else:
        columns = ["key", "verdict", "a_ms", "b_ms", "ratio", "apart", "p", "a_runs", "b_runs"]
        columns += ["a_run_ms", "b_run_ms", "a_status", "b_status"]
    table = pd.DataFrame(rows).reindex(columns=columns)
    table[["a_runs", "b_runs"]] = table[["a_runs", "b_runs"]].astype("Int64")
    return Comparison(
        a=a,
        b=b,
        factor=factor,
        cross_platform=cross,
        table=table,
        metrics=metric_changes(a_rows, b_rows),
        headlines=headline_table(a_rows, b_rows) if cross else _empty_headlines(),
        noise_floor=noise_floor,
    )


def _empty_headlines() -> pd.DataFrame:
    return pd.DataFrame(columns=["headline", "a", "b", "a_record", "b_record"])


def compare_folders(
    a: list[str | Path],
    b: list[str | Path],
    *,
    factor: float = DEFAULT_FACTOR,
    noise_floor: dict | None = None,
) -> Comparison:
    return compare_runs(load_side(a), load_side(b), factor=factor, noise_floor=noise_floor)


# ---------------------------------------------------------------------------------- noise floor

NOISE_FLOOR_FILE = "noise-floor.json"
NOISE_FLOOR_KEYS = (
    "device", "git", "runs_a_side", "factor", "records", "ratio_low", "ratio_high", "ratio_p05",
    "ratio_p95", "verdicts",
)  # fmt: skip


def noise_floor(c: Comparison) -> dict:
    """What an A/A comparison (the same code on both sides, runs interleaved) measured: how far
    the ratios of identical code spread here (all, and the middle 90 %), and the verdicts it
    called at its factor and runs a side."""
    if c.cross_platform:
        raise CompareError("a noise floor needs both sides on one device")
    ratios = sorted(float(r) for r in c.table["ratio"].dropna() if math.isfinite(r))
    if not ratios:
        raise CompareError("a noise floor needs timed records on both sides")
    cuts = statistics.quantiles(ratios, n=20, method="inclusive") if len(ratios) > 1 else ratios
    return {
        "platform": c.a[0].platform,
        "device": c.a[0].device,
        "git": c.a[0].git,
        "runs_a_side": min(len(c.a), len(c.b)),
        "factor": c.factor,
        "records": len(ratios),
        "ratio_low": ratios[0],
        "ratio_high": ratios[-1],
        "ratio_p05": cuts[0],
        "ratio_p95": cuts[-1],
        "verdicts": {v: c.counts.get(v, 0) for v in ("slower", "faster", "unconfirmed")},
    }


def read_noise_floor(path: str | Path) -> dict:
    """A noise floor written by `ab` (its noise-floor.json, or a folder holding one);
    CompareError naming the file when it is missing or is not one."""
    path = Path(path)
    path = path / NOISE_FLOOR_FILE if path.is_dir() else path
    try:
        floor = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise CompareError(
            f"--noise-floor {path}: {getattr(err, 'strerror', None) or err}"
        ) from None
    if not isinstance(floor, dict) or not set(NOISE_FLOOR_KEYS) <= floor.keys():
        raise CompareError(f"--noise-floor {path}: not a noise floor (needs {NOISE_FLOOR_KEYS})")
    return floor


def describe_noise_floor(floor: dict | None) -> str:
    """One sentence: the A/A, its ratios and what it called."""
    if not floor:
        return (
            "noise floor: none at hand (an A/A, `python -m kernel_lib ab REV REV`, measures one; "
            "`--noise-floor` reads it)"
        )
    when = f", {floor['measured_utc'][:10]}" if floor.get("measured_utc") else ""
    called = ", ".join(f"{n} {v}" for v, n in floor["verdicts"].items())
    return (
        f"noise floor: an A/A of git {floor['git']} on {floor['device']} (runs a side: "
        f"{floor['runs_a_side']}{when}) had ratios {floor['ratio_low']:.3f}-{floor['ratio_high']:.3f} over "
        f"{floor['records']} records (90 % within {floor['ratio_p05']:.3f}-"
        f"{floor['ratio_p95']:.3f}) and called {called or 'nothing'} at factor "
        f"{floor['factor']:g}"
    )


# -------------------------------------------------------------------------------------- output


def _only_counts(c: Comparison) -> tuple[int, int]:
    a, b = _by_key(c.a), _by_key(c.b)
    return len(set(a) - set(b)), len(set(b) - set(a))


def _header(c: Comparison) -> list[str]:
    lines = [f"A: {run.describe()}" for run in c.a] + [f"B: {run.describe()}" for run in c.b]
    if c.cross_platform:
        only_a, only_b = _only_counts(c)
        lines.append(
            "Different devices: ratios B/A of the medians of the run medians with a p10-p90 "
            "spread interval [min B p10 / max A p90, max B p90 / min A p10]; no verdicts. "
            f"{only_a} record(s) only in A, {only_b} only in B."
        )
    else:
        counts = ", ".join(f"{v} {k}" for k, v in sorted(c.counts.items()))
        lines.append(
            f"Same device: ratio = B/A of the medians of the run medians (> 1: B takes longer); "
            f"factor {c.factor:g}; one-sided exact permutation test (difference of means of the "
            f"run medians) at p <= {ALPHA:g} with >= {MIN_RUNS} runs a side; with fewer than "
            f"{RESOLVED_RUNS} runs on a side, a verdict also needs the closest runs of the two "
            f"sides apart by the factor (`apart`)."
        )
        lines.append(
            f"Rests on: {len(c.a)} run(s) of A, {len(c.b)} of B; factor {c.factor:g}; "
            f"{describe_noise_floor(c.noise_floor)}."
        )
        lines.append(f"Records: {counts}.")
    return lines


def _rounded(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame.copy()
    for col in ("a_ms", "b_ms"):
        if col in out:
            out[col] = out[col].map(lambda v: f"{v:.4g}" if pd.notna(v) else "")
    for col in ("ratio", "apart", "low", "high", "p"):
        if col in out:
            out[col] = out[col].map(lambda v: f"{v:.3f}" if pd.notna(v) else "")
    for col in ("a_runs", "b_runs"):
        if col in out:
            out[col] = out[col].map(lambda v: f"{int(v)}" if pd.notna(v) else "")
    for col in ("a_run_ms", "b_run_ms"):
        if col in out:
            out[col] = out[col].map(
                lambda v: " ".join(f"{x:.4g}" for x in v) if isinstance(v, list) else ""
            )
    return out.fillna("")


def _text_table(frame: pd.DataFrame) -> str:
    """Left-aligned text columns (pandas right-aligns them)."""
    out = frame.copy()
    for col in out.columns:
        if out[col].dtype == object or pd.api.types.is_string_dtype(out[col]):
            text = out[col].astype(str)
            out[col] = text.str.ljust(int(text.str.len().max()) if len(text) else 0)
    return out.to_string(index=False, justify="left")


QUIET = ("same", "untimed", "not run")  # verdicts the terminal table leaves out unless --all


def to_text(c: Comparison, *, show_all: bool = False) -> str:
    """The terminal report."""
    lines = _header(c)
    table = c.table
    if not show_all:
        if c.cross_platform:  # timed on both, or run on one side only
            table = table[table["ratio"].notna() | (table["a_status"] != table["b_status"])]
        else:
            table = table[~table["verdict"].isin(QUIET)]
    lines.append("")
    if table.empty:
        lines.append("Timings: nothing beyond the factor, lost, added or removed.")
    else:
        lines.append(_text_table(_rounded(table)))
    lines.append("")
    if c.metrics.empty:
        lines.append("Correctness figures: no change.")
    else:
        lines.append("Correctness figures that changed:")
        lines.append(_text_table(c.metrics.astype(object).map(str)))
    if c.cross_platform:
        lines.append("")
        if c.headlines.empty:
            lines.append("Headlines: none declared.")
        else:
            lines.append("Headlines (declared by the notebooks), side by side:")
            lines.append(_text_table(c.headlines[["headline", "a", "b"]]))
    return "\n".join(lines) + "\n"


def _jsonable(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars
        return _jsonable(value.item())
    return value


def _missing(value) -> bool:
    return not isinstance(value, (list, tuple, dict)) and bool(pd.isna(value))


def _records(frame: pd.DataFrame) -> list[dict]:
    return [
        {k: v for k, v in row.items() if not _missing(v)}
        for row in frame.astype(object).to_dict("records")
    ]


def to_json(c: Comparison) -> dict:
    """The comparison as JSON-ready data."""

    def run(r: Run) -> dict:
        return {
            "folder": str(r.folder),
            "platform": r.platform,
            "device": r.device,
            "run_id": r.run_id,
            "git": r.git,
            "stale_left_out": list(r.stale),
        }

    out = {
        "mode": "cross-platform" if c.cross_platform else "same-device",
        "factor": c.factor,
        "a": [run(r) for r in c.a],
        "b": [run(r) for r in c.b],
        "records": _records(c.table),
        "metrics": _records(c.metrics),
        "exit_code": c.exit_code,
    }
    if c.cross_platform:
        only_a, only_b = _only_counts(c)
        out.update(
            interval="[min B p10 / max A p90, max B p90 / min A p10] over runs",
            only_in_a=only_a,
            only_in_b=only_b,
            headlines=_records(c.headlines),
        )
    else:
        out.update(
            counts=c.counts,
            rests_on={"runs_a": len(c.a), "runs_b": len(c.b), "factor": c.factor},
            noise_floor=c.noise_floor,
            test="one-sided exact permutation test, difference of means of run medians",
            alpha=ALPHA,
            min_runs=MIN_RUNS,
            apart="closest runs of the two sides: min B / max A (B slower), max B / min A (faster)",
        )
    return _jsonable(out)


COLOURS = {"slower": "#f8d0d0", "lost": "#f8d0d0", "faster": "#d4f0d4", "unconfirmed": "#fff3c4"}


def to_html(c: Comparison) -> str:
    """A simple page: the header, the pandas-styled table, the metric changes, the headlines."""

    def colour(row: pd.Series) -> list[str]:
        shade = COLOURS.get(row.get("verdict"), "")
        return [f"background-color: {shade}" if shade else ""] * len(row)

    table = _rounded(c.table)
    styler = table.style.hide(axis="index").format(escape="html")
    if "verdict" in table:
        styler = styler.apply(colour, axis=1)
    parts = [
        "<!doctype html>",
        '<html><head><meta charset="utf-8"><title>kernel-workbook compare</title>',
        "<style>body{font-family:sans-serif;margin:2em} table{border-collapse:collapse}"
        " td,th{border:1px solid #ccc;padding:3px 6px;text-align:left}</style></head><body>",
        "<h1>Compare</h1>",
        *(f"<p>{html.escape(line)}</p>" for line in _header(c)),
        "<h2>Timings</h2>",
        styler.to_html(),
        "<h2>Correctness figures that changed</h2>",
        c.metrics.to_html(index=False) if len(c.metrics) else "<p>No change.</p>",
    ]
    if c.cross_platform:
        parts += [
            "<h2>Headlines</h2>",
            c.headlines.to_html(index=False) if len(c.headlines) else "<p>None declared.</p>",
        ]
    parts.append("</body></html>\n")
    return "\n".join(parts)


# ------------------------------------------------------------------------------------- command


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit code 2, raised instead of printing usage
        raise CompareError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m kernel_lib compare",
        usage="%(prog)s A... -- B... [--factor F] [--noise-floor FILE] [--json] [--html FILE] "
        "[--all]",
        description="Compare report folders A (before) with report folders B (after).",
        epilog=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("folders", nargs="*", help="report folders of this side")
    parser.add_argument("--factor", type=float, help=f"default {DEFAULT_FACTOR}")
    parser.add_argument(
        "--noise-floor", metavar="FILE", help="an A/A's noise-floor.json (of `ab REV REV`) to show"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--html", metavar="FILE", help="also write an HTML page")
    parser.add_argument("--all", action="store_true", help="table every record, not the changes")
    return parser


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Split `argv` at the first `--` into side A and side B (options may stand on either side);
    raises CompareError on bad input."""
    if "--" not in argv:
        if {"-h", "--help"} & set(argv):
            _parser().print_help()
            raise SystemExit(0)
        raise CompareError("compare needs `--` between the A and B folders: compare A... -- B...")
    cut = argv.index("--")
    parser = _parser()
    left = parser.parse_intermixed_args(argv[:cut])
    right = parser.parse_intermixed_args(argv[cut + 1 :])
    if not left.folders or not right.folders:
        raise CompareError("compare needs report folders on both sides of `--`")
    merged = argparse.Namespace(a=left.folders, b=right.folders)
    for name in ("factor", "html", "noise_floor"):
        value = getattr(right, name) if getattr(right, name) is not None else getattr(left, name)
        setattr(merged, name, value)
    if merged.factor is None:
        merged.factor = DEFAULT_FACTOR
    merged.json = left.json or right.json
    merged.all = left.all or right.all
    return merged


def cli(argv: list[str]) -> int:
    """The `compare` command: print the comparison, return its exit code (2: bad input)."""
    try:
        args = parse_args(argv)
        floor = read_noise_floor(args.noise_floor) if args.noise_floor else None
        comparison = compare_folders(args.a, args.b, factor=args.factor, noise_floor=floor)
    except ParameterError as err:  # a CompareError, or a damaged report file
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(to_json(comparison), sys.stdout, indent=1)
        print()
    else:
        sys.stdout.write(to_text(comparison, show_all=args.all))
    if args.html:
        try:
            Path(args.html).write_text(to_html(comparison))
        except OSError as err:
            print(f"error: --html {args.html}: {err.strerror}", file=sys.stderr)
            return 2
        if not args.json:
            print(f"html: {args.html}")
    return comparison.exit_code
