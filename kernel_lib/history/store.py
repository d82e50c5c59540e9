"""The results store: every run that `run` or `cloud collect` put in a report folder, kept in
one SQLite file (the standard library's), so that a later run never loses an earlier one.

Where: `KERNEL_WORKBOOK_STORE` when set, else `history.sqlite` in the `outputs/` folder that holds
the report (`outputs/history.sqlite`). It is rebuilt from the report folders kept under outputs/
(`python -m kernel_lib history --rebuild`), read back by kernel_lib.reportfiles as every reader
reads them. A run is one run.json: a report of `--repeat N` adds its N `run-<k>/` runs, each
naming the report they belong to (`report`: the aggregate's run id). Adding a run again replaces
it in one transaction; two writers at once wait on SQLite's lock (BUSY_TIMEOUT_S).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import sys
from pathlib import Path

from kernel_lib import ROOT
from kernel_lib.params import ParameterError
from kernel_lib.records import RESULTS_SUFFIX
from kernel_lib.report.aggregate import run_folders
from kernel_lib.reportfiles import read_results, read_run
from kernel_lib.writes import RUN_FILE

STORE_ENV = "KERNEL_WORKBOOK_STORE"
STORE_NAME = "history.sqlite"
SCHEMA_VERSION = 1  # PRAGMA user_version
BUSY_TIMEOUT_S = 60.0
REBUILD = "python -m kernel_lib history --rebuild"
RUN_COLUMNS = (
    "run_id", "report", "platform", "device", "git", "torch", "triton", "allocator",
    "started_utc", "parameters", "notebooks", "folder", "run_json",
)  # fmt: skip
RECORD_COLUMNS = (
    "run_id", "record_id", "notebook", "headline", "status", "median_ms", "ratio_vs_baseline",
    "ratio_low", "ratio_high", "fraction_of_peak", "record",
)  # fmt: skip
SCHEMA = """
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY, report TEXT NOT NULL, platform TEXT, device TEXT, git TEXT,
    torch TEXT, triton TEXT, allocator TEXT, started_utc TEXT, parameters TEXT,
    notebooks TEXT, folder TEXT, run_json TEXT NOT NULL
);
CREATE TABLE records (
    run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE, record_id TEXT NOT NULL,
    notebook TEXT, headline TEXT, status TEXT, median_ms REAL, ratio_vs_baseline REAL,
    ratio_low REAL, ratio_high REAL, fraction_of_peak REAL, record TEXT NOT NULL,
    PRIMARY KEY (run_id, record_id)
);
CREATE INDEX records_headline ON records(headline);
"""


class StoreError(ParameterError):
    """A store that cannot be read or written as one: one line naming it, exit 2."""


def store_path(path: str | Path | None = None, report: str | Path | None = None) -> Path | None:
    """The store: `path` when given, else $KERNEL_WORKBOOK_STORE, else `history.sqlite` in the
    nearest folder named outputs above `report` (None when there is none), else the checkout's
    outputs/."""
    if path or os.environ.get(STORE_ENV):
        return Path(path or os.environ[STORE_ENV])
    if report is None:
        return ROOT / "outputs" / STORE_NAME
    outputs = next((p for p in Path(report).resolve().parents if p.name == "outputs"), None)
    return outputs / STORE_NAME if outputs else None


def _damaged(path: Path, what: str) -> StoreError:
    return StoreError(f"{path}: {what}: `{REBUILD}` rebuilds it from the kept report folders")


@contextlib.contextmanager
def connect(path: str | Path, *, create: bool = True):
    """A connection to the store at `path` (created when missing and `create`), its schema
    checked: StoreError naming it when it is newer than this code's, damaged, or missing."""
    path = Path(path)
    if not path.exists() and not create:
        raise StoreError(f"{path}: no results store here (`{REBUILD}` builds one)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except (OSError, sqlite3.Error) as err:
        raise StoreError(f"{path}: cannot open the results store ({err})") from None
    try:
        _check_schema(con, path)
        con.execute("PRAGMA foreign_keys = ON")
        yield con
    except sqlite3.OperationalError as err:  # locked past the busy timeout, a read-only disk
        raise StoreError(f"{path}: {err}") from None
    except sqlite3.DatabaseError as err:  # not SQLite at all, or a torn file
        raise _damaged(path, f"not a results store ({err})") from None
    finally:
        con.close()


@contextlib.contextmanager
def _transaction(con: sqlite3.Connection):
    """One write transaction, its lock taken at the start (another writer waits on it)."""
    con.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


def _check_schema(con: sqlite3.Connection, path: Path) -> None:
    version = con.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{path}: a results store of schema {version}, newer than this code's "
            f"{SCHEMA_VERSION}: update the checkout, or name another --store"
        )
    tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if version == 0 and not tables:
        with _transaction(con):
            if not con.execute("PRAGMA user_version").fetchone()[0]:  # another writer's first
                for statement in filter(str.strip, SCHEMA.split(";")):
                    con.execute(statement)
                con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        return
    if version != SCHEMA_VERSION or not {"runs", "records"} <= tables:
        raise _damaged(path, "not a results store (its tables are missing)")
    for table, columns in (("runs", RUN_COLUMNS), ("records", RECORD_COLUMNS)):
        have = {row[1] for row in con.execute(f"PRAGMA table_info({table})")}
        if not set(columns) <= have:
            raise _damaged(path, f"its {table} table lacks {sorted(set(columns) - have)}")


