"""Headline trends for the gallery's panels, from the results store (kernel_lib.results.store):
per headline key, its value in each run of each platform (the ratio, else the fraction of a
ceiling; per record, where a platform measured the key at several shapes), drawn by `panels`
under the key's bars with x = the run's date; a black diamond where torch, the device, the
allocator or the lock (the environment against its lock file) changed from the platform's run
before, named in the caption (a value a run did not record is no change). A store that is missing
or cannot be read leaves the panels without trends (and one line where it cannot be read): the
gallery never fails for it."""

from __future__ import annotations

import html
import sqlite3
from pathlib import Path

import pandas as pd

from kernel_lib.params import ParameterError
from kernel_lib.report.markup import plain
from kernel_lib.results import store

CHANGES = ("torch", "device", "allocator", "lock")  # a mark where one of these changed
COLUMNS = ["key", "platform", "record_id", "date", "value", "measure", "folder", *CHANGES]


def trend_rows(path: Path, stored: store.Stored = ()) -> pd.DataFrame:
    """One row per headline record of each run of the store at `path`: key, platform, record_id,
    date, value, and the run's CHANGES; the runs `stored` (just added) as they were added, not
    read back."""
    fresh = {row["run_id"]: (row, records) for row, records in stored}
    runs = {r["run_id"]: r for r in store.runs(path) if r["run_id"] not in fresh}
    recs = store.records(path, list(runs)) + [r for _, records in fresh.values() for r in records]
    runs |= {run_id: row for run_id, (row, _) in fresh.items()}
    rows = []
    for rec in sorted(recs, key=lambda r: (r["run_id"], r["record_id"])):  # the store's order
        measure, value = store.headline_value(rec)
        if not rec["headline"] or rec["status"] != "ok" or measure == "median_ms" or value is None:
            continue
        run = runs[rec["run_id"]]
        rows.append(
            {
                "key": rec["headline"],
                "platform": run["platform"],
                "record_id": rec["record_id"],
                "date": pd.Timestamp(run["started_utc"]),
                "value": value,
                "measure": measure,
                "folder": run["folder"],
                **{c: run[c] for c in CHANGES},
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS).sort_values(["key", "date"], kind="stable")


def changes(line: pd.DataFrame) -> list[tuple[pd.Timestamp, float, str]]:
    """(date, value, what changed) where one of CHANGES differs from the row before (both
    recorded: a run before the lock was recorded has none)."""
    out = []
    for before, now in zip(line.to_dict("records"), line.to_dict("records")[1:]):
        changed = [
            f"{c} {before[c]} -> {now[c]}"
            for c in CHANGES
            if pd.notna(before[c]) and pd.notna(now[c]) and before[c] != now[c]
        ]
        if changed:
            out.append((now["date"], now["value"], "; ".join(changed)))
    return out


def draw_trend(ax, rows: pd.DataFrame) -> list[str]:
    """One key's trend (its `trend_rows`) on `ax`: a line per platform (and record), a diamond
    at each change; its caption lines."""
    caption = []
    for (platform, _), line in rows.groupby(["platform", "record_id"], sort=False):
        several = rows[rows["platform"] == platform]["record_id"].nunique() > 1
        label = f"{platform} {line['record_id'].iloc[0].split('/')[-1]}" if several else platform
        ax.plot(line["date"], line["value"], marker="o", ms=3, lw=1, label=plain(label))
        for date, value, what in changes(line):
            ax.plot([date], [value], marker="D", color="k", ms=5)
            caption.append(f"trend, {label} {date:%Y-%m-%d %H:%M}: {what}")
    ax.set_xlabel("run date (UTC)", fontsize=7)
    ratio = (rows["measure"] == "ratio_vs_baseline").all()
    ax.set_ylabel("speed-up (x)" if ratio else "of the ceiling", fontsize=7)
    ax.tick_params(labelsize=6)
    ax.tick_params(axis="x", labelrotation=20)
    ax.legend(fontsize=6)
    ax.grid(True, alpha=0.3)
    return caption


def store_trends(
    outputs: Path, leave_out: str = "", stored: store.Stored = ()
) -> tuple[pd.DataFrame | None, str]:
    """The trend rows of the store beside the gallery of `outputs` (None without one; the runs
    `stored` as added), but those of runs in a report folder named `leave_out`, and the HTML
    line that says why there are none when the store cannot be read ('' otherwise)."""
    path = store.store_path(report=Path(outputs) / "index.html")
    if path is None or not path.exists():
        return None, ""
    try:
        rows = trend_rows(path, stored)
        return rows[rows["folder"].map(lambda f: Path(f or "").name) != leave_out], ""
    except (ParameterError, sqlite3.Error) as err:
        return None, f"<p>No trends in the panels: {html.escape(str(err))}</p>"
