"""A report folder's index: `index.html`, `SUMMARY.md` and `results.csv`, built from saved records
and the runner's `run.json` (never from rendered output)."""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd

from kernel_lib.records import shape_key
from kernel_lib.reportfiles import read_run

# What a report shows from its run.json, beyond the notebooks' own rows (reportfiles.Run).
RUN_KEYS = (
    "platform", "parameters", "started_utc", "finished_utc", "git", "command", "environment",
    "notebooks",
)  # fmt: skip
STATUS_COLUMNS = [
    "notebook", "status", "wall_s", "run", "machine", "records", "headlines", "report",
]  # fmt: skip


def shape_text(row: pd.Series) -> str:
    """A loaded record's shape (its `shape.*` columns) as `batch=1,head_dim=64,...`: by name, as in
    its record_id, so the same shape reads the same whatever order the columns were loaded in."""
    return shape_key(
        {
            k[6:]: int(v) if isinstance(v, float) and v.is_integer() else v
            for k, v in row.items()
            if k.startswith("shape.") and pd.notna(v)
        }
    )


def _describe(row: pd.Series) -> str:
    parts = [row["implementation"], row.get("dtype"), row.get("mode"), shape_text(row)]
    return " ".join(str(p) for p in parts if isinstance(p, str) and p)


def _figure(row: pd.Series) -> str:
    """The headline's figure: a ratio with its interval and verdict, or a fraction of a ceiling."""
    if pd.notna(row.get("ratio_vs_baseline")):
        low, high = row.get("ratio_low"), row.get("ratio_high")
        interval = f" [{low:.2f}, {high:.2f}]" if pd.notna(low) and pd.notna(high) else ""
        text = f"{row['ratio_vs_baseline']:.2f}x{interval} vs {row['baseline']}"
        return text + (f" ({row['verdict']})" if row.get("verdict") != "faster" else "")
    return f"{row['fraction_of_peak']:.2f} of {row['peak_basis']}"


def headlines(records: pd.DataFrame) -> list[str]:
    """The figures the notebook declared its headlines (records.as_headline), each with what
    produced it; a headline that did not run says why; flagged measurements say so."""
    if records.empty or "headline" not in records:
        return []
    lines = []
    for _, row in records[records["headline"].notna()].iterrows():
        if row["status"] != "ok":
            lines.append(f"{row['headline']}: {row['status']}: {row['reason']}")
            continue
        flags = row.get("flags")
        problem = (
            f" — measurement problem: {'; '.join(flags)}"
            if isinstance(flags, (list, tuple)) and flags
            else ""
        )
        lines.append(f"{row['headline']}: {_figure(row)} ({_describe(row)}){problem}")
    return lines


def _status_table(run: dict, everything: pd.DataFrame) -> pd.DataFrame:
    """One row per notebook, with its records from `everything` (by its `notebook` column)."""
    rows = []
    for nb in run["notebooks"]:
        name = nb["notebook"]
        if "notebook" in everything:
            records = everything[everything["notebook"] == name]
        else:
            records = everything[:0]
        counts = records["status"].value_counts().to_dict() if not records.empty else {}
        rows.append(
            {
                "notebook": name,
                "status": nb["status"]
                + (f": {nb['detail']}" if nb.get("detail") else "")
                + (f" — STALE: {nb['stale_results']}" if nb.get("stale_results") else ""),
                "wall_s": round(nb["seconds"], 1) if nb.get("seconds") is not None else None,
                "run": f"{nb.get('started_utc', '?')} git {nb.get('git', '?')}",
                "machine": machine_text(nb.get("machine") or {}),
                "records": ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "none",
                "headlines": "; ".join(headlines(records)) if not records.empty else "",
                "report": f"{name}.html",
            }
        )
    return pd.DataFrame(rows, columns=STATUS_COLUMNS)


def machine_text(machine: dict) -> str:
    """How busy the machine was over a notebook (run.json's `machine`): 'BUSY: why' when its
    timings shared the machine, else the 1-min load at its start and end and the CPU steal."""
    if machine.get("busy"):
        return f"BUSY: {machine['busy']}"
    start, end = machine.get("load_start"), machine.get("load_end")
    if not start or not end:
        return ""
    steal = machine.get("steal_fraction")
    return f"load {start[0]:.2f} → {end[0]:.2f} of {machine.get('cores')} cores" + (
        f", steal {steal:.1%}" if steal is not None else ""
    )


def busy_flags(run: dict) -> pd.DataFrame:
    """A Flags row for each notebook measured on a busy machine (all its records)."""
    rows = [
        {
            "record_id": f"every record of {nb['notebook']}",
            "flag": f"measured on a busy machine: {nb['machine']['busy']}",
        }
        for nb in run["notebooks"]
        if (nb.get("machine") or {}).get("busy")
    ]
    return pd.DataFrame(rows, columns=["record_id", "flag"])


