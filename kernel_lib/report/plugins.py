"""Users' kernels (kernel_lib.plugins) in what people read: each plug-in's records against their
case's baseline and against the best built-in of the same compare (the fastest ok record of ours
that is not the baseline; their paired round medians), as a line per slot for the findings cell
and a table for the report page and the gallery. Nothing at all where no record is a plug-in's.
Every name, path and reason in them is the user's text: escaped where it meets HTML or Markdown."""

from __future__ import annotations

import html
import math
import statistics
import textwrap

import pandas as pd

from kernel_lib.records import shape_text, verdict
from kernel_lib.report.markup import details, markdown_text, table
from kernel_lib.timing import ratio

BEST = ("best_builtin", "vs_best", "vs_best_low", "vs_best_high")  # a plug-in's record's, added
COMPARE = ("run", "notebook", "topic", "case", "dtype", "mode")  # and the shape: one compare
STATUS_ORDER = ("ok", "wrong", "failed", "skipped")
FEW = 2  # a plug-in timed at this many cases or fewer: each case's figures, else their median
TITLE = "Your kernels"
NOTE = (
    "Each plug-in against its case's baseline and against the best built-in of the same compare "
    "(the fastest of ours there, paired by round): > 1 is yours faster; [95 % interval]."
)


def plugin_mask(records: pd.DataFrame) -> pd.Series:
    """Which records are a plug-in's (they carry `plugin.name`)."""
    if "plugin.name" not in records:
        return pd.Series(False, index=records.index)
    return records["plugin.name"].notna()


def _compare_keys(records: pd.DataFrame) -> pd.Series:
    columns = [c for c in COMPARE if c in records]
    return records.apply(lambda r: (*(str(r[c]) for c in columns), shape_text(r)), axis=1)


def _rounds(value) -> list[float]:
    return [float(v) for v in value] if isinstance(value, (list, tuple)) else []


def _best(group: pd.DataFrame, mine: pd.Series) -> pd.Series | None:
    """The fastest ok record of ours in one compare that is not its baseline, or None."""
    baselines = {str(b).split(" (")[0] for b in group["baseline"].dropna()}
    ours = group[
        ~mine[group.index]
        & (group["status"] == "ok")
        & group["median_ms"].notna()
        & ~group["implementation"].isin(baselines)
    ]
    return ours.loc[ours["median_ms"].idxmin()] if len(ours) else None


def _finite(value: float) -> float:
    return value if math.isfinite(value) else math.nan


def with_best_builtin(records: pd.DataFrame) -> pd.DataFrame:
    """`records` with BEST on each plug-in's ok record: the best built-in of its compare and the
    ratio best / plug-in of their paired round medians (`timing.ratio`) with its 95 % interval;
    `records` itself where no record is a plug-in's."""
    mine = plugin_mask(records)
    if not mine.any():
        return records
    out = records.assign(best_builtin=None, **dict.fromkeys(BEST[1:], math.nan))
    for _, group in records.groupby(_compare_keys(records), sort=False):
        best = _best(group, mine)
        if best is None:
            continue
        for index, row in group[mine[group.index] & (group["status"] == "ok")].iterrows():
            theirs = _rounds(best.get("round_medians_ms"))
            yours = _rounds(row.get("round_medians_ms"))
            out.at[index, "best_builtin"] = best["implementation"]
            if theirs and len(theirs) == len(yours):
                r = ratio(theirs, yours)
                out.loc[index, list(BEST[1:])] = [r.value, _finite(r.low), _finite(r.high)]
    return out


def plugin_records(records: pd.DataFrame) -> pd.DataFrame:
    """The plug-ins' records, each with its best built-in (BEST, `with_best_builtin`)."""
    mine = plugin_mask(records)
    if mine.any() and "vs_best" not in records:
        records = with_best_builtin(records)
    return records[mine]


def _text(value) -> str:
    return value if isinstance(value, str) else ""


def _number(value) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def _where(row: pd.Series) -> str:
    """'throughput forward_backward bfloat16 E=8,T=64': a plug-in record's case."""
    parts = (_text(row.get(c)) for c in ("case", "mode", "dtype"))
    return " ".join(p for p in (*parts, shape_text(row)) if p)


def _ratio_text(value, low, high, against: str) -> str:
    """'1.31x [1.20, 1.40] vs dense_gemm', '(slower)' or '(no clear difference)' added as in
    the headlines; '' without a ratio."""
    value, low, high = _number(value), _number(low), _number(high)
    if value is None:
        return ""
    interval = f" [{low:.2f}, {high:.2f}]" if low is not None and high is not None else ""
    word = verdict(value, low, high)
    return f"{value:.2f}x{interval} vs {against}" + (f" ({word})" if word != "faster" else "")


def _vs_baseline(row: pd.Series) -> str:
    return _ratio_text(
        row.get("ratio_vs_baseline"), row.get("ratio_low"), row.get("ratio_high"),
        _text(row.get("baseline")),
    )  # fmt: skip


def _vs_best(row: pd.Series, label: str = "") -> str:
    against = label + _text(row.get("best_builtin"))
    return _ratio_text(
        row.get("vs_best"), row.get("vs_best_low"), row.get("vs_best_high"), against
    )


def _status(row: pd.Series) -> str:
    reason = _text(row.get("reason"))
    return f"{row['status']}: {reason}" if row["status"] != "ok" and reason else str(row["status"])


