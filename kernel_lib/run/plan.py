"""A platform's plan run into its report folder, one notebook after another (--repeat N: N full
runs and their aggregate).

The report folder is held and staged by kernel_lib.outdir: the runner replaces only what it made,
one run at a time per folder, and an interrupted or failed run leaves the previous report untouched.
A notebook that fails keeps the earlier run's results in the report, marked stale.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from kernel_lib.outdir import RUN_FILE, owned, staged
from kernel_lib.params import ROOT, Plan
from kernel_lib.records import PLATFORM_ENV, RESULTS_DIR_ENV, RESULTS_SUFFIX, RUN_ID_ENV
from kernel_lib.report.aggregate import RUN_PREFIX, run_folders, write_aggregate_run
from kernel_lib.report.gallery import build_gallery
from kernel_lib.report.pages import build_report
from kernel_lib.run.environment import environment, kernel_allocator, kernel_environment
from kernel_lib.run.execute import FAILED_STATUSES, KERNEL_NAME, NotebookResult, execute
from kernel_lib.run.machine import machine_load, machine_sample
from kernel_lib.run.render import lead_with_findings, to_html


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
