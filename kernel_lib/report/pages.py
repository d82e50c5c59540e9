"""A report folder's own pages: `index.html`, `SUMMARY.md` and `results.csv`, built from its saved
records and the runner's `run.json` (never from rendered output). A page leads with what was found
(the user's kernels where any ran, `report.plugins`; the declared headlines as small multiples),
then the notebooks, with the correctness summary, flags and environment below. A repeated report
(`run --repeat N`) gets the same page over its aggregate, with its runs and the spread of every
record."""

from __future__ import annotations

import html
import textwrap
from pathlib import Path

import pandas as pd

from kernel_lib.report.aggregate import RUN_COLUMNS, counts, spread_table
from kernel_lib.report.findings import (
    budget_flags,
    busy_flags,
    correctness_summary,
    flag_table,
    headline_rows,
    headlines,
    machine_text,
)
from kernel_lib.report.markup import details, href, page, png_data_uri, table, text
from kernel_lib.report.panels import COLOURS, panels
from kernel_lib.report.phases import report_phases_html
from kernel_lib.report.plugins import plugin_sections
from kernel_lib.report.read import Report, read_report, report_folders
from kernel_lib.results.folders import repeat_of, run_folders

LEGEND = (
    "Ratios: " + ", ".join(f'<span style="color:{c}">■</span> {v}' for v, c in COLOURS.items())
    + "; whiskers: 95 % interval, dashed line: 1 (the baseline). A fraction of a ceiling is blue,"
    " its line at 1 the ceiling (a dense GEMM of the same FLOPs, a copy): it can at best reach it."
)  # fmt: skip
NOTEBOOK_COLUMNS = ["notebook", "status", "wall_s", "run", "machine", "records", "report"]


def panels_html(
    rows: pd.DataFrame,
    platforms: list[str],
    trends: pd.DataFrame | None = None,
    phases: dict[str, str] | None = None,
) -> str:
    """Per topic, its headline panels as small multiples: a grid that wraps to the window, each
    panel captioned with what each bar was measured at (with `trends`, each key's trend; with
    `phases`, each key's phase split image under its bars)."""
    parts = []
    for topic, topic_panels in panels(rows, platforms, trends).items():
        figures = []
        for p in topic_panels:
            caption = "<br>".join(text(c) for c in p.caption)
            figures.append(
                f'<figure class="panel" data-key="{html.escape(p.key)}" data-bars="{p.bars}" '
                f'data-platforms="{p.platforms}" data-trend-points="{p.trend_points}">'
                f'<img alt="{html.escape(p.title)}" src="{png_data_uri(p.figure)}">'
                f"{(phases or {}).get(p.key, '')}<figcaption><code>{html.escape(p.key)}</code>"
                f"<br>{caption}</figcaption></figure>"
            )
        parts.append(f'<h3>{html.escape(topic)}</h3><div class="panels">{"".join(figures)}</div>')
    return f"<p><small>{LEGEND}</small></p>" + "\n".join(parts)


def platform_sections(records: pd.DataFrame, platform: str) -> tuple[str, str, str]:
    """A report's headlines (HTML panels; Markdown one per line, by notebook) and its correctness
    summary (HTML folded; Markdown), as (headlines HTML, correctness HTML, Markdown)."""
    rows = headline_rows(records, platform)
    head_html = panels_html(rows, [platform]) if len(rows) else "<p>No headline declared.</p>"
    lines = []
    for notebook, mine in records.groupby("notebook", sort=False) if "notebook" in records else ():
        found = headlines(mine)
        lines += [f"### {notebook}", "", *(f"- {line}" for line in found), ""] if found else []
    checks = correctness_summary(records)
    correctness_html = (
        details("Correctness: checks per notebook", table(checks)) if len(checks) else ""
    )
    markdown = "## Headlines\n\n" + ("\n".join(lines) or "No headline declared.")
    markdown += "\n\n## Correctness\n\n" + (
        checks.to_markdown(index=False) if len(checks) else "No records."
    )
    return head_html, correctness_html, markdown


def _detail(nb: dict) -> str:
    """A notebook's status with its detail on one line (an error may span several)."""
    detail = textwrap.shorten(" ".join(str(nb.get("detail") or "").split()), 240)
    stale = f" — STALE: {nb['stale_results']}" if nb.get("stale_results") else ""
    return (f": {detail}" if detail else "") + stale


