"""A platform's plan run into its report folder, one notebook after another (--repeat N: N full
runs and their aggregate).

The report folder is held and staged by results.outdir: the runner replaces only what it made,
one run at a time per folder, and an interrupted or failed run leaves the previous report untouched.
A notebook that fails keeps the earlier run's results in the report, marked stale. Runs are never
lost (`refuse_loss`): a run onto a repeated report keeps its runs or is refused naming `--repeat`,
and a run onto another platform's or device's report is refused unless told `replace` (which
replaces the whole report: none of its notebooks are carried into the new one).
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

from kernel_lib import OUTPUTS
from kernel_lib.interrupts import Stops, held
from kernel_lib.params import ROOT, ParameterError, Plan
from kernel_lib.platform import device_facts
from kernel_lib.records import PLATFORM_ENV, RESULTS_DIR_ENV, RESULTS_SUFFIX, RUN_ID_ENV
from kernel_lib.report.aggregate import write_aggregate_run
from kernel_lib.report.gallery import build_gallery
from kernel_lib.report.pages import build_report
from kernel_lib.report.read import REFERENCE_FOLDER, REFERENCE_PLATFORM, Report, read_report
from kernel_lib.results.files import Read, read_run
from kernel_lib.results.folders import RUN_FILE, RUN_PREFIX, repeat_of, run_folders
from kernel_lib.results.outdir import GALLERY_LATER_ENV, owned, staged
from kernel_lib.results.store import remember
from kernel_lib.run.environment import environment, kernel_allocator, kernel_environment
from kernel_lib.run.execute import (
    FAILED_STATUSES,
    KERNEL_NAME,
    STOPPED,
    NotebookResult,
    execute,
    stopped_after,
)
from kernel_lib.run.machine import machine_load, machine_sample
from kernel_lib.run.render import lead_with_findings, to_html


def git_revision() -> str:
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
    """New results replace the old only when the notebook succeeded. On failure (or a stop) with
    earlier results present, the failed run is kept as `<name>.failed.ipynb/.html` and the earlier
    results come back (the report marks them stale); without any, a `stopped` notebook's records
    (the sections it finished) are the report's. Returns True when the earlier came back."""
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


REFERENCE = OUTPUTS / REFERENCE_FOLDER  # the nbval reference set: `make reference` alone


def refuse_reference(out_dir: Path, platform: str, params: list, reference: bool) -> None:
    """ParameterError unless outputs/reference is written by `make reference` (`reference`:
    `run --nbval-reference`) alone, and that only with the ci file's values into it."""
    if not reference:
        if Path(out_dir).resolve() == REFERENCE:
            raise ParameterError(
                f"--out {out_dir} is the nbval reference set: only `make reference` writes it"
            )
        return
    if Path(out_dir).resolve() != REFERENCE or platform != REFERENCE_PLATFORM or params:
        raise ParameterError(
            f"--nbval-reference (make reference) runs --platform {REFERENCE_PLATFORM} into "
            f"--out {REFERENCE.parent.name}/{REFERENCE.name} with the file's values, no -p"
        )


def say_other_code(report: Path) -> None:
    """After a failed `check`: one line when the report was made by another revision of the code
    (its run.json's git), so that a difference may be the code's and not this machine's."""
    try:
        made = str(json.loads((report / RUN_FILE).read_text()).get("git", "unknown"))
    except (OSError, ValueError, AttributeError):
        made = "unknown (no readable run.json)"
    now = git_revision()
    if made != now or made.endswith("-dirty"):
        print(
            f"note: {report} was made by git {made}, this checkout is {now}: the differences "
            "above may come from the code, not this machine (`make reference` or `run` remakes it)",
            file=sys.stderr,
        )


