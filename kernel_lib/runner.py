"""Run a platform's notebooks with papermill into a report folder, one after another.

Each notebook ends `ok`, `failed` (cell and error line), `timed out`, `kernel died`, or `skipped`
(it ran cleanly and every record it saved is skipped: its hardware is absent). A cell that raises
does not stop its notebook: the cells after it still run, so one failed check or crashed section
costs neither the other sections' figures nor the records (the last cell saves them); the notebook
is `failed` with its first error.

The report folder is held and staged by kernel_lib.outdir: the runner replaces only what it made,
one run at a time per folder, and an interrupted or failed run leaves the previous report untouched.
The notebook kernels run this checkout's kernel_lib (ROOT first on PYTHONPATH) and its compile cache.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat
import papermill
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbconvert import HTMLExporter
from papermill.exceptions import PapermillExecutionError
from papermill.execute import ERROR_MARKER_TAG, ERROR_STYLE, remove_error_markers
from traitlets.config import Config

from kernel_lib import allocator
from kernel_lib.outdir import RUN_FILE, owned, staged
from kernel_lib.params import ROOT, ParameterError, Plan
from kernel_lib.platform import device_facts
from kernel_lib.records import (
    PLATFORM_ENV,
    RESULTS_DIR_ENV,
    RESULTS_SUFFIX,
    RUN_ID_ENV,
    to_frame_with_verdict,
)
from kernel_lib.report.aggregate import RUN_PREFIX, run_folders, write_aggregate_run
from kernel_lib.report.gallery import build_gallery
from kernel_lib.report.lead import with_findings
from kernel_lib.report.pages import build_report
from kernel_lib.reportfiles import read_results

KERNEL_NAME = "kernel-workbook"
CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"  # compiled kernels (flex_attention, torch.compile) persist
FAILED_STATUSES = ("failed", "timed out", "kernel died")


@dataclass(frozen=True)
class NotebookResult:
    notebook: str
    status: str  # ok | failed | timed out | kernel died | skipped
    detail: str  # failing cell and error line, or the skip reason
    seconds: float | None
    run_id: str = ""  # the run that produced it (a partial run keeps the others' own)
    git: str = ""
    started_utc: str = ""
    stale_results: str = ""  # it failed, and the report still shows an earlier run's results
    machine: dict = dataclasses.field(default_factory=dict)  # how busy it was: `machine_load`


# A notebook measured while the 1-min load exceeded the core count, or while the hypervisor took
# this share of the CPU time (steal), is flagged: its timings shared the machine.
BUSY_STEAL_FRACTION = 0.05


def _cpu_jiffies() -> tuple[int, int] | None:
    """(steal, total) CPU time from the first line of /proc/stat; None where there is none."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    # user nice system idle iowait irq softirq steal [guest guest_nice: already counted in user]
    values = [int(v) for v in fields[1:9]]
    return (values[7] if len(values) > 7 else 0), sum(values)


def machine_sample() -> dict:
    """The load averages and CPU counters now (before or after a notebook)."""
    try:
        load = [round(v, 2) for v in os.getloadavg()]
    except OSError:  # not available on this OS
        load = None
    return {"loadavg": load, "jiffies": _cpu_jiffies()}


def busy_reason(machine: dict) -> str:
    """Why a notebook's timings shared a busy machine ('' when they did not)."""
    cores, reasons = machine.get("cores") or 1, []
    loads = {
        when: machine.get(f"load_{when}")
        for when in ("start", "end")
        if machine.get(f"load_{when}")
    }
    high = {when: load[0] for when, load in loads.items() if load[0] > cores}
    if high:
        at = ", ".join(f"{v:.2f} at its {when}" for when, v in high.items())
        reasons.append(f"1-min load {at} > {cores} cores")
    steal = machine.get("steal_fraction")
    if steal is not None and steal > BUSY_STEAL_FRACTION:
        reasons.append(f"CPU steal {steal:.0%} of its time")
    return "; ".join(reasons)


