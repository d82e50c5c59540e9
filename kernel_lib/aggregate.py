"""A repeated report (`python -m kernel_lib run --repeat N`): `OUT/run-1/` ... `OUT/run-N/` are full
report folders, one per run (every notebook in a fresh kernel each time), and `OUT/` holds their
aggregate: per record the median of the runs' medians and its spread (min-max of the run medians,
with the run ids), built from the runs' saved records and run.json files only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from kernel_lib.records import verdict
from kernel_lib.reportfiles import notebook_records, read_run

RUN_FILE = "run.json"  # as kernel_lib.runner.RUN_FILE
RUN_PREFIX = "run-"  # the runs of a repeated report: OUT/run-1/ ... OUT/run-N/
RUN_COLUMNS = ["folder", "run_id", "started_utc", "finished_utc", "git"]  # run.json's `runs`
# Worst first: the aggregate of a notebook's (or a record's) statuses over the runs.
NOTEBOOK_SEVERITY = ("kernel died", "timed out", "failed", "ok", "skipped")
RECORD_SEVERITY = ("wrong", "failed", "ok", "skipped")
# Copied from a record's first run: what the record is (identical across runs of one revision).
IDENTITY = (
    "notebook", "record_id", "topic", "case", "implementation", "dtype", "mode", "baseline",
    "peak_basis", "headline", "method", "flops", "bytes", "device", "backend", "platform",
)  # fmt: skip


def repeat_of(folder: str | Path) -> int:
    """How many runs a report folder holds: its run.json's `repeat` (1 for a single run)."""
    run = Path(folder) / RUN_FILE
    return read_run(run).get("repeat", 1) if run.exists() else 1


def run_folders(folder: str | Path) -> list[Path]:
    """The `run-<i>/` report folders of a repeated report, in run order."""
    found = [
        p
        for p in Path(folder).glob(f"{RUN_PREFIX}*")
        if p.is_dir() and p.name[len(RUN_PREFIX) :].isdigit() and (p / RUN_FILE).exists()
    ]
    return sorted(found, key=lambda p: int(p.name[len(RUN_PREFIX) :]))


def _worst(statuses: list[str], order: tuple[str, ...]) -> str:
    return min(statuses, key=lambda s: order.index(s) if s in order else -1)


def counts(statuses: list[str]) -> str:
    """'ok x3' or 'ok x2, failed x1' (in order of first appearance)."""
    seen = pd.Series(statuses).value_counts(sort=False)
    return ", ".join(f"{status} x{n}" for status, n in seen.items())


def write_aggregate_run(folder: str | Path, base: dict) -> dict:
    """Write `folder/run.json` for a repeated report: `base` (platform, parameters, times, git,
    command, environment, repeat) plus `runs` (each run's folder, id, times, git) and one row per
    notebook with its worst status over the runs, the median wall time, busy-machine flags, and
    `runs`: the notebook's own row from each run's run.json."""
    folder = Path(folder)
    runs = [(p.name, read_run(p / RUN_FILE, required=("notebooks",))) for p in run_folders(folder)]
    names = list(dict.fromkeys(nb["notebook"] for _, run in runs for nb in run["notebooks"]))
    notebooks = []
    for name in names:
        entries = {
            folder_name: nb
            for folder_name, run in runs
            for nb in run["notebooks"]
            if nb["notebook"] == name
        }
        statuses = [e["status"] for e in entries.values()]
        seconds = [e["seconds"] for e in entries.values() if e.get("seconds") is not None]
        busy = [
            f"{r}: {e['machine']['busy']}"
            for r, e in entries.items()
            if (e.get("machine") or {}).get("busy")
        ]
        notebooks.append(
            {
                "notebook": name,
                "status": _worst(statuses, NOTEBOOK_SEVERITY),
                "detail": "; ".join(
                    f"{r}: {e['status']}: {e['detail']}"
                    for r, e in entries.items()
                    if e.get("detail") and e["status"] != "skipped"
                )
                or next((e["detail"] for e in entries.values() if e.get("detail")), ""),
                "seconds": float(pd.Series(seconds).median()) if seconds else None,
                "run_id": base["run_id"],
                "git": base["git"],
                "started_utc": base["started_utc"],
                "stale_results": "; ".join(
                    f"{r}: {e['stale_results']}"
                    for r, e in entries.items()
                    if e.get("stale_results")
                ),
                "machine": {"busy": "; ".join(busy)},
                "runs": entries,
            }
        )
    run = {
        **base,
        "runs": [
            {
                "folder": folder_name,
                "run_id": run.get("run_id"),
                "started_utc": run.get("started_utc"),
                "finished_utc": run.get("finished_utc"),
                "git": run.get("git"),
            }
            for folder_name, run in runs
        ],
        "notebooks": notebooks,
    }
    (folder / RUN_FILE).write_text(json.dumps(run, indent=1) + "\n")
    return run


def run_records(folder: str | Path) -> pd.DataFrame:
    """Every record of every run of a repeated report, with `notebook` and `run` (its folder)."""
    frames = [notebook_records(run).assign(run=run.name) for run in run_folders(folder)]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _median(values: pd.Series) -> float | None:
    values = values.dropna()
    return float(values.median()) if len(values) else None


