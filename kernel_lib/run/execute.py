"""One notebook executed by papermill in a fresh kernel, and its outcome.

Each notebook ends `ok`, `failed` (cell and error line), `timed out`, `kernel died`, `stopped`
(Ctrl-C, SIGTERM, or the device plan's time budget, in its kernel or before the runner has written
its report, `stopped_after`: the sections it finished keep their records, which `Suite.run` saves
as each ends), or `skipped` (it ran cleanly and every record it saved is skipped: its hardware is
absent). A cell that raises does not stop its notebook: the cells after it still run, so one
failed check or crashed section costs neither the other sections' figures nor the records (the
last cell saves them); the notebook is `failed` with its first error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import nbformat
import papermill
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from papermill.exceptions import PapermillExecutionError
from papermill.execute import ERROR_MARKER_TAG, ERROR_STYLE, remove_error_markers
from traitlets.config import Config

from kernel_lib.records import RESULTS_SUFFIX
from kernel_lib.run.environment import notebook_environment

KERNEL_NAME = "kernel-workbook"
STOPPED = "stopped"
FAILED_STATUSES = ("failed", "timed out", "kernel died", STOPPED)


@dataclass(frozen=True)
class NotebookResult:
    notebook: str
    status: str  # ok | failed | timed out | kernel died | stopped | skipped
    detail: str  # failing cell and error line, or the skip reason
    seconds: float | None
    run_id: str = ""  # the run that produced it (a partial run keeps the others' own)
    git: str = ""
    started_utc: str = ""
    stale_results: str = ""  # it failed, and the report still shows an earlier run's results
    machine: dict = dataclasses.field(default_factory=dict)  # how busy it was: `machine_load`


def _raised(cell) -> list:
    """The error outputs of one executed cell."""
    return [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def _cell_errors(nb) -> list[str]:
    """'cell N: Name: message' (its first line) for each error output in an executed notebook,
    in cell order."""
    found = []
    for index, cell in enumerate(nb.cells):
        count = cell.get("execution_count")
        for output in _raised(cell):
            message = (output["evalue"].splitlines() or [""])[0]
            found.append(
                f"cell {count if count is not None else index}: {output['ename']}: {message}"
            )
    return found


def _saved_status(results_path: Path) -> tuple[str, str] | None:
    """From the saved records: failed when any record failed its check or raised (a wrong answer
    or a failed candidate fails the run even if no cell raised), skipped when every record is
    (the hardware is absent)."""
    if not results_path.exists():
        return None
    rows = json.loads(results_path.read_text())
    for status, what in (("wrong", "failed their check"), ("failed", "raised")):
        bad = [f"{r['case']}/{r['implementation']}" for r in rows if r["status"] == status]
        if bad:
            return "failed", f"{len(bad)} records {what}: {', '.join(bad[:5])}"
    if rows and all(r["status"] == "skipped" for r in rows):
        return "skipped", rows[0]["reason"]
    return None


def _stopped(output: Path, where: str) -> tuple[str, str]:
    """`stopped` and how far it got (`where`), with the records its finished sections saved."""
    results = output.with_name(output.stem + RESULTS_SUFFIX)
    saved = len(json.loads(results.read_text())) if results.exists() else 0
    return STOPPED, (
        f"SIGINT or SIGTERM (Ctrl-C, a kill or its time budget) {where}: "
        f"the {saved} records of the sections it finished are kept"
    )


def _in_cell(nb) -> str:
    cells = sum(c.get("execution_count") is not None for c in nb.cells) if nb is not None else 0
    return f"in cell {cells}"


def stopped_after(result: NotebookResult, output: Path) -> NotebookResult:
    """`result` when a stop came once its kernel had ended, before its report was written:
    `stopped` with the records it saved, what it had ended as, and whether its HTML is missing."""
    ended = f"; it had ended {result.status}{': ' + result.detail if result.detail else ''}"
    html = "" if output.with_suffix(".html").exists() else "; no HTML"
    status, detail = _stopped(output, "after its kernel ended")
    return dataclasses.replace(result, status=status, detail=detail + ended + html)


def _duration(nb) -> float | None:
    return nb.metadata.get("papermill", {}).get("duration")


def classify(output: Path, nb, error: BaseException | None) -> tuple[str, str]:
    """Status and detail from papermill's exception *and* the executed notebook `nb`'s own error
    outputs (None if papermill wrote nothing to `output`)."""
    if isinstance(error, CellTimeoutError):
        return "timed out", str(error).splitlines()[0] if str(
            error
        ) else "a cell exceeded its timeout"
    if isinstance(error, DeadKernelError):
        return "kernel died", str(error).splitlines()[0] if str(error) else "the kernel exited"
    if errors := _cell_errors(nb) if nb is not None else []:
        more = f" (and {len(errors) - 1} more cells raised)" if len(errors) > 1 else ""
        return "failed", errors[0] + more
    if isinstance(error, PapermillExecutionError):
        return "failed", f"cell {error.exec_count}: {error.ename}: {error.evalue}"
    if error is not None:
        return "failed", f"{type(error).__name__}: {error}".splitlines()[0]
    return _saved_status(output.with_name(output.stem + RESULTS_SUFFIX)) or ("ok", "")


def mark_errors(nb):
    """`nb` with papermill's error marker (it names the *last* cell that raised and says
    execution stopped there) replaced by a line at the top linking each cell that raised, first
    first (usually the cause), and a marker before each of them."""
    nb = remove_error_markers(nb)
    cells, links = [], []
    for cell in nb.cells:
        if raised := _raised(cell):
            anchor = f"cell-error-{len(links) + 1}"
            links.append(f'<a href="#{anchor}">In [{cell.execution_count}]</a> {raised[0].ename}')
            cells.append(_marker("This cell raised; the cells after it ran on.", anchor))
        cells.append(cell)
    if links:
        cells.insert(0, _marker("Cells that raised: " + ", ".join(links)))
    nb.cells = cells
    return nb


def _marker(html: str, anchor: str = ""):
    """A markdown cell in papermill's error style, tagged so that a rerun removes it."""
    ident = f' id="{anchor}"' if anchor else ""
    span = f"<span{ident} {ERROR_STYLE}>{html}</span>"
    return nbformat.v4.new_markdown_cell(span, metadata={"tags": [ERROR_MARKER_TAG]})


