"""A comparison as terminal text, JSON-ready data and an HTML page."""

from __future__ import annotations

import html
import math

import pandas as pd

from kernel_lib.compare.comparison import Comparison
from kernel_lib.compare.noise import describe_noise_floor
from kernel_lib.compare.runs import Run, _by_key
from kernel_lib.compare.verdict import ALPHA, MIN_RUNS, RESOLVED_RUNS


def _only_counts(c: Comparison) -> tuple[int, int]:
    a, b = _by_key(c.a), _by_key(c.b)
    return len(set(a) - set(b)), len(set(b) - set(a))


def _code(rows: list[dict]) -> set[str]:
    return {r["plugin"]["sha256"] for r in rows if (r.get("plugin") or {}).get("sha256")}


def code_changed(c: Comparison) -> list[dict]:
    """Per user's kernel (kernel_lib.plugins: slot, name) of the records both sides ran, its code
    (file's or cell's SHA-256) on each side, where they differ."""
    a, b = _by_key(c.a), _by_key(c.b)
    changed: dict[tuple[str, str], tuple[set, set]] = {}
    for key in sorted(set(a) & set(b)):
        code_a, code_b = _code(a[key]), _code(b[key])
        if code_a and code_b and code_a != code_b:
            plugin = a[key][-1]["plugin"]
            seen = changed.setdefault((plugin["slot"], plugin["name"]), (set(), set()))
            seen[0].update(code_a)
            seen[1].update(code_b)
    return [
        {"slot": slot, "name": name, "a": sorted(in_a), "b": sorted(in_b)}
        for (slot, name), (in_a, in_b) in changed.items()
    ]


def _header(c: Comparison) -> list[str]:
    lines = [f"A: {run.describe()}" for run in c.a] + [f"B: {run.describe()}" for run in c.b]
    lines += [
        f"Your code changed: {e['slot']} {e['name']} ran sha256 {', '.join(e['a'])} in A, "
        f"{', '.join(e['b'])} in B: a difference may come from it."
        for e in code_changed(c)
    ]
    locks = {
        side: {r.lock or "no lock named" for r in runs} for side, runs in (("A", c.a), ("B", c.b))
    }
    if locks["A"] != locks["B"] or len(locks["A"]) > 1:
        lines.append(
            f"Environment changed: A ran under {', '.join(sorted(locks['A']))}; B under "
            f"{', '.join(sorted(locks['B']))}: a difference may come from the packages."
        )
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
            f"sides apart by the factor (`apart`); with fewer than {MIN_RUNS} runs a side, the "
            f"whole 95 % bootstrap interval of the ratio from the runs' raw samples (`low`, "
            f"`high`) beyond the factor as well."
        )
        lines.append(
            f"Rests on: {len(c.a)} run(s) of A, {len(c.b)} of B; factor {c.factor:g} "
            f"({c.factor_from}); "
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
            "lock": r.lock,
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
    if changed := code_changed(c):
        out["code_changed"] = changed
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
            rests_on={
                "runs_a": len(c.a),
                "runs_b": len(c.b),
                "factor": c.factor,
                "factor_from": c.factor_from,
            },
            noise_floor=c.noise_floor,
            test="one-sided exact permutation test, difference of means of run medians",
            alpha=ALPHA,
            min_runs=MIN_RUNS,
            apart="closest runs of the two sides: min B / max A (B slower), max B / min A (faster)",
            interval=f"with fewer than {MIN_RUNS} runs a side: [low, high], the 95 % bootstrap "
            "interval of median(B) / median(A) from the runs' raw samples",
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
