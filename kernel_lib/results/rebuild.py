"""`python -m kernel_lib history --rebuild`: every report folder under outputs/ added (again) to
the results store, and nothing lost.

The store is changed in place, in one transaction that holds its lock (a writer meanwhile waits,
then commits after it), and only when it is a store (kernel_lib.results.store.connect: anything
else, a damaged store or a user's file, is one line and left byte for byte) or new. Its runs that
no folder under outputs/ holds (a report `run` replaced since, `ab`'s, imported ones) are kept;
the runs found are read again (their rows as this code makes them). The store as it was is kept
beside it, `<name>.<UTC time>.bak`, written whole (kernel_lib.results.writes.written).
"""

from __future__ import annotations

import datetime as dt
import itertools
import shutil
from pathlib import Path
from typing import NamedTuple

from kernel_lib.params import ParameterError
from kernel_lib.results import store
from kernel_lib.results.folders import RUN_FILE, run_folders
from kernel_lib.results.writes import written


class Rebuilt(NamedTuple):
    added: list[str]  # the run ids read from the report folders
    kept: int  # runs of the store before that no folder under outputs holds
    backup: Path | None  # the store before (None: there was none)


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


def backup_path(path: Path) -> Path:
    """A new file beside the store `path`, named by the time: `<name>.<UTC time>[-n].bak`."""
    stamp = f"{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%SZ}"
    names = (f"{path.name}.{stamp}{f'-{n}' if n > 1 else ''}.bak" for n in itertools.count(1))
    return next(b for b in map(path.with_name, names) if not b.exists())


def rebuild(outputs: str | Path, path: str | Path) -> Rebuilt:
    """Add every run of the report folders under `outputs` to the store at `path` (created when
    missing), keeping its other runs and a copy of it as it was (`backup_path`); ParameterError
    (one line, nothing written) for a missing `outputs`, a damaged report, a store that is not
    one; OSError naming the file for a disk's error (the store left as it was)."""
    outputs, path = Path(outputs), Path(path)
    if not outputs.is_dir():
        raise ParameterError(f"--outputs {outputs}: no such folder (nothing rebuilt)")
    runs = [run for folder in report_folders_under(outputs) for run in store.report_runs(folder)]
    existed = path.exists()
    with store.connect(path) as con, store.transaction(con):
        # read before the copy: a crashed writer's journal is rolled back by then
        before = {row[0] for row in con.execute("SELECT run_id FROM runs")}
        backup = backup_path(path) if existed else None
        if backup is not None:
            with written(backup) as temporary:
                shutil.copyfile(path, temporary)  # no writer can change it: we hold its lock
        for row, records in runs:
            store.insert(con, row, records)
    added = [row["run_id"] for row, _ in runs]
    return Rebuilt(added, len(before - set(added)), backup)
