"""The results store: every run that `run` or `cloud collect` put in a report folder, kept in
one SQLite file (the standard library's), so that a later run never loses an earlier one.

Where: `KERNEL_WORKBOOK_STORE` when set, else `history.sqlite` in the `outputs/` folder that holds
the report (`outputs/history.sqlite`). It is rebuilt from the report folders kept under outputs/
(`python -m kernel_lib history --rebuild`, kernel_lib.results.rebuild), read back by
kernel_lib.results.files as every reader reads them. A run is one run.json: a report of `--repeat N`
adds its N `run-<k>/` runs, each naming the report they belong to (`report`: the aggregate's run
id), with the records of the notebooks it ran (not those a report kept from an earlier run).
Adding a run again replaces it in one transaction; two writers at once wait on SQLite's lock
(BUSY_TIMEOUT_S). A store is never in a report (writes.own_file); an older schema is migrated
when opened; a disk's error is an OSError naming the store (exit 1), a damaged store a StoreError
(exit 2).
"""

from __future__ import annotations

import collections
import contextlib
import errno
import json
import os
import sqlite3
import sys
from pathlib import Path

from kernel_lib import ROOT
from kernel_lib.params import ParameterError
from kernel_lib.records import RESULTS_SUFFIX
from kernel_lib.results.files import Read, read_results, read_run, within
from kernel_lib.results.folders import RUN_FILE, run_folders
from kernel_lib.results.writes import own_file

STORE_ENV = "KERNEL_WORKBOOK_STORE"
STORE_NAME = "history.sqlite"
SCHEMA_VERSION = 2  # PRAGMA user_version
MIGRATIONS = {1: "ALTER TABLE runs ADD COLUMN lock TEXT"}  # from schema N to N + 1
BUSY_TIMEOUT_S = 60.0
REBUILD = "python -m kernel_lib history --rebuild"
RUN_COLUMNS = (
    "run_id", "report", "platform", "device", "git", "torch", "triton", "allocator",
    "started_utc", "parameters", "notebooks", "folder", "run_json", "lock",
)  # fmt: skip
RECORD_COLUMNS = (
    "run_id", "record_id", "notebook", "headline", "status", "median_ms", "ratio_vs_baseline",
    "ratio_low", "ratio_high", "fraction_of_peak", "record",
)  # fmt: skip
Stored = list[tuple[dict, list[dict]]]  # (run row, its record rows) per run, as added
SCHEMA = """
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY, report TEXT NOT NULL, platform TEXT, device TEXT, git TEXT,
    torch TEXT, triton TEXT, allocator TEXT, started_utc TEXT, parameters TEXT,
    notebooks TEXT, folder TEXT, run_json TEXT NOT NULL, lock TEXT
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
    return StoreError(
        f"{path}: {what}: move it aside, then `{REBUILD}` builds a new store from the kept "
        "report folders"
    )


# SQLite's result codes for what the disk did, not what the file holds: exit 1, as any disk error
DISK_ERRORS = {
    sqlite3.SQLITE_FULL: errno.ENOSPC,
    sqlite3.SQLITE_READONLY: errno.EROFS,
    sqlite3.SQLITE_IOERR: errno.EIO,
    sqlite3.SQLITE_PERM: errno.EACCES,
    sqlite3.SQLITE_CANTOPEN: errno.EACCES,
    sqlite3.SQLITE_BUSY: errno.EBUSY,  # another writer held the lock past BUSY_TIMEOUT_S
    sqlite3.SQLITE_LOCKED: errno.EBUSY,
}


def _disk_error(err: sqlite3.Error, path: Path) -> OSError | None:
    """`err` as the OSError naming `path` when it is the disk's (DISK_ERRORS), else None."""
    code = DISK_ERRORS.get((getattr(err, "sqlite_errorcode", None) or 0) & 0xFF)
    return OSError(code, f"{os.strerror(code)} (SQLite: {err})", str(path)) if code else None


@contextlib.contextmanager
def connect(path: str | Path, *, create: bool = True):
    """A connection to the store at `path` (created when missing and `create`; a store to write
    is never in a report), its schema checked and an older one migrated: StoreError naming it
    when it is newer than this code's, damaged, or missing; OSError naming it for the disk's
    errors (full, read-only, locked past BUSY_TIMEOUT_S)."""
    path = Path(path)
    if not path.exists() and not create:
        raise StoreError(f"{path}: no results store here (`{REBUILD}` builds one)")
    if create:
        own_file(path, "the results store")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except OSError as err:
        raise OSError(err.errno, err.strerror, str(err.filename or path)) from None
    except sqlite3.Error as err:
        raise _disk_error(err, path) or StoreError(f"{path}: cannot open ({err})") from None
    try:
        _check_schema(con, path)
        con.execute("PRAGMA foreign_keys = ON")
        yield con
    except sqlite3.DatabaseError as err:  # the disk's, else not SQLite at all or a torn file
        raise _disk_error(err, path) or _damaged(path, f"not a results store ({err})") from None
    finally:
        con.close()