def machine_load(start: dict, end: dict) -> dict:
    """How busy the machine was over one notebook: the load averages (1, 5, 15 min) at its start
    and end, the share of CPU time stolen by the hypervisor over it (Linux), the core count, and
    `busy`, the reason to distrust its timings ('' if none)."""
    steal = None
    if start.get("jiffies") and end.get("jiffies"):
        total = end["jiffies"][1] - start["jiffies"][1]
        steal = round((end["jiffies"][0] - start["jiffies"][0]) / total, 4) if total > 0 else 0.0
    machine = {
        "cores": os.cpu_count(),
        "load_start": start.get("loadavg"),
        "load_end": end.get("loadavg"),
        "steal_fraction": steal,
    }
    return {**machine, "busy": busy_reason(machine)}


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
) -> NotebookResult:
    """Execute one notebook with its working directory set to the report folder, every cell even
    after one raises (nbclient's allow_errors; papermill raises at the end)."""
    error = None
    sockets = tempfile.TemporaryDirectory(prefix="kernel-workbook-", ignore_cleanup_errors=True)
    try:
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
    except Exception as err:  # noqa: BLE001 - any failure of one notebook is recorded, the run goes on
        error = err
    finally:
        sockets.cleanup()
    nb = nbformat.read(output, as_version=4) if output.exists() else None
    if nb is not None and isinstance(error, PapermillExecutionError):
        nb = mark_errors(nb)
        nbformat.write(nb, str(output))
    status, detail = classify(output, nb, error)
    return NotebookResult(notebook.stem, status, detail, _duration(nb) if nb is not None else None)


# A tqdm bar ("desc:  40%|████      | 6/15 [00:01<00:01,  4.94it/s]", or "12it [00:03, 3.9it/s]")
# and the terminal escapes tqdm writes between bars (cursor up, erase line).
_BAR = re.compile(r"\d{1,3}%\|.*\|\s*\S+/\S+\s*\[|\d+(\.\d+)?[kMG]?it \[\d+:\d\d")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _progress_residue(line: str) -> bool:
    """A stderr line that is a progress bar (its last carriage-returned state), or nothing at all."""
    shown = _ANSI.sub("", line.rsplit("\r", 1)[-1])
    return not shown.strip() or bool(_BAR.search(shown))