def _status_table(run: dict, everything: pd.DataFrame) -> pd.DataFrame:
    """One row per notebook, with its records from `everything` (by its `notebook` column)."""
    rows = []
    for nb in run["notebooks"]:
        name = nb["notebook"]
        if "notebook" in everything:
            records = everything[everything["notebook"] == name]
        else:
            records = everything[:0]
        status_counts = records["status"].value_counts().to_dict() if not records.empty else {}
        rows.append(
            {
                "notebook": name,
                "status": nb["status"] + _detail(nb),
                "wall_s": round(nb["seconds"], 1) if nb.get("seconds") is not None else None,
                "run": f"{nb.get('started_utc', '?')} git {nb.get('git', '?')}",
                "machine": machine_text(nb.get("machine") or {}),
                "records": ", ".join(f"{v} {k}" for k, v in sorted(status_counts.items()))
                or "none",
                "report": f"{name}.html",
            }
        )
    return pd.DataFrame(rows, columns=NOTEBOOK_COLUMNS)


def _flags(run: dict, records: pd.DataFrame) -> pd.DataFrame:
    frames = [flag_table(records), busy_flags(run), budget_flags(run)]
    return pd.concat(frames, ignore_index=True)


def _flags_md(flags: pd.DataFrame) -> str:
    return "## Flags\n\n" + (
        flags.to_markdown(index=False) if len(flags) else "No record was flagged."
    )


def _flags_html(flags: pd.DataFrame) -> str:
    if not len(flags):
        return "<h2>Flags</h2><p>No record was flagged.</p>"
    return "<h2>Flags</h2>" + details(f"{len(flags)} flagged", table(flags))


def _environment(run: dict) -> pd.DataFrame:
    return pd.Series(run["environment"], name="value").dropna().to_frame()


def _single(folder: Path, run: dict, records: pd.DataFrame) -> Path:
    table_ = _status_table(run, records)
    records.to_csv(folder / "results.csv", index=False)
    flags = _flags(run, records)
    head_html, correctness_html, sections_md = platform_sections(records, run["platform"])
    yours_html, yours_md = plugin_sections(records)
    linked = table_.assign(
        report=[f"[html]({r}) · [ipynb]({r[:-5]}.ipynb)" for r in table_["report"]]
    )
    intro = (
        f"Run {run['started_utc']} → {run['finished_utc']} (UTC), git `{run['git']}`, "
        f"parameters `{run['parameters']}`, command `{run['command']}`."
    )
    (folder / "SUMMARY.md").write_text(
        "\n\n".join(
            [
                f"# Workbook report: {run['platform']}",
                intro,
                *([yours_md] if yours_md else []),
                sections_md,
                "## Notebooks\n\n" + linked.to_markdown(index=False),
                _flags_md(flags),
                "## Environment\n\n" + _environment(run).to_markdown(),
                "Every figure was measured in this run (median of many reps; see each notebook "
                "for p10/p90, method and shape). All records: `results.csv`.",
            ]
        )
        + "\n"
    )
    cells = table_.assign(
        report=[
            f"{href(r, 'html')} · {href(f'{r[:-5]}.ipynb', 'ipynb')}" for r in table_["report"]
        ]
    )
    body = f"""<p>{html.escape(intro).replace("`", "")}</p>
{yours_html}<h2>Headlines</h2>{head_html}
{report_phases_html(records)}
<h2>Notebooks</h2>{table(cells, raw=("report",))}
{correctness_html}
{_flags_html(flags)}
{details("Environment", table(_environment(run), index=True))}
<p>Every figure was measured in this run (median of many reps; each notebook shows p10/p90, method
and shape). All records: <a href="results.csv">results.csv</a>.</p>"""
    index = folder / "index.html"
    index.write_text(page(f"Workbook report: {run['platform']}", body))
    return index


def _notebook_runs(run: dict, records: pd.DataFrame) -> pd.DataFrame:
    """A repeated report's notebooks: statuses over the runs and links into each run."""
    rows = []
    for nb in run["notebooks"]:
        name = nb["notebook"]
        mine = records[records["notebook"] == name] if "notebook" in records else records[:0]
        runs = nb.get("runs", {})
        rows.append(
            {
                "notebook": name,
                "status": counts([e["status"] for e in runs.values()]) + _detail(nb),
                "wall_s": round(nb["seconds"], 1) if nb.get("seconds") is not None else None,
                "machine": machine_text(nb.get("machine") or {}),
                "records": counts(list(mine["status"])) if len(mine) else "none",
                "reports": [(r, f"{r}/{name}") for r in runs],
            }
        )
    columns = ["notebook", "status", "wall_s", "machine", "records", "reports"]
    return pd.DataFrame(rows, columns=columns)