def kernel_config(sockets: Path) -> Config:
    """The kernel talks to the runner over Unix sockets in the private folder `sockets`, not over
    TCP on localhost: there is nothing to eavesdrop on, so ipykernel has no cause for its "Kernel is
    running over TCP without encryption" warning, which it would print once per notebook. (Without
    an absolute `ip`, the sockets would land in the kernel's working directory, the report.)"""
    if os.name != "posix":  # no Unix sockets
        return Config()
    return Config(KernelManager={"transport": "ipc", "ip": str(sockets / "kernel")})


def execute(
    notebook: Path,
    output: Path,
    parameters: dict,
    *,
    timeout: int | None,
    kernel_name: str = KERNEL_NAME,
    progress: bool = True,
    raising: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> NotebookResult:
    """Execute one notebook with its working directory set to the report folder, every cell even
    after one raises (nbclient's allow_errors; papermill raises at the end). Ctrl-C (SIGINT, or
    SIGTERM under the CLI: kernel_lib.interrupts) stops it: `stopped`, with what it saved (the
    caller stops the run there). Papermill runs within `raising()` (the runner's
    `Stops.raising`: a stop there stops the kernel, held everywhere else)."""
    error, stopped = None, False
    sockets = tempfile.TemporaryDirectory(prefix="kernel-workbook-", ignore_cleanup_errors=True)
    try:
        with raising(), notebook_environment(notebook.stem):
            papermill.execute_notebook(
                str(notebook),
                str(output),
                parameters=parameters,
                kernel_name=kernel_name,
                cwd=str(output.parent),
                progress_bar=progress,
                execution_timeout=timeout,
                allow_errors=True,
                config=kernel_config(Path(sockets.name)),
            )
    except KeyboardInterrupt:  # papermill has stopped the kernel; its notebook is written
        stopped = True
    except Exception as err:  # noqa: BLE001 - any failure of one notebook is recorded, the run goes on
        error = err
    finally:
        sockets.cleanup()
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EROFS, errno.EDQUOT):
        raise error  # the disk failed writing the notebook: the run stops, one line, exit 1
    nb = nbformat.read(output, as_version=4) if output.exists() else None
    if nb is not None and isinstance(error, PapermillExecutionError):
        nb = mark_errors(nb)
        nbformat.write(nb, str(output))
    status, detail = _stopped(output, _in_cell(nb)) if stopped else classify(output, nb, error)
    return NotebookResult(notebook.stem, status, detail, _duration(nb) if nb is not None else None)
