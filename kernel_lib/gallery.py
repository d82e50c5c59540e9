"""The gallery: `outputs/index.html` lists every report folder under outputs/ and shows each topic's
declared headlines side by side across platforms; each report's own index.html gets the same plots
for its topics and a correctness summary (`platform_sections`). Built with pandas and matplotlib
from saved records and run.json files only, so `python -m kernel_lib report` rebuilds everything
without running a notebook.
"""

from __future__ import annotations

import base64
import html
import io
import math
import textwrap
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from kernel_lib.aggregate import aggregate_records, counts, repeat_of, run_folders
from kernel_lib.report import build_report, page, read_report, scroll, shape_text
from kernel_lib.reportfiles import notebook_records, read_run, read_table

RUN_FILE = "run.json"  # as kernel_lib.runner.RUN_FILE
GALLERY = "index.html"
COLOURS = {"faster": "#2a7f3f", "slower": "#b33a3a", "no clear difference": "#8c8c8c"}
FRACTION_COLOUR = "#3b6ea8"


# --------------------------------------------------------------------------------------- records
def report_folders(outputs: str | Path) -> list[Path]:
    """The report folders directly under `outputs` (each has a run.json), by name."""
    outputs = Path(outputs)
    if not outputs.is_dir():
        return []
    return sorted(p for p in outputs.iterdir() if p.is_dir() and (p / RUN_FILE).exists())


def report_records(folder: str | Path) -> pd.DataFrame:
    """A report's records with a `notebook` column: from its `<notebook>.results.json` files; for a
    repeated report, the aggregate over its runs (`aggregate.aggregate_records`); where the JSON
    files are not kept (outputs/reference in git), from its results.csv."""
    folder = Path(folder)
    if repeat_of(folder) > 1:
        return aggregate_records(folder)
    records = notebook_records(folder)
    if not records.empty:
        return records
    table = folder / "results.csv"
    records = read_table(table) if table.exists() else pd.DataFrame()
    return records if len(records.columns) else pd.DataFrame(columns=["notebook", "status"])


def correctness_summary(records: pd.DataFrame) -> pd.DataFrame:
    """Per notebook: records whose check passed, whose check failed (status `wrong`), skipped
    (cannot run here), raised (status `failed`), and measured without a check."""
    columns = ["notebook", "checks passed", "checks failed", "skipped", "raised", "no check"]
    if records.empty or "status" not in records:
        return pd.DataFrame(columns=columns)
    passed = (
        records["check.pass"].map(lambda v: v is True or v == 1 or str(v) == "True")
        if "check.pass" in records
        else pd.Series(False, index=records.index)
    )
    has_check = (
        records["check.pass"].notna()
        if "check.pass" in records
        else pd.Series(False, index=records.index)
    )
    status = records["status"]
    notebook = records["notebook"] if "notebook" in records else records.get("topic")
    frame = pd.DataFrame(
        {
            "notebook": notebook.fillna("?"),
            "checks passed": passed & has_check,
            "checks failed": (has_check & ~passed) | (status == "wrong") & ~has_check,
            "skipped": status == "skipped",
            "raised": status == "failed",
            "no check": (status == "ok") & ~has_check,
        }
    )
    return frame.groupby("notebook", sort=False).sum().astype(int).reset_index()[columns]