def _repeated(folder: Path, run: dict, records: pd.DataFrame) -> Path:
    records.to_csv(folder / "results.csv", index=False)
    notebooks = _notebook_runs(run, records)
    flags = _flags(run, records)
    spread = spread_table(records)
    head_html, correctness_html, sections_md = platform_sections(records, run["platform"])
    yours_html, yours_md = plugin_sections(records)
    runs = pd.DataFrame(run.get("runs", []), columns=RUN_COLUMNS)
    n = run["repeat"]
    intro = (
        f"{n} runs of every notebook, each in a fresh kernel: "
        f"{run['started_utc']} → {run['finished_utc']} (UTC), git {run['git']}, "
        f"parameters {run['parameters']}, command {run['command']}. Each figure is the median of "
        "the runs' medians; its spread is the min–max of the run medians (ratios: the runs' "
        "ratios; the interval shown is the envelope of the runs' 95 % intervals)."
    )

    def links(pairs, fmt):
        return " · ".join(fmt(r, path) for r, path in pairs)

    md_notebooks = notebooks.assign(
        reports=[
            links(p, lambda r, path: f"{r}: [html]({path}.html) [ipynb]({path}.ipynb)")
            for p in notebooks["reports"]
        ]
    )
    md_runs = runs.assign(folder=[f"[{f}]({f}/SUMMARY.md)" for f in runs["folder"]])
    (folder / "SUMMARY.md").write_text(
        "\n\n".join(
            [
                f"# Workbook report: {run['platform']} ({n} runs)",
                intro,
                *([yours_md] if yours_md else []),
                sections_md,
                "## Runs\n\n" + md_runs.to_markdown(index=False),
                "## Notebooks\n\n" + md_notebooks.to_markdown(index=False),
                _flags_md(flags),
                "## Records across runs\n\n"
                + (spread.to_markdown(index=False) if len(spread) else "No timed record."),
                "## Environment\n\n" + _environment(run).to_markdown(),
                "All records, aggregated: `results.csv`; each run's own: `run-<i>/results.csv`.",
            ]
        )
        + "\n"
    )
    html_notebooks = notebooks.assign(
        reports=[
            links(
                p,
                lambda r, path: (
                    f"{html.escape(r)}: {href(f'{path}.html', 'html')} "
                    f"{href(f'{path}.ipynb', 'ipynb')}"
                ),
            )
            for p in notebooks["reports"]
        ]
    )
    html_runs = runs.assign(folder=[href(f"{f}/index.html", f) for f in runs["folder"]])
    spread_html = table(spread) if len(spread) else "<p>No timed record.</p>"
    body = f"""<p>{html.escape(intro)}</p>
{yours_html}<h2>Headlines</h2>{head_html}
<h2>Notebooks</h2>{table(html_notebooks, raw=("reports",))}
<h2>Runs</h2>{table(html_runs, raw=("folder",))}
{correctness_html}
{_flags_html(flags)}
{details("Records across runs", spread_html)}
{details("Environment", table(_environment(run), index=True))}
<p>All records, aggregated: <a href="results.csv">results.csv</a>; each run's own:
<code>run-&lt;i&gt;/results.csv</code>.</p>"""
    index = folder / "index.html"
    index.write_text(page(f"Workbook report: {run['platform']} ({n} runs)", body))
    return index


def build_report(folder: str | Path, report: Report | None = None) -> Path:
    """Write index.html, SUMMARY.md and results.csv into a report folder from `report` (default:
    its `read_report`, so that a damaged file stops it before anything is written); return
    index.html."""
    folder = Path(folder)
    _, run, records = report or read_report(folder)
    if run.get("repeat", 1) > 1:  # run --repeat N: the aggregate of run-1/ ... run-N/
        return _repeated(folder, run, records)
    return _single(folder, run, records)


def rebuild_reports(
    folders: list[str | Path] | None = None, *, outputs: str | Path
) -> list[Report]:
    """Rebuild the reports of `folders` (default: every report folder under `outputs`) from their
    records: a repeated report's runs first, then its aggregate. Every file is read, and checked,
    before any report is written. Returns the reports as read, for the gallery
    (`gallery.build_gallery`) to show without reading them again."""
    folders = [Path(f) for f in folders] if folders else report_folders(outputs)
    targets = [
        target
        for folder in folders
        for target in (*(run_folders(folder) if repeat_of(folder) > 1 else ()), folder)
    ]
    reports = [read_report(target) for target in targets]
    for report in reports:
        build_report(report.folder, report)
    return reports
