"""Headline trends for the gallery, from the results store (kernel_lib.history.store): per headline
key measured in two runs or more, a small figure with x = the run's date and one line per platform
(per record, where a platform measured the key at several shapes), its value in each run (the
ratio, else the fraction of a ceiling); a black diamond where torch, the device or the allocator
changed from the platform's run before, named in the caption. A store that is missing or cannot
be read leaves one line in its place: the gallery never fails for it."""

from __future__ import annotations

import html
import sqlite3
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from kernel_lib.history import store
from kernel_lib.params import ParameterError
from kernel_lib.report.markup import png_data_uri

CHANGES = ("torch", "device", "allocator")  # a mark where one of these changed


def trend_rows(path: Path) -> pd.DataFrame:
    """One row per headline record of each run: key, platform, record_id, date, value, and the
    run's torch, device and allocator."""
    runs = {r["run_id"]: r for r in store.runs(path)}
    rows = []
    for rec in store.records(path, list(runs)):
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
                **{c: run[c] for c in CHANGES},
            }
        )
    columns = ["key", "platform", "record_id", "date", "value", "measure", *CHANGES]
    return pd.DataFrame(rows, columns=columns).sort_values(["key", "date"], kind="stable")


def _changes(line: pd.DataFrame) -> list[tuple[pd.Timestamp, float, str]]:
    """(date, value, what changed) where torch, the device or the allocator differ from the row
    before."""
    out = []
    for before, now in zip(line.to_dict("records"), line.to_dict("records")[1:]):
        changed = [f"{c} {before[c]} -> {now[c]}" for c in CHANGES if before[c] != now[c]]
        if changed:
            out.append((now["date"], now["value"], "; ".join(changed)))
    return out


def trend_figure(key: str, rows: pd.DataFrame) -> tuple[Figure, list[str]]:
    """The trend of one key (its rows of `trend_rows`) and its caption lines."""
    fig = Figure(figsize=(4.6, 2.0), layout="constrained")
    ax = fig.subplots()
    caption = []
    for (platform, _), line in rows.groupby(["platform", "record_id"], sort=False):
        several = rows[rows["platform"] == platform]["record_id"].nunique() > 1
        label = f"{platform} {line['record_id'].iloc[0].split('/')[-1]}" if several else platform
        ax.plot(line["date"], line["value"], marker="o", ms=3, lw=1, label=label)
        for date, value, what in _changes(line):
            ax.plot([date], [value], marker="D", color="k", ms=5)
            caption.append(f"{label} {date:%Y-%m-%d %H:%M}: {what}")
    ax.set_title(key, fontsize=8, loc="left")
    ax.set_xlabel("run date (UTC)", fontsize=7)
    ratio = (rows["measure"] == "ratio_vs_baseline").all()
    ax.set_ylabel("speed-up (x)" if ratio else "fraction of the ceiling", fontsize=7)
    ax.tick_params(labelsize=6)
    ax.legend(fontsize=6)
    ax.grid(True, alpha=0.3)
    fig.autofmt_xdate()
    return fig, caption


def trends_html(outputs: Path) -> str:
    """The trends section of the gallery of `outputs` ('' without a store or a key measured
    twice)."""
    path = store.store_path(report=Path(outputs) / "index.html")  # the store beside the gallery
    if path is None or not path.exists():
        return ""
    try:
        rows = trend_rows(path)
    except (ParameterError, sqlite3.Error) as err:
        return f"<h2>Trends</h2><p>No trends: {html.escape(str(err))}</p>"
    figures = []
    for key, mine in rows.groupby("key", sort=True):
        if len(mine) < 2:
            continue
        fig, caption = trend_figure(str(key), mine)
        figures.append(
            f'<figure class="trend" data-trend="{html.escape(str(key))}" data-points="{len(mine)}">'
            f'<img alt="{html.escape(str(key))} over runs" src="{png_data_uri(fig)}">'
            f"<figcaption>{'<br>'.join(html.escape(c) for c in caption)}</figcaption></figure>"
        )
    if not figures:
        return ""
    return (
        f"<h2>Trends</h2><p>Each headline over the runs kept in <code>{html.escape(path.name)}"
        "</code> (python -m kernel_lib history): a black diamond where torch, the device or the "
        f'allocator changed.</p><div class="panels">{"".join(figures)}</div>'
    )
