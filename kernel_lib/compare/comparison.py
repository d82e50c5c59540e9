"""Two sides' runs compared record by record: the table of verdicts (across devices: ratios
with spread intervals), the correctness figures that changed, the headlines side by side."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from kernel_lib.compare.runs import CompareError, Run, _by_key, load_side
from kernel_lib.compare.verdict import (
    _ratio,
    apart,
    chosen_factor,
    record_verdict,
    spread_interval,
)

FAILING = ("slower", "lost")  # verdicts that make the exit code 1
# Timing-derived metrics are not correctness figures: they vary with the timing itself.
TIMING_METRIC_MARKS = ("per_s", "tflops", "gbps", "_ms", "us_per", "seconds")
CHECK_FIELDS = ("rel_error", "max_abs_error", "tolerance", "pass")


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
    factor_from: str = "given"  # why this factor (verdict.chosen_factor)

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


def _samples(rows: list[dict]) -> list[float]:
    """A side's raw samples, pooled over its runs (none when a run kept none)."""
    kept = [r.get("samples_ms") or [] for r in rows]
    return [float(v) for s in kept for v in s] if all(kept) else []


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
    a: list[Run], b: list[Run], *, factor: float | None = None, noise_floor: dict | None = None
) -> Comparison:
    """Compare two sides' runs (`noise_floor`: read_noise_floor's, shown with the verdicts; it
    sets the factor when none is given: verdict.chosen_factor); raises CompareError when they
    share no record."""
    if factor is not None and not factor > 1:
        raise CompareError(f"--factor {factor}: must be > 1")
    factor, factor_from = chosen_factor(factor, noise_floor, a[0].platform, a[0].device)
    a_rows, b_rows = _by_key(a), _by_key(b)
    common = set(a_rows) & set(b_rows)
    if not common:
        raise CompareError("the two sides have no record in common")
    identities = {(r.platform, r.device) for r in (*a, *b)}
    cross = len(identities) > 1
    busy = any(run.busy for run in (*a, *b))
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
            verdict, ratio, p, low, high = record_verdict(
                ma, mb, _samples(ra), _samples(rb), factor, busy=busy
            )
            row.update(verdict=verdict, ratio=ratio, low=low, high=high, apart=apart(ma, mb), p=p)
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
        columns = ["key", "verdict", "a_ms", "b_ms", "ratio", "low", "high", "apart", "p"]
        columns += ["a_runs", "b_runs"]
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
        factor_from=factor_from,
    )


def _empty_headlines() -> pd.DataFrame:
    return pd.DataFrame(columns=["headline", "a", "b", "a_record", "b_record"])


def compare_folders(
    a: list[str | Path],
    b: list[str | Path],
    *,
    factor: float | None = None,
    noise_floor: dict | None = None,
) -> Comparison:
    return compare_runs(load_side(a), load_side(b), factor=factor, noise_floor=noise_floor)