def _aggregate_one(group: pd.DataFrame) -> dict:
    first = group.iloc[0]
    row = {c: first[c] for c in IDENTITY if c in group}
    for column in group.columns:
        if column.startswith("shape."):
            row[column] = first[column]
    if "headline" in group and group["headline"].notna().any():
        row["headline"] = group["headline"].dropna().iloc[0]
    ok = group[group["status"] == "ok"]
    row["status"] = _worst(list(group["status"]), RECORD_SEVERITY)
    reasons = group.loc[group["status"] != "ok", "reason"].dropna()
    row["reason"] = next((r for r in reasons if r), "")
    row["runs"] = len(group)
    row["runs_ok"] = len(ok)
    row["run_ids"] = " ".join(f"{r}:{i}" for r, i in zip(group["run"], group["run_id"]))
    times = ok["median_ms"].dropna() if "median_ms" in ok else pd.Series(dtype=float)
    if len(times):
        row["median_ms"] = float(times.median())  # the median of the runs' medians
        row["median_ms_min"], row["median_ms_max"] = float(times.min()), float(times.max())
        row["spread_pct"] = 100 * (times.max() - times.min()) / times.median()
    for column in ("tflops", "gbps", "fraction_of_peak", "fraction_of_datasheet"):
        if column in ok:
            row[column] = _median(ok[column])
    ratios = (
        ok["ratio_vs_baseline"].dropna() if "ratio_vs_baseline" in ok else pd.Series(dtype=float)
    )
    if len(ratios):
        row["ratio_vs_baseline"] = float(ratios.median())
        row["ratio_min"], row["ratio_max"] = float(ratios.min()), float(ratios.max())
        # the envelope of the runs' 95 % intervals: a verdict holds only if it held in every run
        row["ratio_low"] = _min_or_none(ok.get("ratio_low"))
        row["ratio_high"] = _max_or_none(ok.get("ratio_high"))
        row["verdict"] = verdict(row["ratio_vs_baseline"], row["ratio_low"], row["ratio_high"])
    if "check.pass" in group and group["check.pass"].notna().any():
        row["check.pass"] = bool(group["check.pass"].dropna().astype(bool).all())
    if "flags" in group:
        flags = [
            f"{r}: {flag}"
            for r, fl in zip(group["run"], group["flags"])
            if isinstance(fl, (list, tuple))
            for flag in fl
        ]
        row["flags"] = flags
    return row


def _min_or_none(values: pd.Series | None) -> float | None:
    values = values.dropna() if values is not None else pd.Series(dtype=float)
    return float(values.min()) if len(values) else None


def _max_or_none(values: pd.Series | None) -> float | None:
    values = values.dropna() if values is not None else pd.Series(dtype=float)
    return float(values.max()) if len(values) else None


def aggregate_records(folder: str | Path) -> pd.DataFrame:
    """One row per record_id over the runs of a repeated report: what it is (from its first run),
    `status` (the worst over the runs), `runs`/`runs_ok`, `run_ids` ('run-1:<id> ...'),
    `median_ms` (median of the runs' medians) with `median_ms_min`/`median_ms_max` and
    `spread_pct` (max - min over the median, %), rates and fractions as the median over the runs,
    `ratio_vs_baseline` (median) with `ratio_min`/`ratio_max` (the runs' ratios) and
    `ratio_low`/`ratio_high` (the envelope of the runs' 95 % intervals), `check.pass` (in every
    run), and `flags` (each prefixed with its run)."""
    records = run_records(folder)
    if records.empty:
        return pd.DataFrame(columns=[*IDENTITY, "status", "reason", "runs", "run_ids"])
    rows = [_aggregate_one(g) for _, g in records.groupby("record_id", sort=False)]
    return pd.DataFrame(rows)


def _headline_lines(records: pd.DataFrame) -> list[str]:
    """report.headlines over aggregated records, each with the range of its runs' ratios."""
    from kernel_lib.report import headlines

    if records.empty or "headline" not in records:
        return []
    lines = []
    for _, row in records[records["headline"].notna()].iterrows():
        (line,) = headlines(row.to_frame().T) or [""]
        low, high = row.get("ratio_min"), row.get("ratio_max")
        if pd.notna(low) and pd.notna(high):
            line += f"; across {row['runs_ok']} runs: {low:.2f}x–{high:.2f}x"
        lines.append(line)
    return lines


def _notebook_table(run: dict, records: pd.DataFrame) -> pd.DataFrame:
    from kernel_lib.report import machine_text

    rows = []
    for nb in run["notebooks"]:
        name = nb["notebook"]
        mine = records[records["notebook"] == name] if "notebook" in records else records[:0]
        runs = nb.get("runs", {})
        rows.append(
            {
                "notebook": name,
                "status": counts([e["status"] for e in runs.values()])
                + (f": {nb['detail']}" if nb.get("detail") else "")
                + (f" — STALE: {nb['stale_results']}" if nb.get("stale_results") else ""),
                "wall_s": round(nb["seconds"], 1) if nb.get("seconds") is not None else None,
                "machine": machine_text(nb.get("machine") or {}),
                "records": counts(list(mine["status"])) if len(mine) else "none",
                "headlines": "; ".join(_headline_lines(mine)),
                "reports": [(r, f"{r}/{name}") for r in runs],
            }
        )
    columns = ["notebook", "status", "wall_s", "machine", "records", "headlines", "reports"]
    return pd.DataFrame(rows, columns=columns)