def _run_row(folder: Path, run: dict, report: str | None) -> dict:
    env = run.get("environment") or {}
    run_id = run.get("run_id") or f"{run.get('platform')}@{run.get('started_utc')}"
    return {
        "run_id": str(run_id),
        "report": str(report or run_id),
        "platform": run.get("platform"),
        "device": env.get("name"),
        "git": run.get("git"),
        "torch": env.get("torch"),
        "triton": env.get("triton"),
        "allocator": env.get("allocator"),
        "started_utc": run.get("started_utc"),
        "parameters": run.get("parameters"),
        "notebooks": ",".join(nb["notebook"] for nb in run.get("notebooks") or []),
        "folder": str(folder),
        "run_json": json.dumps(run, sort_keys=True),
    }


def _record_rows(folder: Path, run_id: str, stale: set[str]) -> list[dict]:
    rows = []
    for path in sorted(folder.glob(f"*{RESULTS_SUFFIX}")):
        notebook = path.name[: -len(RESULTS_SUFFIX)]
        if notebook in stale:  # an earlier run's records, kept in the report: not this run's
            continue
        for record in read_results(path):
            rows.append(
                {
                    "run_id": run_id,
                    "record_id": record["record_id"],
                    "notebook": notebook,
                    "headline": record.get("headline"),
                    "status": record.get("status"),
                    **{k: record.get(k) for k in RECORD_COLUMNS[5:10]},
                    "record": json.dumps(record, sort_keys=True),
                }
            )
    return rows


def report_runs(folder: str | Path, report: str | None = None) -> list[tuple[dict, list[dict]]]:
    """(run row, record rows) of each run a report folder holds (its `run-<k>/` runs, or itself),
    read and checked before anything is written; ParameterError naming a damaged file. The runs
    of `run-<k>/` belong to the report `report` when given (an `ab` side), else to the folder's
    own run.json."""
    folder = Path(folder).resolve()
    runs = run_folders(folder)
    if runs and report is None:
        report = read_run(folder / RUN_FILE).get("run_id")
    if not runs and not (folder / RUN_FILE).exists():
        raise ParameterError(f"{folder}: not a report folder (no {RUN_FILE}, no run-<k>/)")
    out = []
    for run_folder in runs or [folder]:
        run = read_run(run_folder / RUN_FILE)
        row = _run_row(run_folder, run, report)
        stale = {nb["notebook"] for nb in run.get("notebooks") or [] if nb.get("stale_results")}
        out.append((row, _record_rows(run_folder, row["run_id"], stale)))
    return out


def _insert(con: sqlite3.Connection, row: dict, records: list[dict]) -> None:
    con.execute("DELETE FROM runs WHERE run_id = ?", (row["run_id"],))  # its records cascade
    con.execute(
        f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}) VALUES ({', '.join('?' * len(RUN_COLUMNS))})",
        [row[c] for c in RUN_COLUMNS],
    )
    con.executemany(
        f"INSERT OR REPLACE INTO records ({', '.join(RECORD_COLUMNS)}) "
        f"VALUES ({', '.join('?' * len(RECORD_COLUMNS))})",
        [[r[c] for c in RECORD_COLUMNS] for r in records],
    )