def in_git(folder: Path) -> bool:
    """Every file of `folder` is committed and unchanged (git can bring it back as it is): a
    committed report that a fresh clone's `make report` replaces loses nothing."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args, "--", "."], cwd=folder, capture_output=True, text=True, check=True
        ).stdout

    try:
        return bool(git("ls-files")) and not git("status", "--porcelain", "--ignored")
    except (OSError, subprocess.CalledProcessError):
        return False


def refuse_loss(plan: Plan, out_dir: Path, repeat: int, replace: bool) -> None:
    """ParameterError (nothing run) when a run of `plan`, `repeat` times, into the report in
    `out_dir` would lose runs without `replace`: the report of another platform or device (its
    notebooks may not be redone here), runs beyond `repeat`, or one run that `--repeat` N > 1
    would replace. A report git holds unchanged (`in_git`) can always be brought back."""
    if replace or not (out_dir / RUN_FILE).exists() or in_git(out_dir):
        return
    previous = read_run(out_dir / RUN_FILE)
    there = (previous.get("platform"), (previous.get("environment") or {}).get("name"))
    here = (plan.platform, device_facts().name)
    if there != here:
        raise ParameterError(
            f"--out {out_dir} is the report of {there[0]} on {there[1]}, this run is {here[0]} "
            f"on {here[1]}: --replace replaces it, or choose another --out"
        )
    runs = repeat_of(out_dir)
    if runs > repeat:
        raise ParameterError(
            f"--out {out_dir} holds {runs} runs (run-1/ ... run-{runs}/): --repeat {runs} runs them "
            f"again, --replace replaces them with {repeat}"
        )
    if runs == 1 and repeat > 1:
        raise ParameterError(
            f"--out {out_dir} holds one run: --repeat {repeat} would replace it with {repeat} "
            "runs: --replace does so, or choose another --out"
        )


def run_plan(
    plan: Plan,
    out_dir: Path,
    *,
    kernel_name: str = KERNEL_NAME,
    progress: bool = True,
    replace: bool = False,
) -> list[NotebookResult]:
    """Run every notebook of `plan` into `out_dir` and build its report; failures don't stop the run.
    ParameterError (nothing run) when `out_dir` is not the runner's to replace, another run
    holds it or the run would lose runs (`refuse_loss`); OSError (the previous report unchanged)
    when the disk fails."""
    return run_repeated(
        plan, out_dir, 1, kernel_name=kernel_name, progress=progress, replace=replace
    )


def _with_html(result: NotebookResult, output: Path) -> NotebookResult:
    """`result` once its notebook's HTML is written; an export that fails is said in its detail."""
    try:
        to_html(output)
    except Exception as error:  # nbconvert's templates missing, say: keep the run
        reason = f"no HTML ({type(error).__name__}: {str(error).splitlines()[0]})"
        return dataclasses.replace(result, detail="; ".join(filter(None, [result.detail, reason])))
    return result


def _notebook(plan: Plan, name: str, staging: Path, stops: Stops, **options) -> tuple:
    """Notebook `name` run into `staging` (`execute`, its kernel's stops raised, held elsewhere)
    and made readable: (its result, its results file as its findings cell read it, or None). A stop
    once its kernel has ended skips what is left of that (the findings, the HTML) and keeps it
    as `stopped` with its records."""
    output = staging / f"{name}.ipynb"
    sample = machine_sample()
    result = execute(
        plan.notebooks_dir / f"{name}.ipynb",
        output,
        plan.parameters_for(name),
        timeout=plan.cell_timeout_s,
        raising=stops.raising,
        **options,
    )
    result = dataclasses.replace(result, machine=machine_load(sample, machine_sample()))
    records = None
    if output.exists() and not stops.noted:
        records = lead_with_findings(output, plan.platform)
    # asked again: a stop may have come while the findings were written
    if output.exists() and not stops.noted:
        result = _with_html(result, output)
    if stops.noted and result.status != STOPPED:
        result = stopped_after(result, output)
    return result, records


def _stale(result: NotebookResult, before: dict) -> NotebookResult:
    """`result` of a notebook whose earlier results (run.json's line `before`) came back."""
    return dataclasses.replace(
        result,
        stale_results=(
            f"showing the results of run {before.get('run_id', '?')} "
            f"({before.get('started_utc', '?')}, git {before.get('git', '?')}); "
            f"this run's notebook: {result.notebook}.failed.html"
        ),
    )


def _run(
    plan: Plan,
    out_dir: Path,
    kernel_env: dict,
    *,
    kernel_name: str,
    progress: bool,
    run_suffix: str = "",
    replace: bool = False,
    read: Read | None = None,
) -> list[NotebookResult]:
    """`run_plan` in a folder already held. `run_suffix` ends the run id (the runs of
    `run_repeated` say which they are); `replace`: nothing of the report there is carried;
    `read` (the runs of `run_repeated`) gets the results files the run read, by name.
    A Ctrl-C or SIGTERM is held (`interrupts.held`) from the staging to the swap, except while a
    notebook's kernel runs (where it stops the kernel): once a notebook has run, the report
    keeps it (`stopped` if the stop came before its report was written), the notebooks after it
    are not started, the report is swapped in, then KeyboardInterrupt."""
    started = dt.datetime.now(dt.timezone.utc)
    git = git_revision()
    run_id = f"{started:%Y%m%dT%H%M%SZ}-{os.getpid()}{run_suffix}"
    identity = {"run_id": run_id, "git": git, "started_utc": started.isoformat(timespec="seconds")}
    options = {"kernel_name": kernel_name, "progress": progress}
    results = []
    with held() as stops, staged(out_dir, fresh=replace) as (staging, previous):
        earlier = {r["notebook"]: r for r in previous.get("notebooks", [])}
        # read by save_records: results go into the report being staged (a notebook's own
        # `results_dir` parameter is for runs by hand: load_plan refuses it); each kernel
        # starts with the plan's allocator and this checkout's code
        variables = {
            RUN_ID_ENV: run_id,
            PLATFORM_ENV: plan.platform,
            RESULTS_DIR_ENV: str(staging),
        }
        read = {} if read is None else read  # as the findings cells read them: for the report
        with kernel_environment(kernel_env, variables):
            for index, name in enumerate(plan.notebooks, 1):
                if stops.noted and not results:  # nothing of this run to keep: staging goes
                    raise KeyboardInterrupt
                if stops.noted:  # the notebooks after a stop are not started
                    break
                print(f"[{index}/{len(plan.notebooks)}] {name}", file=sys.stderr, flush=True)
                aside = _set_aside(staging, name)
                result, records = _notebook(plan, name, staging, stops, **options)
                result = dataclasses.replace(result, **identity)
                came_back = _keep_or_replace(staging, name, aside, result)
                if records is not None and not came_back:  # else the earlier records are shown
                    read[f"{name}{RESULTS_SUFFIX}"] = records
                if came_back and name in earlier:
                    result = _stale(result, earlier[name])
                print(
                    f"    {result.status}{': ' + result.detail if result.detail else ''}",
                    file=sys.stderr,
                    flush=True,
                )
                results.append(result)
                if result.status == STOPPED:  # Ctrl-C: the report keeps what it finished
                    break
        shutil.rmtree(staging / ".previous", ignore_errors=True)
        ran = {r.notebook for r in results}
        kept = [r for r in previous.get("notebooks", []) if r["notebook"] not in ran]
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
            "budget_s": plan.budget_s,
            "notebooks": kept + [asdict(r) for r in results],
        }
        (staging / RUN_FILE).write_text(json.dumps(run, indent=1) + "\n")
        report = read_report(staging, read)  # once: its pages, then the gallery
        build_report(staging, report)
    if not run_suffix and not os.environ.get(GALLERY_LATER_ENV):  # a run of run_repeated is
        _rebuild_gallery(out_dir, report, read)  # staged: the repeated report is added whole
    if results and results[-1].status == STOPPED:
        raise KeyboardInterrupt(
            f"{results[-1].notebook} stopped; {out_dir} keeps the sections it finished"
        )
    if stops.noted:
        raise KeyboardInterrupt(f"{out_dir} holds the new report whole")
    return results


