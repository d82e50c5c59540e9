"""Run a platform's notebooks with papermill into a report folder, one after another.

Each notebook ends `ok`, `failed` (cell and error line), `timed out`, `kernel died`, or `skipped`
(it ran cleanly and every record it saved is skipped: its hardware is absent). The run is staged in a
sibling folder and swapped in at the end, so an interrupted run leaves the previous report untouched.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat
import papermill
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbconvert import HTMLExporter
from papermill.exceptions import PapermillExecutionError

from kernel_lib.params import ROOT, Plan
from kernel_lib.platform import device_facts
from kernel_lib.records import RESULTS_SUFFIX

KERNEL_NAME = "kernel-workbook"
RUN_FILE = "run.json"


@dataclass(frozen=True)
class NotebookResult:
    notebook: str
    status: str  # ok | failed | timed out | kernel died | skipped
    detail: str  # failing cell and error line, or the skip reason
    seconds: float | None


def _first_error(nb) -> str | None:
    """'cell N: Name: message' for the first error output in an executed notebook."""
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                count = cell.get("execution_count")
                return f"cell {count if count is not None else index}: {output['ename']}: {output['evalue']}"
    return None


def _skip_reason(results_path: Path) -> str | None:
    """The reason when every saved record is skipped (the notebook found its hardware absent)."""
    if not results_path.exists():
        return None
    rows = json.loads(results_path.read_text())
    if rows and all(r["status"] == "skipped" for r in rows):
        return rows[0]["reason"]
    return None


def _duration(nb) -> float | None:
    return nb.metadata.get("papermill", {}).get("duration")


def classify(output: Path, nb, error: BaseException | None) -> tuple[str, str]:
    """Status and detail from papermill's exception *and* the executed notebook `nb`'s own error
    outputs (None if papermill wrote nothing to `output`)."""
    if isinstance(error, PapermillExecutionError):
        return "failed", f"cell {error.exec_count}: {error.ename}: {error.evalue}"
    if isinstance(error, CellTimeoutError):
        return "timed out", str(error).splitlines()[0] if str(error) else "a cell exceeded its timeout"
    if isinstance(error, DeadKernelError):
        return "kernel died", str(error).splitlines()[0] if str(error) else "the kernel exited"
    if error is not None:
        return "failed", f"{type(error).__name__}: {error}".splitlines()[0]
    if nb is not None and (line := _first_error(nb)):
        return "failed", line
    reason = _skip_reason(output.with_name(output.stem + RESULTS_SUFFIX))
    return ("skipped", reason) if reason else ("ok", "")


def execute(notebook: Path, output: Path, parameters: dict, *, timeout: int | None,
            kernel_name: str = KERNEL_NAME, progress: bool = True) -> NotebookResult:
    """Execute one notebook with its working directory set to the report folder."""
    error = None
    try:
        papermill.execute_notebook(
            str(notebook), str(output), parameters=parameters, kernel_name=kernel_name,
            cwd=str(output.parent), progress_bar=progress, execution_timeout=timeout,
        )
    except Exception as err:  # noqa: BLE001 - any failure of one notebook is recorded, the run goes on
        error = err
    nb = nbformat.read(output, as_version=4) if output.exists() else None
    status, detail = classify(output, nb, error)
    return NotebookResult(notebook.stem, status, detail, _duration(nb) if nb is not None else None)


def to_html(notebook: Path) -> Path:
    """The executed notebook as standalone HTML with images embedded."""
    body, _ = HTMLExporter(embed_images=True).from_filename(str(notebook))
    target = notebook.with_suffix(".html")
    target.write_text(body)
    return target


def _git_revision() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _stage(out_dir: Path, plan: Plan) -> Path:
    """A fresh staging folder; for a partial run (--only) it starts as a copy of the last report."""
    staging = out_dir.parent / f".staging-{out_dir.name}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    if out_dir.exists() and (out_dir / RUN_FILE).exists():
        shutil.copytree(out_dir, staging)
        for name in plan.notebooks:
            for stale in staging.glob(f"{name}.*"):
                stale.unlink()
    else:
        staging.mkdir(parents=True)
    return staging


def _swap_in(staging: Path, out_dir: Path) -> None:
    """Replace the old report with the new one; the old one is deleted only once replaced."""
    previous = out_dir.parent / f".previous-{out_dir.name}-{os.getpid()}"
    if out_dir.exists():
        out_dir.rename(previous)
    staging.rename(out_dir)
    shutil.rmtree(previous, ignore_errors=True)


def run_plan(plan: Plan, out_dir: Path, *, kernel_name: str = KERNEL_NAME, progress: bool = True) -> list[NotebookResult]:
    """Run every notebook of `plan` into `out_dir` and build its report; failures don't stop the run."""
    from kernel_lib.report import build_report

    out_dir = Path(out_dir).resolve()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = _stage(out_dir, plan)
    previous = json.loads((staging / RUN_FILE).read_text()) if (staging / RUN_FILE).exists() else {}
    started = dt.datetime.now(dt.timezone.utc)
    results = []
    try:
        for index, name in enumerate(plan.notebooks, 1):
            print(f"[{index}/{len(plan.notebooks)}] {name}", file=sys.stderr, flush=True)
            output = staging / f"{name}.ipynb"
            result = execute(plan.notebooks_dir / f"{name}.ipynb", output, plan.parameters_for(name),
                             timeout=plan.cell_timeout_s, kernel_name=kernel_name, progress=progress)
            if output.exists():
                to_html(output)
            print(f"    {result.status}{': ' + result.detail if result.detail else ''}",
                  file=sys.stderr, flush=True)
            results.append(result)
        kept = [r for r in previous.get("notebooks", []) if r["notebook"] not in plan.notebooks]
        run = {
            "platform": plan.platform,
            "parameters": plan.source,
            "description": plan.description,
            "started_utc": started.isoformat(timespec="seconds"),
            "finished_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "git": _git_revision(),
            "command": " ".join(["python -m kernel_lib", *sys.argv[1:]]),
            "environment": device_facts().as_dict(),
            "notebooks": kept + [asdict(r) for r in results],
        }
        (staging / RUN_FILE).write_text(json.dumps(run, indent=1) + "\n")
        build_report(staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _swap_in(staging, out_dir)
    return results