def _code(row: pd.Series) -> str:
    """'module my_kernels · file /home/me/k.py · sha256 0123456789abcdef · git 1a2b3c-dirty'."""
    fields = (("module", "module"), ("file", "file"), ("sha256", "sha256"), ("git", "revision"))
    found = ((label, _text(row.get(f"plugin.{key}"))) for label, key in fields)
    return " · ".join(f"{label} {value}" for label, value in found if value)


def plugin_table(records: pd.DataFrame) -> pd.DataFrame:
    """One row per plug-in record (text): slot, name, case, status (with its reason), ratio vs
    its baseline and vs the best built-in (each with its interval), and the code that ran."""
    rows = plugin_records(records)
    return pd.DataFrame(
        {
            "slot": rows["plugin.slot"].map(_text),
            "name": rows["plugin.name"].map(_text),
            "case": [_where(r) for _, r in rows.iterrows()],
            "status": [_status(r) for _, r in rows.iterrows()],
            "vs baseline": [_vs_baseline(r) for _, r in rows.iterrows()],
            "vs best built-in": [_vs_best(r) for _, r in rows.iterrows()],
            "code": [_code(r) for _, r in rows.iterrows()],
        }
    )


def _counts(rows: pd.DataFrame) -> str:
    """'3 ok, 1 wrong, 1 skipped (wrong: why)': its records' statuses, the first not ok's why."""
    seen = rows["status"].value_counts()
    text = ", ".join(f"{seen[s]} {s}" for s in STATUS_ORDER if s in seen)
    bad = rows[rows["status"] != "ok"]
    if len(bad):
        first = bad.iloc[0]
        text += f" ({first['status']}: {textwrap.shorten(_text(first['reason']), 120)})"
    return text


def _spread(values: pd.Series, against: str) -> str:
    """'1.31x over 6 cases (1.10–1.62) vs dense_gemm'."""
    values = values.dropna().astype(float)
    return (
        f"{statistics.median(values):.2f}x over {len(values)} cases "
        f"({values.min():.2f}–{values.max():.2f}) vs {against}"
    )


def _plugin_text(name: str, rows: pd.DataFrame) -> str:
    """A plug-in's figures in one slot: its statuses, then each case's ratios (FEW cases or
    fewer) or their median over the cases with its range."""
    timed = rows[rows["ratio_vs_baseline"].notna() | rows["vs_best"].notna()]
    if len(timed) <= FEW:
        figures = [
            f"{_where(r)}: "
            + ", ".join(t for t in (_vs_baseline(r), _vs_best(r, "best built-in ")) if t)
            for _, r in timed.iterrows()
        ]
    else:
        baselines = timed["baseline"].dropna().unique()
        against = {
            "ratio_vs_baseline": baselines[0] if len(baselines) == 1 else "each case's baseline",
            "vs_best": "the best built-in",
        }
        figures = [
            ", ".join(_spread(timed[c], a) for c, a in against.items() if timed[c].notna().any())
        ]
    return "; ".join([f"{name}: {_counts(rows)}", *figures])


def plugin_lines(records: pd.DataFrame) -> list[str]:
    """A line per slot with plug-in records: '<slot> — <name>: <statuses>; <figures>', each
    plug-in of the slot after the other (' · '); none without plug-in records."""
    rows, lines = plugin_records(records), []
    if rows.empty:
        return lines
    for slot, in_slot in rows.groupby("plugin.slot", sort=False):
        plugins = in_slot.groupby("plugin.name", sort=False)
        lines.append(f"{slot} — " + " · ".join(_plugin_text(n, mine) for n, mine in plugins))
    return lines


def _markdown_lines(lines: list[str]) -> str:
    return "".join(f"- {markdown_text(line)}\n" for line in lines)


def plugin_markdown(records: pd.DataFrame) -> str:
    """The findings cell's lead: the slots' lines under a bold title, '' without plug-in
    records."""
    lines = plugin_lines(records)
    return f"**{TITLE}.** {NOTE}\n\n{_markdown_lines(lines)}\n" if lines else ""


def plugin_sections(records: pd.DataFrame) -> tuple[str, str]:
    """A report's 'Your kernels' section as (HTML, Markdown): the slots' lines and the table of
    every plug-in record; ('', '') without plug-in records."""
    lines = plugin_lines(records)
    if not lines:
        return "", ""
    rows = plugin_table(records)
    items = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
    page = f"<h2>{TITLE}</h2><p><small>{html.escape(NOTE)}</small></p><ul>{items}</ul>"
    markdown = rows.map(markdown_text).to_markdown(index=False)
    return (
        page + details(f"Every plug-in record ({len(rows)})", table(rows)) + "\n",
        f"## {TITLE}\n\n{NOTE}\n\n{_markdown_lines(lines)}\n{markdown}",
    )


def gallery_section(reports: dict[str, pd.DataFrame]) -> str:
    """The gallery's 'Your kernels' section: every plug-in record of the reports (by platform)
    in one table; '' where none has one."""
    frames = [
        plugin_table(r).assign(platform=p) for p, r in reports.items() if plugin_mask(r).any()
    ]
    if not frames:
        return ""
    rows = pd.concat(frames, ignore_index=True)
    rows = rows[["platform", *rows.columns[:-1]]]
    lines = [f"{p}: {line}" for p, r in reports.items() for line in plugin_lines(r)]
    items = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
    folded = details(f"Every plug-in record ({len(rows)})", table(rows))
    return f"<h2>{TITLE}</h2><p><small>{html.escape(NOTE)}</small></p><ul>{items}</ul>{folded}\n"