# ------------------------------------------------------------------------------------- headlines
def headline_rows(records: pd.DataFrame, platform: str) -> pd.DataFrame:
    """One row per declared headline of a report: topic, headline, platform, status, reason,
    kind ('ratio' vs its baseline, or 'fraction' of a measured ceiling), value, low/high (the 95 %
    interval of a ratio), against (the baseline or ceiling), verdict, for a repeated report runs
    and run_min/run_max (the runs' ratios), and the dtype and shape it was measured at."""
    columns = [
        "topic", "headline", "platform", "status", "reason", "kind", "value", "low", "high",
        "against", "verdict", "runs", "run_min", "run_max", "dtype", "shape",
    ]  # fmt: skip
    if records.empty or "headline" not in records:
        return pd.DataFrame(columns=columns)
    rows = []
    for _, r in records[records["headline"].notna()].iterrows():
        ratio, fraction = r.get("ratio_vs_baseline"), r.get("fraction_of_peak")
        is_ratio = pd.notna(ratio)
        rows.append(
            {
                "topic": r.get("topic"),
                "headline": r["headline"],
                "platform": platform,
                "status": r["status"],
                "reason": r.get("reason") if isinstance(r.get("reason"), str) else "",
                "kind": "ratio" if is_ratio else "fraction" if pd.notna(fraction) else None,
                "value": ratio if is_ratio else fraction,
                "low": r.get("ratio_low") if is_ratio else None,
                "high": r.get("ratio_high") if is_ratio else None,
                "against": r.get("baseline") if is_ratio else r.get("peak_basis"),
                "verdict": r.get("verdict") if is_ratio else None,
                "runs": r.get("runs"),
                "run_min": r.get("ratio_min") if is_ratio else None,
                "run_max": r.get("ratio_max") if is_ratio else None,
                "dtype": r.get("dtype") if isinstance(r.get("dtype"), str) else "",
                "shape": shape_text(r),
            }
        )
    frame = pd.DataFrame(rows, columns=columns)
    return frame.drop_duplicates(["topic", "headline", "platform"])


def _num(value) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def headline_text(row: pd.Series) -> str:
    """'1.12x [1.08, 1.18] vs dense_gemm', '0.87 of copy', or 'skipped: why'."""
    if row["status"] != "ok" or _num(row["value"]) is None:
        return f"{row['status']}: {row['reason']}" if row["reason"] else str(row["status"])
    value, low, high = _num(row["value"]), _num(row["low"]), _num(row["high"])
    if row["kind"] == "fraction":
        return f"{value:.2f} of {row['against']}"
    text = f"{value:.2f}x" + (f" [{low:.2f}, {high:.2f}]" if low is not None and high else "")
    text += f" vs {row['against']}"
    if row["verdict"] and row["verdict"] != "faster":
        text += f" ({row['verdict']})"
    lo, hi, runs = _num(row.get("run_min")), _num(row.get("run_max")), _num(row.get("runs"))
    if runs and runs > 1 and lo is not None and hi is not None:
        text += f"; {int(runs)} runs: {lo:.2f}–{hi:.2f}"
    return text


def _measured_at(row: pd.Series) -> str:
    """'bfloat16 T=4096,D=512,...': what a platform's headline was measured at (platforms size
    their own cases, so the same headline may differ in shape, or in dtype, between them)."""
    return " ".join(part for part in (row["dtype"], row["shape"]) if part)


def _table_text(row: pd.Series) -> str:
    text, at = headline_text(row), _measured_at(row)
    return f"{text} · {at}" if row["status"] == "ok" and at else text


def headline_figures(rows: pd.DataFrame, platforms: list[str]) -> dict[str, Figure]:
    """Per topic, one figure with one panel per declared headline and one horizontal bar per
    platform: the ratio (or fraction of the ceiling) with its 95 % interval as whiskers, a
    reference line at 1; a headline that did not run on a platform says why in place of its bar."""
    figures = {}
    for topic, topic_rows in rows.groupby("topic", sort=False):
        panels = [panel for _, panel in topic_rows.groupby("headline", sort=False)]
        titles = [textwrap.fill(_panel_title(panel), 110) for panel in panels]
        height = sum(1.05 + 0.32 * len(platforms) + 0.15 * t.count("\n") for t in titles)
        fig = Figure(figsize=(9, height + 0.3), layout="constrained")
        axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
        for ax, panel, title in zip(axes, panels, titles):
            _headline_panel(ax, panel, platforms, title)
        if (topic_rows["kind"] == "ratio").any():
            handles = [Patch(color=c, label=v) for v, c in COLOURS.items()]
            fig.legend(handles=handles, loc="outside upper right", ncols=3, fontsize=8)
        figures[str(topic)] = fig
    return figures