def run_repeated(
    plan: Plan,
    out_dir: Path,
    repeat: int,
    *,
    kernel_name: str = KERNEL_NAME,
    progress: bool = True,
    replace: bool = False,
) -> list[NotebookResult]:
    """`repeat` runs of the whole plan, one after another (each notebook in a fresh kernel every
    time), as full reports `out_dir/run-1/` ... `run-<repeat>/`; `out_dir` gets the aggregate
    (kernel_lib.report.aggregate: the median of the runs' medians and their spread). repeat == 1 is
    `run_plan` into `out_dir` itself. Staged and swapped in as a whole, like one run; refused
    (`refuse_loss`) and failing like `run_plan`. `replace`: the report there is replaced whole,
    none of its notebooks' files carried into the new one."""
    kernel_env = kernel_allocator(plan)  # refused before anything runs
    out_dir = Path(out_dir).resolve()
    options = {"kernel_name": kernel_name, "progress": progress}
    with owned(out_dir):
        refuse_loss(plan, out_dir, repeat, replace)
        if repeat == 1:
            return _run(plan, out_dir, kernel_env, **options, replace=replace)
        started = dt.datetime.now(dt.timezone.utc)
        results, read = [], {}
        with staged(out_dir, repeat, fresh=replace) as (staging, _):
            for index in range(1, repeat + 1):
                print(f"run {index}/{repeat}", file=sys.stderr, flush=True)
                folder, suffix = staging / f"{RUN_PREFIX}{index}", f"-{RUN_PREFIX}{index}"
                ran: Read = {}
                results += _run(plan, folder, kernel_env, **options, run_suffix=suffix, read=ran)
                read |= {f"{folder.name}/{name}": r for name, r in ran.items()}
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
                    "git": git_revision(),
                    "command": " ".join(["python -m kernel_lib", *sys.argv[1:]]),
                    "environment": environment(plan),
                    "budget_s": plan.budget_s,
                    "repeat": repeat,
                },
            )
            report = read_report(staging, read)
            build_report(staging, report)
    _rebuild_gallery(out_dir, report, read)
    return results


def _rebuild_gallery(out_dir: Path, report: Report, read: Read | None = None) -> None:
    """Add the report's runs to the results store (kernel_lib.results.store.remember, which never
    fails the run), its results files as `read`; refresh the gallery (`outputs/index.html`) when
    the report is one of the folders of an `outputs/` tree, with `report` as read in staging
    (swapped in since: the same files) and the runs just stored as they were added; a gallery
    that cannot be built never fails the run."""
    stored = remember(out_dir, read=read)
    if out_dir.parent.name != "outputs":
        return
    try:
        build_gallery(out_dir.parent, [report._replace(folder=out_dir)], stored=stored)
    except Exception as err:  # noqa: BLE001 - the run's own report is already in place
        print(f"gallery not rebuilt: {type(err).__name__}: {err}", file=sys.stderr, flush=True)


def rebuild_gallery(out_dir: str | Path) -> None:
    """A run's last step, for a report whose runs left it to their caller (GALLERY_LATER_ENV:
    the device run, once after its last notebook): the results store and the gallery."""
    out_dir = Path(out_dir).resolve()
    _rebuild_gallery(out_dir, read_report(out_dir))