@contextlib.contextmanager
def transaction(con: sqlite3.Connection):
    """One write transaction, the store's lock taken at the start (another writer waits on it
    up to BUSY_TIMEOUT_S, then commits after it)."""
    con.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if con.in_transaction:  # SQLite rolls back by itself after some errors (a full disk)
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
        with transaction(con):
            if not con.execute("PRAGMA user_version").fetchone()[0]:  # another writer's first
                for statement in filter(str.strip, SCHEMA.split(";")):
                    con.execute(statement)
                con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        return
    if version == 0 or not {"runs", "records"} <= tables:
        raise _damaged(path, "not a results store (its tables are missing)")
    if version < SCHEMA_VERSION:
        with transaction(con):
            version = con.execute("PRAGMA user_version").fetchone()[0]  # another writer's first
            for step in range(version, SCHEMA_VERSION):
                con.execute(MIGRATIONS[step])
            con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
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
        "lock": env.get("lock"),  # absent in runs before the lock was recorded
    }


def ran(run: dict) -> set[str]:
    """The notebooks `run` (a run.json) ran: those its notebooks list under its own run id (or
    none, before each notebook named its run), less a failed one whose earlier results the
    report still shows (`stale_results`). The others are earlier runs', kept by `run --only`."""
    return {
        nb["notebook"]
        for nb in run.get("notebooks") or []
        if nb.get("run_id", run.get("run_id")) == run.get("run_id") and not nb.get("stale_results")
    }


def _record_rows(folder: Path, run_id: str, notebooks: set[str], read: Read) -> list[dict]:
    rows = []
    for path in sorted(folder.glob(f"*{RESULTS_SUFFIX}")):
        notebook = path.name[: -len(RESULTS_SUFFIX)]
        if notebook not in notebooks:
            continue
        saved = read[path.name].saved if path.name in read else read_results(path)
        for record in saved:
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


def report_runs(folder: str | Path, report: str | None = None, read: Read | None = None) -> Stored:
    """(run row, record rows) of each run a report folder holds (its `run-<k>/` runs, or itself),
    read and checked before anything is written (but the results files in `read`, as a runner
    read them); ParameterError naming a damaged file. The runs of `run-<k>/` belong to the
    report `report` when given (an `ab` side), else to the folder's own run.json."""
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
        files = within(read, run_folder.name) if runs else read or {}
        records = _record_rows(run_folder, row["run_id"], ran(run), files)
        _refuse_twice(run_folder, row["run_id"], records)
        out.append((row, records))
    return out


def _refuse_twice(folder: Path, run_id: str, records: list[dict]) -> None:
    """ParameterError when a record id is saved more than once in a run (one would replace the
    other in the store)."""
    counts = collections.Counter(r["record_id"] for r in records)
    twice = sorted(rid for rid, n in counts.items() if n > 1)
    if twice:
        where = sorted({r["notebook"] for r in records if r["record_id"] == twice[0]})
        raise ParameterError(
            f"{folder}: run {run_id} saves {len(twice)} record id(s) more than once (first "
            f"{twice[0]}, in {', '.join(where)}): not added; each record id is one record"
        )


def insert(con: sqlite3.Connection, row: dict, records: list[dict]) -> None:
    """Add (or replace) one run (`report_runs`) inside a `transaction`."""
    con.execute("DELETE FROM runs WHERE run_id = ?", (row["run_id"],))  # its records cascade
    con.execute(
        f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}) VALUES ({', '.join('?' * len(RUN_COLUMNS))})",
        [row[c] for c in RUN_COLUMNS],
    )
    con.executemany(
        f"INSERT INTO records ({', '.join(RECORD_COLUMNS)}) "
        f"VALUES ({', '.join('?' * len(RECORD_COLUMNS))})",
        [[r[c] for c in RECORD_COLUMNS] for r in records],
    )


def add_report(folder: str | Path, path: str | Path, report: str | None = None) -> list[str]:
    """Add (or replace) every run of the report `folder` (`report_runs`) in the store at `path`,
    in one transaction; returns their run ids."""
    return add_runs(report_runs(folder, report), path)


def add_runs(runs: Stored, path: str | Path) -> list[str]:
    """Add (or replace) `runs` (`report_runs`) in the store at `path`, in one transaction;
    returns their run ids."""
    with connect(path) as con, transaction(con):
        for row, records in runs:
            insert(con, row, records)
    return [row["run_id"] for row, _ in runs]


def remember(
    folder: str | Path,
    *,
    path: str | Path | None = None,
    report: str | None = None,
    read: Read | None = None,
) -> Stored:
    """The runners' hook: add the runs of the report `folder` (`report_runs`, its results files
    in `read` as the runner read them) to the store at `path` (default: its store,
    `store_path`), and return them as added (none when nothing was); a store that fails says so
    in one line and never fails the run: the report stands, and `--rebuild` brings the store
    back from it."""
    try:
        path = path or store_path(report=folder)
        if path is not None:
            runs = report_runs(folder, report, read)
            add_runs(runs, path)
            return runs
    except (ParameterError, OSError, sqlite3.Error) as err:
        print(f"warning: run not added to the results store: {err}", file=sys.stderr, flush=True)
    return []


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