def add_report(folder: str | Path, path: str | Path, report: str | None = None) -> list[str]:
    """Add (or replace) every run of the report `folder` (`report_runs`) in the store at `path`,
    in one transaction; returns their run ids."""
    return add_runs(report_runs(folder, report), path)


def add_runs(runs: list[tuple[dict, list[dict]]], path: str | Path) -> list[str]:
    """Add (or replace) `runs` (`report_runs`) in the store at `path`, in one transaction;
    returns their run ids."""
    with connect(path) as con, _transaction(con):
        for row, records in runs:
            _insert(con, row, records)
    return [row["run_id"] for row, _ in runs]


def remember(
    folder: str | Path, *, path: str | Path | None = None, report: str | None = None
) -> None:
    """The runners' hook: add the report `folder` (`add_report`) to the store at `path` (default:
    its store, `store_path`); a store that fails says so in one line and never fails the run:
    the report stands, and `--rebuild` brings the store back from it."""
    try:
        path = path or store_path(report=folder)
        if path is not None:
            add_report(folder, path, report)
    except (ParameterError, OSError, sqlite3.Error) as err:
        print(f"warning: run not added to the results store: {err}", file=sys.stderr, flush=True)


def report_folders_under(outputs: str | Path) -> list[Path]:
    """Every report folder under `outputs` (a folder with run.json, not a run of a repeated
    report, not a runner's staging or set-aside copy), by path."""
    outputs = Path(outputs)
    found = []
    for run_file in sorted(outputs.rglob(RUN_FILE)):
        folder = run_file.parent
        if any(part.startswith(".") for part in folder.relative_to(outputs).parts):
            continue
        if folder in run_folders(folder.parent):
            continue
        found.append(folder)
    return found


def rebuild(outputs: str | Path, path: str | Path) -> list[str]:
    """A new store at `path` from every report folder under `outputs` (written beside it and
    swapped in whole: a damaged store is replaced, a failure leaves the old one); run ids."""
    path = Path(path)
    runs = [run for folder in report_folders_under(outputs) for run in report_runs(folder)]
    fresh = path.with_name(f".{path.name}.rebuild-{os.getpid()}")
    fresh.unlink(missing_ok=True)
    try:
        ids = add_runs(runs, fresh)
        os.replace(fresh, path)
    finally:
        fresh.unlink(missing_ok=True)
    return ids


def headline_value(record: dict) -> tuple[str, float | None]:
    """(measure, value) of a headline record row: its ratio, else its fraction of a ceiling,
    else its median time; ('', None) when it has none (not run)."""
    for measure in ("ratio_vs_baseline", "fraction_of_peak", "median_ms"):
        if record.get(measure) is not None:
            return measure, record[measure]
    return "", None


def runs(path: str | Path, platform: str | None = None) -> list[dict]:
    """The store's runs (of `platform`), oldest first (by start, then id)."""
    with connect(path, create=False) as con:
        con.row_factory = sqlite3.Row
        query = f"SELECT {', '.join(RUN_COLUMNS)} FROM runs"
        rows = con.execute(
            query + (" WHERE platform = ?" if platform else "") + " ORDER BY started_utc, run_id",
            (platform,) if platform else (),
        )
        return [dict(r) for r in rows]


def records(path: str | Path, run_ids: list[str], headline: str | None = None) -> list[dict]:
    """The record rows of the runs `run_ids` (those of one `headline` key when given)."""
    if not run_ids:
        return []
    where = f"run_id IN ({', '.join('?' * len(run_ids))})"
    args: list = list(run_ids)
    if headline:
        where, args = where + " AND headline = ?", args + [headline]
    with connect(path, create=False) as con:
        con.row_factory = sqlite3.Row
        rows = con.execute(f"SELECT * FROM records WHERE {where} ORDER BY run_id, record_id", args)
        return [dict(r) for r in rows]