def _panel_title(rows: pd.DataFrame) -> str:
    """The headline, then the dtype and shape its platforms measured it at, or which of the two
    differ between them."""
    label = rows["headline"].iloc[0]
    ok = rows[rows["status"] == "ok"]
    if ok.empty:
        return str(label)
    at = set(ok.apply(_measured_at, axis=1))
    if len(at) == 1:
        (measured,) = at
        return f"{label} · {measured}" if measured else str(label)
    differ = [f"{name}s" for name in ("dtype", "shape") if ok[name].nunique() > 1]
    return f"{label} ({' and '.join(differ)} differ between platforms: see the table)"


def _headline_panel(ax, rows: pd.DataFrame, platforms: list[str], title: str) -> None:
    by_platform = rows.set_index("platform")
    kinds = set(rows["kind"].dropna())
    top = 1.0
    for y, platform in enumerate(platforms):
        if platform not in by_platform.index:
            ax.text(0.02, y, "no record from this platform", va="center", fontsize=8, color="0.4")
            continue
        row = by_platform.loc[platform]
        value, low, high = _num(row["value"]), _num(row["low"]), _num(row["high"])
        if row["status"] != "ok" or value is None:
            reason = textwrap.shorten(headline_text(row), 90)
            ax.text(0.02, y, reason, va="center", fontsize=8, color="0.4")
            continue
        colour = COLOURS.get(row["verdict"], FRACTION_COLOUR) if row["kind"] == "ratio" else None
        error = None
        if low is not None and high is not None:
            error = [[max(value - low, 0)], [max(high - value, 0)]]
        ax.barh(y, value, xerr=error, color=colour or FRACTION_COLOUR, capsize=3, height=0.6)
        ax.text(max(value, high or value), y, f"  {value:.2f}", va="center", fontsize=8)
        top = max(top, value, high or value)
    ax.axvline(1.0, color="k", lw=1, ls="--")
    ax.set_xlim(0, top * 1.2)
    ax.set_ylim(len(platforms) - 0.5, -0.5)  # first platform on top
    dtype_of = by_platform["dtype"]
    ticks = [f"{p} · {dtype_of[p]}" if dtype_of.get(p) else p for p in platforms]
    ax.set_yticks(range(len(platforms)), ticks, fontsize=8)
    ax.set_title(title, fontsize=9, loc="left")
    if kinds == {"fraction"}:
        ax.set_xlabel("fraction of the measured ceiling (1 = at the ceiling)", fontsize=8)
    else:
        ax.set_xlabel(
            "speed-up over the baseline (x; > 1 faster; whiskers: 95 % interval)", fontsize=8
        )
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(True, axis="x", alpha=0.3)