def flag_table(records: pd.DataFrame) -> pd.DataFrame:
    """Every record with a measurement problem or a tuned path slower than its plain comparator."""
    if records.empty or "flags" not in records:
        return pd.DataFrame(columns=["record_id", "flag"])
    rows = [
        {"record_id": row.get("record_id"), "flag": flag}
        for _, row in records.iterrows()
        if isinstance(row["flags"], (list, tuple))
        for flag in row["flags"]
    ]
    return pd.DataFrame(rows, columns=["record_id", "flag"])


def _markdown(run: dict, table: pd.DataFrame, flags: pd.DataFrame, extra: str = "") -> str:
    env = pd.Series(run["environment"], name="value").dropna().to_frame()
    linked = table.assign(
        report=[f"[html]({r}) · [ipynb]({r[:-5]}.ipynb)" for r in table["report"]]
    )
    return (
        "\n\n".join(
            [
                f"# Workbook report: {run['platform']}",
                f"Run {run['started_utc']} → {run['finished_utc']} (UTC), git `{run['git']}`, "
                f"parameters `{run['parameters']}`, command `{run['command']}`.",
                "## Environment\n\n" + env.to_markdown(),
                "## Notebooks\n\n" + linked.to_markdown(index=False),
                *([extra] if extra else []),
                "## Flags\n\n"
                + (flags.to_markdown(index=False) if len(flags) else "No record was flagged."),
                "Every figure was measured in this run (median of many reps; see each notebook for p10/p90, "
                "method and shape). All records: `results.csv`.",
            ]
        )
        + "\n"
    )


# Wide tables scroll sideways in their own box instead of running off the page.
STYLE = """body{font-family:sans-serif;margin:2em;max-width:80em} table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}
.scroll{overflow-x:auto;max-width:100%} img{max-width:100%}"""


def scroll(table_html: str) -> str:
    """A table (HTML) in a box that scrolls sideways when it is wider than the page."""
    return f'<div class="scroll">{table_html}</div>'


def page(title: str, body: str) -> str:
    """A standalone HTML page (the report style) with `body` under an <h1> title."""
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>{STYLE}</style></head>
<body><h1>{title}</h1>
{body}
</body></html>
"""


def _html(run: dict, table: pd.DataFrame, flags: pd.DataFrame, extra: str = "") -> str:
    env = scroll(pd.Series(run["environment"], name="value").dropna().to_frame().to_html())
    cells = table.map(lambda v: html.escape(v) if isinstance(v, str) else v)
    cells["report"] = [
        f'<a href="{r}">html</a> · <a href="{r[:-5]}.ipynb">ipynb</a>' for r in cells["report"]
    ]
    rows = scroll(cells.to_html(index=False, escape=False, na_rep=""))
    flagged = scroll(flags.to_html(index=False)) if len(flags) else "<p>No record was flagged.</p>"
    title = f"Workbook report: {html.escape(run['platform'])}"
    return page(
        title,
        f"""<p>Run {html.escape(run["started_utc"])} → {html.escape(run["finished_utc"])} (UTC), git
<code>{html.escape(run["git"])}</code>, parameters <code>{html.escape(run["parameters"])}</code>,
command <code>{html.escape(run["command"])}</code>.</p>
<h2>Notebooks</h2>{rows}
{extra}
<h2>Flags</h2>{flagged}
<h2>Environment</h2>{env}
<p>Every figure was measured in this run (median of many reps; each notebook shows p10/p90, method and
shape). All records: <a href="results.csv">results.csv</a>.</p>""",
    )


def read_report(folder: str | Path) -> tuple[dict, pd.DataFrame]:
    """A report folder's run.json and records, with a `notebook` column (a repeated report: the
    aggregate over its runs); ParameterError for a damaged file."""
    from kernel_lib.gallery import report_records

    folder = Path(folder)
    return read_run(folder / "run.json", required=RUN_KEYS), report_records(folder)


def build_report(folder: str | Path, report: tuple[dict, pd.DataFrame] | None = None) -> Path:
    """Write index.html, SUMMARY.md and results.csv into a report folder from `report` (default:
    its `read_report`, so that a damaged file stops it before anything is written); return
    index.html."""
    from kernel_lib.gallery import platform_sections

    folder = Path(folder)
    run, records = report or read_report(folder)
    if run.get("repeat", 1) > 1:  # run --repeat N: the aggregate of run-1/ ... run-N/
        from kernel_lib.aggregate import build_aggregate_report

        return build_aggregate_report(folder, run, records)
    table = _status_table(run, records)
    records.to_csv(folder / "results.csv", index=False)
    flags = pd.concat([flag_table(records), busy_flags(run)], ignore_index=True)
    sections_html, sections_md = platform_sections(records, run["platform"])
    (folder / "SUMMARY.md").write_text(_markdown(run, table, flags, sections_md))
    index = folder / "index.html"
    index.write_text(_html(run, table, flags, sections_html))
    return index