def spread_table(records: pd.DataFrame) -> pd.DataFrame:
    """The timed records across runs: median of the run medians, their min-max and spread, the
    ratio's median and min-max over the runs, and the run ids."""
    if records.empty or "median_ms" not in records:
        return pd.DataFrame()
    timed = records[records["median_ms"].notna()]

    def ratio(row):
        if "ratio_vs_baseline" not in row or pd.isna(row["ratio_vs_baseline"]):
            return ""
        return (
            f"{row['ratio_vs_baseline']:.3f}x ({row['ratio_min']:.3f}–{row['ratio_max']:.3f}) "
            f"vs {row['baseline']}"
        )

    return pd.DataFrame(
        {
            "record_id": timed["record_id"],
            "median_ms": [float(f"{v:.4g}") for v in timed["median_ms"]],
            "run medians min–max (ms)": [
                f"{lo:.4g}–{hi:.4g}"
                for lo, hi in zip(timed["median_ms_min"], timed["median_ms_max"])
            ],
            "spread_%": timed["spread_pct"].round(1),
            "ratio (runs min–max)": [ratio(r) for _, r in timed.iterrows()],
            "runs": [f"{ok}/{n}" for ok, n in zip(timed["runs_ok"], timed["runs"])],
            "run_ids": timed["run_ids"],
        }
    )


def build_aggregate_report(folder: str | Path, run: dict, records: pd.DataFrame) -> Path:
    """index.html, SUMMARY.md and results.csv of a repeated report from its run.json and
    `aggregate_records`, with links into every run's notebooks and reports; return index.html."""
    import html

    from kernel_lib.gallery import platform_sections
    from kernel_lib.report import busy_flags, flag_table, page, scroll

    folder = Path(folder)
    records.to_csv(folder / "results.csv", index=False)
    table = _notebook_table(run, records)
    flags = pd.concat([flag_table(records), busy_flags(run)], ignore_index=True)
    spread = spread_table(records)
    sections_html, sections_md = platform_sections(records, run["platform"])
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

    md_table = table.assign(
        reports=[
            links(p, lambda r, path: f"{r}: [html]({path}.html) [ipynb]({path}.ipynb)")
            for p in table["reports"]
        ]
    )
    md_runs = runs.assign(folder=[f"[{f}]({f}/SUMMARY.md)" for f in runs["folder"]])
    env = pd.Series(run["environment"], name="value").dropna().to_frame()
    (folder / "SUMMARY.md").write_text(
        "\n\n".join(
            [
                f"# Workbook report: {run['platform']} ({n} runs)",
                intro,
                "## Runs\n\n" + md_runs.to_markdown(index=False),
                "## Notebooks\n\n" + md_table.to_markdown(index=False),
                sections_md,
                "## Flags\n\n"
                + (flags.to_markdown(index=False) if len(flags) else "No record was flagged."),
                "## Records across runs\n\n"
                + (spread.to_markdown(index=False) if len(spread) else "No timed record."),
                "## Environment\n\n" + env.to_markdown(),
                "All records, aggregated: `results.csv`; each run's own: `run-<i>/results.csv`.",
            ]
        )
        + "\n"
    )
    cells = table.map(lambda v: html.escape(v) if isinstance(v, str) else v)
    cells["reports"] = [
        links(
            p,
            lambda r, path: (
                f'{r}: <a href="{path}.html">html</a> <a href="{path}.ipynb">ipynb</a>'
            ),
        )
        for p in table["reports"]
    ]
    run_cells = runs.map(lambda v: html.escape(v) if isinstance(v, str) else v)
    run_cells["folder"] = [f'<a href="{f}/index.html">{f}</a>' for f in runs["folder"]]
    flagged = scroll(flags.to_html(index=False)) if len(flags) else "<p>No record was flagged.</p>"
    body = f"""<p>{html.escape(intro)}</p>
<h2>Runs</h2>{scroll(run_cells.to_html(index=False, escape=False))}
<h2>Notebooks</h2>{scroll(cells.to_html(index=False, escape=False, na_rep=""))}
{sections_html}
<h2>Flags</h2>{flagged}
<h2>Records across runs</h2>{scroll(spread.to_html(index=False, na_rep="")) if len(spread) else "<p>No timed record.</p>"}
<h2>Environment</h2>{scroll(env.to_html())}
<p>All records, aggregated: <a href="results.csv">results.csv</a>; each run's own:
<code>run-&lt;i&gt;/results.csv</code>.</p>"""
    title = f"Workbook report: {html.escape(run['platform'])} ({n} runs)"
    index = folder / "index.html"
    index.write_text(page(title, body))
    return index
