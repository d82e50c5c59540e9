"""A report folder's index: `index.html`, `SUMMARY.md` and `results.csv`, built from saved records
and the runner's `run.json` (never from rendered output)."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pandas as pd

from kernel_lib.records import RESULTS_SUFFIX, load_records

HEADLINES = (  # (column, label, unit): the best ok record of each notebook by that column
    ("tflops", "best TFLOP/s", "TFLOP/s"),
    ("gbps", "best GB/s", "GB/s"),
    ("ratio_vs_baseline", "best ratio vs baseline", "x"),
)


def _describe(row: pd.Series) -> str:
    shape = ",".join(f"{k[6:]}={int(v) if float(v).is_integer() else v}"
                     for k, v in row.items() if k.startswith("shape.") and pd.notna(v))
    parts = [row["case"], row["implementation"], row.get("dtype"), shape]
    vs = f" vs {row['baseline']}" if pd.notna(row.get("baseline")) else ""
    return " ".join(str(p) for p in parts if isinstance(p, str) and p) + vs


def headlines(records: pd.DataFrame) -> list[str]:
    """Up to three measured figures a reader scans first, each with what produced it."""
    ok = records[records["status"] == "ok"] if not records.empty else records
    lines = []
    for column, label, unit in HEADLINES:
        if column in ok and ok[column].notna().any():
            best = ok.loc[ok[column].idxmax()]
            lines.append(f"{label}: {best[column]:.3g} {unit} ({_describe(best)})")
    return lines


def _status_table(run: dict, folder: Path) -> pd.DataFrame:
    rows = []
    for nb in run["notebooks"]:
        name = nb["notebook"]
        results = folder / f"{name}{RESULTS_SUFFIX}"
        records = load_records(results) if results.exists() else pd.DataFrame()
        counts = records["status"].value_counts().to_dict() if not records.empty else {}
        rows.append({
            "notebook": name,
            "status": nb["status"] + (f": {nb['detail']}" if nb["detail"] else ""),
            "wall_s": round(nb["seconds"], 1) if nb["seconds"] is not None else None,
            "records": ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "none",
            "headlines": "; ".join(headlines(records)) if not records.empty else "",
            "report": f"{name}.html",
        })
    return pd.DataFrame(rows)


def _markdown(run: dict, table: pd.DataFrame) -> str:
    env = pd.Series(run["environment"], name="value").dropna().to_frame()
    linked = table.assign(report=[f"[html]({r}) · [ipynb]({r[:-5]}.ipynb)" for r in table["report"]])
    return "\n\n".join([
        f"# Workbook report: {run['platform']}",
        f"Run {run['started_utc']} → {run['finished_utc']} (UTC), git `{run['git']}`, "
        f"parameters `{run['parameters']}`, command `{run['command']}`.",
        "## Environment\n\n" + env.to_markdown(),
        "## Notebooks\n\n" + linked.to_markdown(index=False),
        "Every figure was measured in this run (median of many reps; see each notebook for p10/p90, "
        "method and shape). All records: `results.csv`.",
    ]) + "\n"


def _html(run: dict, table: pd.DataFrame) -> str:
    env = pd.Series(run["environment"], name="value").dropna().to_frame().to_html()
    cells = table.map(lambda v: html.escape(v) if isinstance(v, str) else v)
    cells["report"] = [f'<a href="{r}">html</a> · <a href="{r[:-5]}.ipynb">ipynb</a>' for r in cells["report"]]
    rows = cells.to_html(index=False, escape=False, na_rep="")
    title = f"Workbook report: {html.escape(run['platform'])}"
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:80em}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}}</style></head>
<body><h1>{title}</h1>
<p>Run {html.escape(run['started_utc'])} → {html.escape(run['finished_utc'])} (UTC), git
<code>{html.escape(run['git'])}</code>, parameters <code>{html.escape(run['parameters'])}</code>,
command <code>{html.escape(run['command'])}</code>.</p>
<h2>Notebooks</h2>{rows}
<h2>Environment</h2>{env}
<p>Every figure was measured in this run (median of many reps; each notebook shows p10/p90, method and
shape). All records: <a href="results.csv">results.csv</a>.</p>
</body></html>
"""


def build_report(folder: str | Path) -> Path:
    """Write index.html, SUMMARY.md and results.csv into a report folder; return index.html."""
    folder = Path(folder)
    run = json.loads((folder / "run.json").read_text())
    table = _status_table(run, folder)
    load_records(folder).to_csv(folder / "results.csv", index=False)
    (folder / "SUMMARY.md").write_text(_markdown(run, table))
    index = folder / "index.html"
    index.write_text(_html(run, table))
    return index
