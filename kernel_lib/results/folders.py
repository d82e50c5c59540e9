"""A report folder's layout: its run.json (RUN_FILE) and, for a repeated report (`run --repeat
N`), its runs `run-1/` ... `run-N/` (RUN_PREFIX), each a report folder of its own."""

from __future__ import annotations

from pathlib import Path

from kernel_lib.results.files import read_run

RUN_FILE = "run.json"  # a run's identity, environment and notebooks (files.RunInfo)
RUN_PREFIX = "run-"  # the runs of a repeated report: OUT/run-1/ ... OUT/run-N/


def repeat_of(folder: str | Path) -> int:
    """How many runs a report folder holds: its run.json's `repeat` (1 for a single run)."""
    run = Path(folder) / RUN_FILE
    return read_run(run).get("repeat", 1) if run.exists() else 1


def run_folders(folder: str | Path) -> list[Path]:
    """The `run-<k>/` report folders of a repeated report, in k order (none for a single run)."""
    found = [
        p
        for p in Path(folder).glob(f"{RUN_PREFIX}*")
        if p.is_dir() and p.name[len(RUN_PREFIX) :].isdigit() and (p / RUN_FILE).exists()
    ]
    return sorted(found, key=lambda p: int(p.name[len(RUN_PREFIX) :]))
