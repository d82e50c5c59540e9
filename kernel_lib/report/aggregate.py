"""A repeated report (`python -m kernel_lib run --repeat N`): `OUT/run-1/` ... `OUT/run-N/` are full
report folders, one per run (every notebook in a fresh kernel each time), and `OUT/` holds their
aggregate: per record the median of the runs' medians and its spread (min-max of the run medians,
with the run ids), built from the runs' saved records and run.json files only. Statistics only:
the aggregate's page is `report.pages`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from kernel_lib.records import to_frame_with_verdict
from kernel_lib.report.plugins import with_best_builtin
from kernel_lib.results.files import Read, notebook_records, read_run, within
from kernel_lib.results.folders import RUN_FILE, run_folders

RUN_COLUMNS = ["folder", "run_id", "started_utc", "finished_utc", "git"]  # run.json's `runs`
# Worst first: the aggregate of a notebook's (or a record's) statuses over the runs.
NOTEBOOK_SEVERITY = ("kernel died", "timed out", "failed", "ok", "skipped")
RECORD_SEVERITY = ("wrong", "failed", "ok", "skipped")
# Copied from a record's first run: what the record is (identical across runs of one revision).
IDENTITY = (
    "notebook", "record_id", "topic", "case", "implementation", "dtype", "mode", "baseline",
    "peak_basis", "headline", "method", "flops", "bytes", "device", "backend", "platform",
)  # fmt: skip


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


def run_records(folder: str | Path, read: Read | None = None) -> pd.DataFrame:
    """Every record of every run of a repeated report, with `notebook` and `run` (its folder);
    `read`: results files already read."""
    frames = [
        notebook_records(run, within(read, run.name)).assign(run=run.name)
        for run in run_folders(folder)
    ]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _median(values: pd.Series) -> float | None:
    values = values.dropna()
    return float(values.median()) if len(values) else None


def _aggregate_one(group: pd.DataFrame) -> dict:
    first = group.iloc[0]
    row = {c: first[c] for c in IDENTITY if c in group}
    for column in group.columns:
        if column.startswith(("shape.", "plugin.")):
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
    if "vs_best" in ok and ok["vs_best"].notna().any():  # a plug-in's, over each run's best
        row["best_builtin"] = " / ".join(ok["best_builtin"].dropna().unique())
        row["vs_best"] = float(ok["vs_best"].dropna().median())
        row["vs_best_low"] = _min_or_none(ok["vs_best_low"])
        row["vs_best_high"] = _max_or_none(ok["vs_best_high"])
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


def aggregate_records(folder: str | Path, read: Read | None = None) -> pd.DataFrame:
    """One row per record_id over the runs of a repeated report: what it is (from its first run),
    `status` (the worst over the runs), `runs`/`runs_ok`, `run_ids` ('run-1:<id> ...'),
    `median_ms` (median of the runs' medians) with `median_ms_min`/`median_ms_max` and
    `spread_pct` (max - min over the median, %), rates and fractions as the median over the runs,
    `ratio_vs_baseline` (median) with `ratio_min`/`ratio_max` (the runs' ratios) and
    `ratio_low`/`ratio_high` (the envelope of the runs' 95 % intervals), `check.pass` (in every
    run), `flags` (each prefixed with its run), and the `verdict` of that envelope (a verdict
    holds only if it held in every run); `read`: results files already read."""
    records = with_best_builtin(run_records(folder, read))
    if records.empty:
        return pd.DataFrame(columns=[*IDENTITY, "status", "reason", "runs", "run_ids"])
    rows = [_aggregate_one(g) for _, g in records.groupby("record_id", sort=False)]
    return to_frame_with_verdict(rows)


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