def png_data_uri(fig: Figure) -> str:
    """The figure as an embeddable `data:image/png;base64,...` URI."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _figures_html(rows: pd.DataFrame, platforms: list[str]) -> str:
    parts = []
    for topic, fig in headline_figures(rows, platforms).items():
        alt = html.escape(f"{topic} headlines")
        parts.append(f'<h3>{html.escape(topic)}</h3><img alt="{alt}" src="{png_data_uri(fig)}">')
    return "\n".join(parts)


def platform_sections(records: pd.DataFrame, platform: str) -> tuple[str, str]:
    """A report's own headline plots (one bar each: this platform) and correctness summary, as
    (HTML, Markdown) sections for its index.html and SUMMARY.md."""
    rows = headline_rows(records, platform)
    checks = correctness_summary(records)
    table_md = checks.to_markdown(index=False) if len(checks) else "No records."
    table_html = scroll(checks.to_html(index=False)) if len(checks) else "<p>No records.</p>"
    plots = (
        _figures_html(rows, [platform]) if len(rows) else "<p>No notebook declared a headline.</p>"
    )
    markdown = "## Correctness\n\n" + table_md
    page = f"<h2>Headlines</h2>\n{plots}\n<h2>Correctness</h2>\n{table_html}"
    return page, markdown


# --------------------------------------------------------------------------------------- gallery
def _link(folder: Path, target: str, text: str) -> str:
    """A link relative to the gallery, only when the file exists."""
    if not (folder / target).exists():
        return ""
    return f'<a href="{html.escape(target)}">{html.escape(text)}</a>'


def _platform_row(outputs: Path, folder: Path, run: dict, records: pd.DataFrame) -> dict:
    env = run.get("environment", {})
    statuses = [nb["status"] for nb in run.get("notebooks", [])]
    checks = correctness_summary(records).sum(numeric_only=True)
    busy = [
        nb["notebook"] for nb in run.get("notebooks", []) if (nb.get("machine") or {}).get("busy")
    ]
    name = folder.name
    links = " · ".join(
        link
        for link in (
            _link(outputs, f"{name}/index.html", "report"),
            _link(outputs, f"{name}/SUMMARY.md", "summary"),
            _link(outputs, f"{name}/results.csv", "records"),
        )
        if link
    )
    return {
        "platform": name,
        "device": f"{env.get('name', '?')} ({env.get('backend', '?')})",
        "date (UTC)": run.get("started_utc", "?"),
        "git": run.get("git", "?"),
        "runs": run.get("repeat", 1),
        "notebooks": counts(statuses) if statuses else "none",
        "checks": ", ".join(
            f"{int(checks.get(k, 0))} {k}" for k in ("checks passed", "checks failed")
        )
        + f", {int(checks.get('skipped', 0))} skipped",
        "busy machine": ", ".join(busy),
        "links": links,
    }


def build_gallery(outputs: str | Path) -> Path:
    """Write `outputs/index.html`: every report folder under `outputs` (device, date, git revision,
    notebook statuses, checks, links) and each topic's declared headlines side by side across
    platforms, as a table and as plots (one panel per headline, one bar per platform)."""
    outputs = Path(outputs)
    folders = report_folders(outputs)
    platform_rows, headline_frames = [], []
    for folder in folders:
        run = read_run(folder / RUN_FILE)
        records = report_records(folder)
        platform_rows.append(_platform_row(outputs, folder, run, records))
        headline_frames.append(headline_rows(records, folder.name))
    platforms = [f.name for f in folders]
    frames = [f for f in headline_frames if len(f)]
    rows = pd.concat(frames, ignore_index=True) if frames else headline_rows(pd.DataFrame(), "")
    listing = pd.DataFrame(platform_rows)
    if len(listing):
        cells = listing.map(lambda v: html.escape(v) if isinstance(v, str) else v)
        cells["links"] = listing["links"]
        cells["platform"] = [
            _link(outputs, f"{p}/index.html", p) or html.escape(p) for p in listing["platform"]
        ]
        listing_html = scroll(cells.to_html(index=False, escape=False))
    else:
        listing_html = "<p>No report folder (with a run.json) under this folder yet.</p>"
    if len(rows):
        table = rows.assign(text=rows.apply(_table_text, axis=1)).pivot_table(
            index=["topic", "headline"],
            columns="platform",
            values="text",
            aggfunc="first",
            sort=False,
        )
        table = table.reindex(columns=[p for p in platforms if p in table.columns]).fillna("—")
        headlines_html = scroll(table.to_html()) + "\n" + _figures_html(rows, platforms)
    else:
        headlines_html = "<p>No report declares a headline yet.</p>"
    body = f"""<p>Every report folder under <code>{html.escape(outputs.name)}/</code>, and each topic's
declared headlines side by side. Ratios are baseline / subject per interleaved round, median, with a
95 % interval (&gt; 1: the subject is faster); a repeated report shows the median over its runs with
the envelope of their intervals. Rebuilt from records by <code>python -m kernel_lib report</code>.</p>
<h2>Platforms</h2>{listing_html}
<h2>Headlines</h2>{headlines_html}"""
    target = outputs / GALLERY
    target.write_text(page("Kernel workbook: every platform", body))
    return target


def rebuild_reports(folders: list[str | Path] | None = None, *, outputs: str | Path) -> list[Path]:
    """Rebuild the reports of `folders` (default: every report folder under `outputs`) from their
    records: a repeated report's runs first, then its aggregate. Every file is read, and checked,
    before any report is written. Returns the index.html files."""
    folders = [Path(f) for f in folders] if folders else report_folders(outputs)
    targets = [
        target
        for folder in folders
        for target in (*(run_folders(folder) if repeat_of(folder) > 1 else ()), folder)
    ]
    reports = [(target, read_report(target)) for target in targets]
    return [build_report(target, report) for target, report in reports]