def without_progress_bars(nb):
    """`nb` with tqdm progress bars removed from its stderr streams (other stderr lines, such as
    warnings, stay; an output left blank goes). The .ipynb keeps them: this is for the HTML."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        outputs = []
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                kept = [line for line in output["text"].split("\n") if not _progress_residue(line)]
                if not kept:
                    continue
                output["text"] = "\n".join(kept) + "\n"
            outputs.append(output)
        if "outputs" in cell:
            cell["outputs"] = outputs
    return nb


def lead_with_findings(notebook: Path, platform: str) -> None:
    """Put what the executed notebook found (its saved records' declared headlines and their
    plot) after its title; a notebook that saved no records is left as it is."""
    results = notebook.with_name(notebook.stem + RESULTS_SUFFIX)
    if not results.exists():
        return
    records = to_frame_with_verdict(read_results(results))
    nb = with_findings(nbformat.read(notebook, as_version=4), records, platform)
    nbformat.write(nb, str(notebook))


def to_html(notebook: Path) -> Path:
    """The executed notebook as standalone HTML with images embedded, without progress bars."""
    nb = without_progress_bars(nbformat.read(notebook, as_version=4))
    resources = {"metadata": {"name": notebook.stem, "path": str(notebook.parent)}}
    body, _ = HTMLExporter(embed_images=True).from_notebook_node(nb, resources=resources)
    target = notebook.with_suffix(".html")
    target.write_text(body)
    return target


def _git_revision() -> str:
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        # Reports under outputs/ are results, not code: they never make a revision dirty.
        dirty = subprocess.run(
            [
                "git",
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                ".",
                ":(exclude)outputs",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _set_aside(staging: Path, name: str) -> Path:
    """Move the previous files of notebook `name` into a side folder; return it."""
    aside = staging / ".previous" / name
    aside.mkdir(parents=True, exist_ok=True)
    for old in staging.glob(f"{name}.*"):
        old.rename(aside / old.name)
    return aside


def _keep_or_replace(staging: Path, name: str, aside: Path, result: NotebookResult) -> bool:
    """New results replace the old only when the notebook succeeded. On failure with earlier
    results present, the failed run is kept as `<name>.failed.ipynb/.html` and the earlier
    results come back (the report marks them stale). Returns True when they came back."""
    old = sorted(aside.glob(f"{name}{RESULTS_SUFFIX}"))
    if result.status in FAILED_STATUSES and old:
        for new in staging.glob(f"{name}.*"):
            if new.suffix in (".ipynb", ".html"):
                new.rename(staging / f"{name}.failed{new.suffix}")
            else:
                new.unlink()
        for kept in aside.iterdir():
            kept.rename(staging / kept.name)
        return True
    for stale in staging.glob(f"{name}.failed.*"):
        stale.unlink()
    return False


@contextlib.contextmanager
def _environment(variables: dict, cleared: tuple = ()):
    """os.environ, which the notebook kernels inherit, with `cleared` removed and `variables` set
    for the block."""
    saved = {k: os.environ.get(k) for k in (*cleared, *variables)}
    for key in cleared:
        os.environ.pop(key, None)
    os.environ.update(variables)
    try:
        yield
    finally:
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)


def code_environment(environ=os.environ) -> dict:
    """The variables that make a notebook kernel run this checkout's code: ROOT first on
    PYTHONPATH (ahead of the .pth that whichever checkout made the venv wrote into it) and ROOT's
    compile cache, unless `environ` names a cache."""
    others = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(ROOT)]
    return {
        "PYTHONPATH": os.pathsep.join([str(ROOT), *others]),
        CACHE_ENV: environ.get(CACHE_ENV) or str(ROOT / ".cache" / "inductor"),
    }


def kernel_environment(kernel_env: dict, variables: dict | None = None):
    """os.environ as each notebook kernel (or `bench`'s own process) starts with it, for the
    block: the plan's allocator (`kernel_env`, from kernel_allocator) instead of any set before,
    this checkout's code (code_environment), and `variables`."""
    return _environment(
        {**(variables or {}), **kernel_env, **code_environment()}, allocator.VARIABLES
    )


def kernel_allocator(plan: Plan) -> dict:
    """The variables that give the notebook kernels the plan's allocator (kernel_lib.allocator);
    ParameterError (exit 2, nothing run) when its library is not installed."""
    try:
        return allocator.environment(plan.allocator, base={})
    except allocator.Missing as err:
        raise ParameterError(f"{plan.source}: {err}") from None


def environment(plan: Plan) -> dict:
    """run.json's `environment`: the device facts and the notebook kernels' allocator."""
    return {**device_facts().as_dict(), "allocator": allocator.describe(plan.allocator)}


def run_plan(
    plan: Plan,
    out_dir: Path,
    *,
    kernel_name: str = KERNEL_NAME,
    progress: bool = True,
) -> list[NotebookResult]:
    """Run every notebook of `plan` into `out_dir` and build its report; failures don't stop the run.
    ParameterError (nothing run) when `out_dir` is not the runner's to replace or another run
    holds it; OSError (the previous report unchanged) when the disk fails."""
    kernel_env = kernel_allocator(plan)
    out_dir = Path(out_dir).resolve()
    with owned(out_dir):
        return _run(plan, out_dir, kernel_env, kernel_name=kernel_name, progress=progress)


def _run(
    plan: Plan,
    out_dir: Path,
    kernel_env: dict,
    *,
    kernel_name: str,
    progress: bool,
    run_suffix: str = "",
) -> list[NotebookResult]:
    """`run_plan` in a folder already held. `run_suffix` ends the run id (the runs of
    `run_repeated` say which they are)."""
    started = dt.datetime.now(dt.timezone.utc)
    git = _git_revision()
    run_id = f"{started:%Y%m%dT%H%M%SZ}-{os.getpid()}{run_suffix}"
    identity = {"run_id": run_id, "git": git, "started_utc": started.isoformat(timespec="seconds")}
    results = []
    with staged(out_dir) as (staging, previous):
        earlier = {r["notebook"]: r for r in previous.get("notebooks", [])}
        # read by save_records: results go into the report being staged (a notebook's own
        # `results_dir` parameter is for runs by hand: load_plan refuses it); each kernel
        # starts with the plan's allocator and this checkout's code
        variables = {
            RUN_ID_ENV: run_id,
            PLATFORM_ENV: plan.platform,
            RESULTS_DIR_ENV: str(staging),
        }
        with kernel_environment(kernel_env, variables):
            for index, name in enumerate(plan.notebooks, 1):
                print(f"[{index}/{len(plan.notebooks)}] {name}", file=sys.stderr, flush=True)
                output = staging / f"{name}.ipynb"
                aside = _set_aside(staging, name)
                sample = machine_sample()
                result = execute(
                    plan.notebooks_dir / f"{name}.ipynb",
                    output,
                    plan.parameters_for(name),
                    timeout=plan.cell_timeout_s,
                    kernel_name=kernel_name,
                    progress=progress,
                )
                machine = machine_load(sample, machine_sample())
                result = dataclasses.replace(result, **identity, machine=machine)
                if output.exists():
                    lead_with_findings(output, plan.platform)
                    try:
                        to_html(output)
                    except Exception as error:  # nbconvert's templates missing, say: keep the run
                        reason = f"no HTML ({type(error).__name__}: {str(error).splitlines()[0]})"
                        detail = "; ".join(filter(None, [result.detail, reason]))
                        result = dataclasses.replace(result, detail=detail)
                if _keep_or_replace(staging, name, aside, result) and name in earlier:
                    before = earlier[name]
                    result = dataclasses.replace(
                        result,
                        stale_results=(
                            f"showing the results of run {before.get('run_id', '?')} "
                            f"({before.get('started_utc', '?')}, git {before.get('git', '?')}); "
                            f"this run's notebook: {name}.failed.html"
                        ),
                    )
                print(
                    f"    {result.status}{': ' + result.detail if result.detail else ''}",
                    file=sys.stderr,
                    flush=True,
                )
                results.append(result)
        shutil.rmtree(staging / ".previous", ignore_errors=True)
        kept = [r for r in previous.get("notebooks", []) if r["notebook"] not in plan.notebooks]
        run = {
            "platform": plan.platform,
            "parameters": plan.source,
            "description": plan.description,
            "started_utc": started.isoformat(timespec="seconds"),
            "finished_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "run_id": run_id,
            "git": git,
            "command": " ".join(["python -m kernel_lib", *sys.argv[1:]]),
            "environment": environment(plan),
            "notebooks": kept + [asdict(r) for r in results],
        }
        (staging / RUN_FILE).write_text(json.dumps(run, indent=1) + "\n")
        build_report(staging)
    _rebuild_gallery(out_dir)
    return results


def run_repeated(
    plan: Plan,
    out_dir: Path,
    repeat: int,
    *,
    kernel_name: str = KERNEL_NAME,
    progress: bool = True,
) -> list[NotebookResult]:
    """`repeat` runs of the whole plan, one after another (each notebook in a fresh kernel every
    time), as full reports `out_dir/run-1/` ... `run-<repeat>/`; `out_dir` gets the aggregate
    (kernel_lib.report.aggregate: the median of the runs' medians and their spread). repeat == 1 is
    `run_plan` into `out_dir` itself. Staged and swapped in as a whole, like one run; refused
    and failing like `run_plan`."""
    kernel_env = kernel_allocator(plan)  # refused before anything runs
    out_dir = Path(out_dir).resolve()
    options = {"kernel_name": kernel_name, "progress": progress}
    with owned(out_dir):
        if repeat == 1:
            return _run(plan, out_dir, kernel_env, **options)
        started = dt.datetime.now(dt.timezone.utc)
        results = []
        with staged(out_dir, repeat) as (staging, _):
            for index in range(1, repeat + 1):
                print(f"run {index}/{repeat}", file=sys.stderr, flush=True)
                folder, suffix = staging / f"{RUN_PREFIX}{index}", f"-{RUN_PREFIX}{index}"
                results += _run(plan, folder, kernel_env, **options, run_suffix=suffix)
            for extra in run_folders(staging)[repeat:]:  # an earlier report had more runs
                shutil.rmtree(extra)
            write_aggregate_run(
                staging,
                {
                    "platform": plan.platform,
                    "parameters": plan.source,
                    "description": plan.description,
                    "started_utc": started.isoformat(timespec="seconds"),
                    "finished_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                    "run_id": f"{started:%Y%m%dT%H%M%SZ}-{os.getpid()}",
                    "git": _git_revision(),
                    "command": " ".join(["python -m kernel_lib", *sys.argv[1:]]),
                    "environment": environment(plan),
                    "repeat": repeat,
                },
            )
            build_report(staging)
    _rebuild_gallery(out_dir)
    return results


def _rebuild_gallery(out_dir: Path) -> None:
    """Refresh the gallery (`outputs/index.html`) when the report is one of the folders of an
    `outputs/` tree; a gallery that cannot be built never fails the run."""
    if out_dir.parent.name != "outputs":
        return
    try:
        build_gallery(out_dir.parent)
    except Exception as err:  # noqa: BLE001 - the run's own report is already in place
        print(f"gallery not rebuilt: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
