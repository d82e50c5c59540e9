"""A report folder read back: its run.json and its records (a repeated report: the aggregate over
its runs), checked by `results.files` so that a damaged file stops a rebuild before anything is
written (a file or report folder that is a link, a FIFO or a device among them)."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pandas as pd

from kernel_lib.report.aggregate import aggregate_records
from kernel_lib.results.files import Read, notebook_records, read_run, read_table
from kernel_lib.results.folders import RUN_FILE, repeat_of

# The check run at CI sizes: `make reference` runs the platform file REFERENCE_PLATFORM into
# outputs/REFERENCE_FOLDER, the nbval reference set. That folder is a check, never set beside the
# platforms' figures nor a point of a trend; a user's own `run --platform ci` (outputs/ci) is a run.
REFERENCE_PLATFORM = "ci"
REFERENCE_FOLDER = "reference"
# What a report shows from its run.json, beyond the notebooks' own rows (results.files.RunInfo).
RUN_KEYS = (
    "platform", "parameters", "started_utc", "finished_utc", "git", "command", "environment",
    "notebooks",
)  # fmt: skip


def report_folders(outputs: str | Path) -> list[Path]:
    """The report folders directly under `outputs` (each has a run.json), by name."""
    outputs = Path(outputs)
    if not outputs.is_dir():
        return []
    return sorted(p for p in outputs.iterdir() if p.is_dir() and (p / RUN_FILE).exists())


def report_records(folder: str | Path, read: Read | None = None) -> pd.DataFrame:
    """A report's records with a `notebook` column: from its `<notebook>.results.json` files (those
    in `read` as already read); for a repeated report, the aggregate over its runs
    (`aggregate.aggregate_records`); where the JSON files are not kept (outputs/reference in
    git), from its results.csv."""
    folder = Path(folder)
    if repeat_of(folder) > 1:
        return aggregate_records(folder, read)
    records = notebook_records(folder, read)
    if not records.empty:
        return records
    table = folder / "results.csv"
    present = table.exists() or table.is_symlink()  # a link, even a dangling one: refused
    records = read_table(table) if present else pd.DataFrame()
    return records if len(records.columns) else pd.DataFrame(columns=["notebook", "status"])


class Report(NamedTuple):
    """A report folder read once, for its pages and the gallery: its run.json and records."""

    folder: Path
    run: dict
    records: pd.DataFrame

    @property
    def index(self) -> Path:
        return self.folder / "index.html"


def read_report(folder: str | Path, read: Read | None = None) -> Report:
    """A report folder's run.json and records, with a `notebook` column (a repeated report: the
    aggregate over its runs; `read`: results files already read, as the runner's findings cells
    read them); ParameterError for a damaged file."""
    folder = Path(folder)
    run = read_run(folder / RUN_FILE, required=RUN_KEYS)
    return Report(folder, run, report_records(folder, read))
