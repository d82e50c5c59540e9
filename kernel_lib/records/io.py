"""Where a notebook's records go (`resolve_results_dir`), written as `<name>.results.json/.csv`
and read back as a DataFrame."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from kernel_lib import OUTPUTS
from kernel_lib.records.ids import stamp
from kernel_lib.records.schema import Record
from kernel_lib.records.tables import to_dicts, to_frame, to_frame_with_verdict

RESULTS_SUFFIX = ".results.json"
# The runner hands each notebook kernel the folder its results go to (the report being staged:
# `resolve_results_dir`) and the notebook's name, so that each section's records are saved as it
# ends (`save_sections`); its run's identity goes through records.ids.
RESULTS_DIR_ENV = "KERNEL_WORKBOOK_RESULTS_DIR"
NOTEBOOK_ENV = "KERNEL_WORKBOOK_NOTEBOOK"
# Where results go when nothing says otherwise (JupyterLab; papermill without an output path).
LOCAL_RESULTS_DIR = OUTPUTS / "local"


def resolve_results_dir(
    explicit: str | Path | None = "", output_path: str | Path | None = None
) -> Path:
    """The absolute folder a notebook's results go to, never the current directory by default:
    1. `explicit` (the notebook's `results_dir` parameter) when not empty;
    2. else the folder of `output_path`: the output notebook that papermill names in
       PAPERMILL_OUTPUT_PATH with `--inject-output-path` (a relative one is taken from the kernel's
       working directory: papermill's own unless `--cwd` moved it; '-' and URLs don't count);
    3. else $KERNEL_WORKBOOK_RESULTS_DIR, which the runner sets to its report folder;
    4. else `outputs/local/` in the repository (JupyterLab, or papermill without 1 or 2)."""
    if explicit:
        return Path(explicit).expanduser().resolve()
    if output_path and str(output_path) != "-" and "://" not in str(output_path):
        return Path(output_path).expanduser().resolve().parent
    if env := os.environ.get(RESULTS_DIR_ENV):
        return Path(env).expanduser().resolve()
    return LOCAL_RESULTS_DIR


def save_notebook_records(records: Iterable[Record], name: str, namespace: dict) -> None:
    """`save_records` from a notebook, which passes its `globals()`: its `results_dir` parameter
    and papermill's PAPERMILL_OUTPUT_PATH decide where (`resolve_results_dir`). Prints one line
    saying where (relative to the working directory when inside it, as in a report)."""
    directory = resolve_results_dir(
        namespace.get("results_dir", ""), namespace.get("PAPERMILL_OUTPUT_PATH")
    )
    path = save_records(records, name, directory)
    cwd = Path.cwd().resolve()
    shown = path.relative_to(cwd) if path.is_relative_to(cwd) else path
    print(f"results: {shown} and {shown.with_suffix('.csv').name}")


def save_sections(records: Iterable[Record]) -> Path | None:
    """In a notebook the runner executes (it names the notebook and its report folder): the
    records made so far saved as the notebook's results, so that a notebook stopped later keeps
    the sections it finished. Elsewhere (by hand, `bench`, `check`) nothing: None."""
    name, directory = os.environ.get(NOTEBOOK_ENV), os.environ.get(RESULTS_DIR_ENV)
    return save_records(records, name, directory) if name and directory else None


def save_records(
    records: Iterable[Record], name: str, directory: str | Path | None = None
) -> Path:
    """Stamp the records (`stamp`) and write `<name>.results.json` and `<name>.results.csv` into
    `directory` (default: `resolve_results_dir()`, the runner's report folder or outputs/local/);
    return the JSON path."""
    records = stamp(records)
    directory = Path(directory) if directory is not None else resolve_results_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}{RESULTS_SUFFIX}"
    path.write_text(json.dumps(to_dicts(records), indent=1) + "\n")
    to_frame(records).to_csv(directory / f"{name}.results.csv", index=False)
    return path


def load_records(path: str | Path) -> pd.DataFrame:
    """Records from one `.results.json` file, or from every one in a folder, as a DataFrame."""
    path = Path(path)
    files = sorted(path.glob(f"*{RESULTS_SUFFIX}")) if path.is_dir() else [path]
    rows = [row for f in files for row in json.loads(f.read_text())]
    return to_frame_with_verdict(rows)
