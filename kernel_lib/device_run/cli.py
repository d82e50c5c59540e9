"""`python -m kernel_lib device-run`, or `python -m kernel_lib.device_run` on a host without
papermill yet: a GPU report within one short command on a host whose image holds PyTorch and no
package index. It checks its input (checks.py), installs the carried wheels (once), runs the
preflight, then each notebook of the platform's quick plan within its share of the budget
(budget.py), refreshes the results store and the gallery once after the last (not after each), and
archives the report to copy back after every notebook and at the end, whatever ends it (an error,
Ctrl-C, SIGTERM), once a notebook of this run is in it (an earlier run's report at --out is not
sent back as this one's), with what a runner killed before its swap left; one line per step with
the time spent and the time left.

Exit codes: 0 every notebook ok or skipped; 1 a notebook failed, was stopped or not started, the
install failed, or (--dry-run) the wheels would not install on the host; 2 bad input (an option,
a -p, a damaged wheel: nothing run); 130 Ctrl-C or SIGTERM (the running step stopped, the report
archived).
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import os
import sys
import tarfile
import time
from pathlib import Path

from kernel_lib.device_run import wheels
from kernel_lib.device_run.budget import GRACE_S, Outcome, Progress, plan_lines, run_bounded, share
from kernel_lib.device_run.checks import (
    OUTPUTS,
    PARAMETERS,
    DeviceRunError,
    check_archive,
    check_out,
    check_params,
    params_by_notebook,
    plan_notebooks,
)
from kernel_lib.interrupts import terminate_as_interrupt
from kernel_lib.params import ParameterError  # papermill only when used
from kernel_lib.profiling.pending import notebook_params
from kernel_lib.results import outdir
from kernel_lib.results.folders import RUN_FILE

ROOT = wheels.ROOT
REHEARSALS = ROOT / ".cache" / "device-run"  # --dry-run's report folders, never outputs/
DEFAULT_BUDGET_S = 540.0  # one 9-minute command under a 10-minute limit
MAX_BUDGET_S = 4 * 3600.0  # a short window on a host; a longer stay is `make report` there
SETUP_S = 120.0  # at most, each: the pip install, the kernel registration, the platform detection
PREFLIGHT_S = 60.0
SETUP_ESTIMATE_S = 75.0  # --plan-only: detection, install, kernel and preflight, on a warm host
RESERVE_S = GRACE_S + 10.0  # kept back from the notebooks: stopping one, then the archive
MIN_NOTEBOOK_S = 30.0  # a notebook given less is not started
LOG_NAME = "device-run.log"  # this command's output, beside the report in the archive
ARCHIVE_MAX_BYTES = 16 * 2**20  # what a host copies back, per file
PLATFORM_LINE = "platform: "  # the detection child's answer, whatever else it prints
DETECT = (
    "from kernel_lib.platform import detect_platform; "
    f"print({PLATFORM_LINE!r} + detect_platform(), flush=True)"
)
DONE = ("ok", "skipped")  # the runner's statuses of a notebook that ran to its end
GALLERY = (  # run's last step, left to the end of the device run (outdir.GALLERY_LATER_ENV)
    "import sys; from kernel_lib.run.runner import rebuild_gallery; rebuild_gallery(sys.argv[1])"
)


def _run(progress: Progress, command: list, limit_s: float, env: dict, quiet=False) -> Outcome:
    """`command` within `limit_s` and the budget; a quiet one's output shows only if it fails."""
    limit = min(limit_s, progress.left() - RESERVE_S)
    echo = (lambda line: None) if quiet else progress.child
    outcome = run_bounded(command, limit, echo=echo, env=env, cwd=ROOT)
    if quiet and (outcome.returncode or outcome.stopped):
        for line in outcome.lines[-10:]:
            progress.child(line)
    return outcome


def _failed(outcome: Outcome) -> str:
    return f"stopped after {outcome.seconds:.0f} s" if outcome.stopped else ""


def install(progress: Progress, source: Path, target: Path, *, dry_run: bool, env: dict) -> bool:
    """The pinned wheels from `source` into `target` (skipped when its stamp says they are
    there); dry_run: check that they would install on the host, offline. True when they do."""
    python = sys.executable
    if not dry_run and wheels.installed(source, target, python):
        progress.step(f"install: already in {_display(target)} (stamp {wheels.STAMP})")
        return True
    target.mkdir(parents=True, exist_ok=True)
    command = wheels.install_command(source, target, python=python, dry_run=dry_run)
    outcome = _run(progress, command, SETUP_S, env, quiet=True)
    problems = [_failed(outcome) or f"pip exit {outcome.returncode}"] if outcome.returncode else []
    if dry_run:
        problems += wheels.check_wheels(source)
    for problem in problems:
        progress.child(problem)
    what = f"{len(wheels.pins())} pinned wheels from {_display(source)}"
    if dry_run:
        verdict = "install offline on Python 3.12 manylinux x86_64" if not problems else "FAIL"
        progress.step(f"install (dry run, nothing installed): {what}: {verdict}")
    else:
        progress.step(f"install: {what} into {_display(target)}: {'failed' if problems else 'ok'}")
        if not problems:
            (target / wheels.STAMP).write_text(wheels.stamp_text(source, python))
    return not problems


def quick_platform(progress: Progress, env: dict) -> str:
    """The platform this device matches (a subprocess: this process never opens the GPU), its
    `-quick` plan where there is one. Its answer is the line that says so: a warning after it,
    on stdout or stderr, changes nothing."""
    outcome = _run(progress, [sys.executable, "-c", DETECT], SETUP_S, env, quiet=True)
    said = [line for line in outcome.lines if line.startswith(PLATFORM_LINE)]
    if outcome.returncode or not said:
        raise DeviceRunError(f"no platform detected ({(outcome.lines or ['no output'])[-1]})")
    detected = said[-1][len(PLATFORM_LINE) :].strip()
    quick = f"{detected}-quick"
    platform = quick if (PARAMETERS / f"{quick}.yaml").exists() else detected
    progress.step(f"platform: {detected} -> parameters/{platform}.yaml")
    return platform


def _entry(out: Path, notebook: str) -> dict:
    """`notebook`'s line in the report's run.json ({} where there is none)."""
    try:
        run = json.loads((out / RUN_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return next((n for n in run.get("notebooks", []) if n.get("notebook") == notebook), {})


def _status(notebook: str, outcome: Outcome, limit_s: float, out: Path, before) -> str:
    """The runner's closing line for `notebook` ('ok', 'failed: cell 14: ...'), or why none;
    `before`: the report's run.json before it ran (`made`), to tell its own line in it."""
    if outcome.stopped:
        entry = _entry(out, notebook) if made(out) != before else {}
        if entry.get("status") == "stopped":
            return f"stopped at its share of {limit_s:.0f} s: {entry.get('detail', '')}"
        if entry:  # it had ended, and the stop came as its report was swapped in
            return f"{entry.get('status')}: its report was written as its {limit_s:.0f} s ran out"
        return (
            f"stopped at its share of {limit_s:.0f} s, no report written (a staging folder "
            "it left is kept and archived beside the report)"
        )
    said = [line.strip() for line in outcome.lines if line.strip().startswith(f"{notebook}: ")]
    return said[-1].split(": ", 1)[1] if said else f"exit {outcome.returncode}"


def run_notebooks(
    progress: Progress,
    platform: str,
    notebooks: list[str],
    out: Path,
    params: list,
    env: dict,
    after=lambda: None,
) -> dict[str, str]:
    """Each notebook as its own `kernel_lib run --only` into `out` (each run keeps the others'
    results), within its share of the time left, `after()` each; notebook -> status."""
    statuses, params = {}, params_by_notebook(notebooks, params)
    for index, notebook in enumerate(notebooks):
        limit = share(notebook, notebooks[index:], progress.left() - RESERVE_S)
        if limit < MIN_NOTEBOOK_S:
            statuses[notebook] = f"not started: {limit:.0f} s of the budget would be its share"
            progress.step(f"{notebook}: {statuses[notebook]}")
            continue
        progress.step(f"{notebook}: running, at most {limit:.0f} s")
        command = [
            *(sys.executable, "-m", "kernel_lib", "run", "--platform", platform),
            *("--only", notebook, "--out", str(out), "--no-progress"),
            *(f"--param={p}" for p in params[notebook]),
        ]
        before = made(out)
        outcome = _run(progress, command, limit, env)
        statuses[notebook] = _status(notebook, outcome, limit, out, before)
        progress.step(f"{notebook}: {statuses[notebook]} ({outcome.seconds:.0f} s)")
        if outcome.returncode == 2 and not outcome.stopped:  # bad input: every run would refuse
            raise DeviceRunError(f"{notebook}: the runner refused the plan (its message is above)")
        after()
    return statuses


def gallery(progress: Progress, out: Path, env: dict) -> None:
    """The report added to the results store and the gallery refreshed, once, after the last
    notebook (`run` does it after each run: here every notebook is one), if there is time."""
    if made(out) is None:
        return
    limit = progress.left() - RESERVE_S
    if limit < MIN_NOTEBOOK_S:
        progress.step(f"gallery: not rebuilt, {max(limit, 0):.0f} s left for it")
        return
    outcome = _run(progress, [sys.executable, "-c", GALLERY, str(out)], limit, env, quiet=True)
    said = _failed(outcome) or (f"exit {outcome.returncode}" if outcome.returncode else "ok")
    progress.step(f"gallery: the results store and the gallery of {_display(out.parent)}: {said}")


def write_archive(folders: list[Path], path: Path, log: list[str]) -> Path:
    """Each of `folders` as `<name>/...` in the tar.gz `path`, with `log` as the first one's
    `<name>/device-run.log`; written whole or not at all (a partial file renamed over it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial-{os.getpid()}")
    data = ("\n".join(log) + "\n").encode()
    member = f"{folders[0].name}/{LOG_NAME}"
    try:
        with tarfile.open(partial, "w:gz", compresslevel=6) as tar:
            for folder in folders:
                tar.add(folder, folder.name, filter=lambda m: None if m.name == member else m)
            info = tarfile.TarInfo(member)
            info.size, info.mtime = len(data), int(time.time())
            tar.addfile(info, io.BytesIO(data))
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)
    return path


def made(report: Path) -> tuple | None:
    """Which run.json `report` holds (None: none): each run the runner swaps in has its own."""
    try:
        stat = (report / RUN_FILE).stat()
    except OSError:
        return None
    return stat.st_ino, stat.st_mtime_ns, stat.st_size


def keep_killed(progress: Progress, report: Path) -> None:
    """The staging folders of `report` that runners killed before their swap left (what their
    notebooks measured) kept beside it, for the archive: the next runner would remove them."""
    if not report.parent.is_dir():
        return
    try:
        with outdir.locked(report):
            kept = outdir.clean_after_killed_runs(report, keep_unfinished=True)
    except (ParameterError, OSError) as err:
        progress.step(f"what a killed runner left is not kept: {err}")
        return
    for folder in kept:
        progress.step(f"kept: {_display(folder)}, left by a runner killed before its swap")
    progress.kept += kept


def archive(progress: Progress, report: Path, path: Path, before: tuple | None) -> None:
    """The archive of `report` so far, once a notebook of this run is in it (its run.json is not
    the one `before` it, `made`: an earlier run's report is not this run's to send back), with
    the folders `keep_killed` kept; one line when there is nothing to send back; a failure to
    write it is a line, and the plan goes on."""
    keep_killed(progress, report)
    folders = ([report] if made(report) not in (None, before) else []) + progress.kept
    if not folders:
        progress.step(f"archive: none, no notebook of this run is in {_display(report)} yet")
        return
    progress.step(f"archive: {_display(path.resolve())}")
    try:
        size = write_archive(folders, path, progress.log).stat().st_size
    except OSError as err:
        progress.child(f"not written: {err.strerror or err}")
        return
    if size > ARCHIVE_MAX_BYTES:
        progress.child(f"{size / 2**20:.1f} MiB: more than a host may copy back (16 MiB)")


def _display(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def cmd_device_run(args) -> int:
    try:
        with terminate_as_interrupt():
            return _device_plan(args)
    except ParameterError as err:  # a DeviceRunError, or a platform that is not a parameter file
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:  # the step running was stopped (budget.run_bounded)
        print(f"interrupted{f' ({err})' if str(err) else ''}", file=sys.stderr)
        return 130


def plan_shares(progress: Progress, notebooks: list[str]) -> None:
    """--plan-only: each notebook's share when the setup takes SETUP_ESTIMATE_S, and its sections
    (budget.plan_lines), then what follows the last."""
    left = progress.budget_s - SETUP_ESTIMATE_S - RESERVE_S
    progress.step(
        f"plan: {progress.budget_s:.0f} s budget - ~{SETUP_ESTIMATE_S:.0f} s setup - "
        f"{RESERVE_S:.0f} s reserve = {left:.0f} s for {len(notebooks)} notebooks, one after "
        "another, no gallery or results-store rebuild between them"
    )
    for line in plan_lines(notebooks, left, MIN_NOTEBOOK_S):
        progress.child(line)
    progress.child(
        f"then: the results store and the gallery, once (if {MIN_NOTEBOOK_S:.0f} s are left), "
        "and the archive"
    )


def check_wheel_files(source: Path) -> None:
    """DeviceRunError (one line naming it) for a file in `source` that is no wheel (damaged,
    cut short, without its METADATA); `make device-wheels` downloads them again."""
    found = sorted(source.glob("*.whl"))
    if not found:
        raise DeviceRunError(f"--wheels {_display(source)}: no wheels there (make device-wheels)")
    for wheel in found:
        try:
            wheels.wheel_metadata(wheel)
        except ValueError as err:
            raise DeviceRunError(f"--wheels: {err} (make device-wheels)") from None


def _device_plan(args) -> int:
    if not 0 < args.budget_s <= MAX_BUDGET_S:
        raise DeviceRunError(
            f"--budget-s {args.budget_s:g} must be > 0 and at most {MAX_BUDGET_S:.0f} (4 h)"
        )
    params = notebook_params(args.param)  # -p profile=MODE: the runs' $KERNEL_WORKBOOK_PROFILE
    source = Path(args.wheels).resolve() if args.wheels else ROOT / ".whl" / "device"
    target = Path(args.target).resolve() if args.target else ROOT / ".cache" / "device-site"
    check_wheel_files(source)
    out = check_out(Path(args.out).resolve()) if args.out else None
    path = check_archive(Path(args.archive).resolve()) if args.archive else None
    if args.platform:  # a bad name, --only or -p before anything runs
        check_params(args.platform, plan_notebooks(args.platform, args.only), params)
    progress = Progress(args.budget_s)
    env = {
        **os.environ,
        **wheels.environment(target, os.environ, on_path=not args.dry_run),
        "PYTHONUNBUFFERED": "1",  # children's lines as they come
        outdir.GALLERY_LATER_ENV: "1",  # once, at the end (`gallery`), not after each notebook
        "TORCHINDUCTOR_CACHE_DIR": os.environ.get(
            "TORCHINDUCTOR_CACHE_DIR", str(ROOT / ".cache" / "inductor")
        ),
    }
    platform = args.platform or quick_platform(progress, env)  # needs torch only, no wheel
    notebooks = plan_notebooks(platform, args.only)
    if not args.platform:
        check_params(platform, notebooks, params)
    if args.plan_only:
        plan_shares(progress, notebooks)
        return 0
    out = out or check_out((REHEARSALS if args.dry_run else OUTPUTS) / platform)
    default = Path(os.environ.get("OUT") or out.parent) / f"{out.name}.tar.gz"
    path = path or check_archive(default.resolve())
    before = made(out)
    plan = (platform, notebooks, params, out, path, before)
    try:
        return _steps(args, progress, source, target, env, plan)
    finally:  # whatever ended it: what the notebooks finished goes back
        archive(progress, out, path, before)


def _steps(args, progress, source, target, env, plan) -> int:
    """Install, kernel, preflight and the notebooks (archived after each), checked already."""
    platform, notebooks, params, out, path, before = plan
    wheels_ok = install(progress, source, target, dry_run=args.dry_run, env=env)
    if not wheels_ok and not args.dry_run:
        return 1
    kernel_command = wheels.kernel_command(target, sys.executable)
    kernel = _run(progress, kernel_command, SETUP_S, env, quiet=True)
    progress.step(
        f"kernel: {wheels.KERNEL_NAME} in {_display(target)}/share/jupyter/kernels: "
        + ("ok" if not kernel.returncode else _failed(kernel) or f"exit {kernel.returncode}")
    )
    preflight = _run(
        progress, [sys.executable, "-m", f"{__package__}.preflight"], PREFLIGHT_S, env
    )
    failed = sum(line.split()[1:2] == ["error:"] for line in preflight.lines)  # `item error: ...`
    crashed = f"exit {preflight.returncode}" if preflight.returncode and not failed else ""
    progress.step(f"preflight: {_failed(preflight) or crashed or f'{failed} items failed'}")
    after = functools.partial(archive, progress, out, path, before)
    statuses = run_notebooks(progress, platform, notebooks, out, params, env, after)
    gallery(progress, out, env)
    done = sum(status.split(":")[0] in DONE for status in statuses.values())
    progress.step(
        f"done: {done} of {len(statuses)} notebooks ran to their end, report {_display(out)}"
    )
    return 0 if wheels_ok and done == len(statuses) else 1


def arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument(
        "--platform",
        help="parameters/<platform>.yaml (default: the detected one's <platform>-quick.yaml)",
    )
    parser.add_argument(
        "--wheels", help="the folder `make device-wheels` fills (default: .whl/device/)"
    )
    parser.add_argument(
        "--target",
        help="where they install (pip --target) and the kernel is registered "
        "(default: .cache/device-site/)",
    )
    parser.add_argument("--only", help="comma-separated notebook names (default: the plan's)")
    parser.add_argument(
        "--out",
        help="report folder (default: outputs/<platform>; --dry-run: .cache/device-run/<platform>)",
    )
    parser.add_argument(
        "--archive",
        help="the tar.gz to write (default: $OUT/<name>.tar.gz, else beside the report)",
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=DEFAULT_BUDGET_S,
        help="seconds for everything, install to archive (default: %(default)s; at most "
        f"{MAX_BUDGET_S:.0f})",
    )
    parser.add_argument(
        "-p",
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a parameter in the notebooks that declare it (as `run -p`); repeatable",
    )
    parser.add_argument(
        "--plan-only",
        action="store_true",
        help="check the input, print the plan's notebooks and their shares of the budget, "
        "run nothing",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="install nothing: check that the wheels resolve offline for the host's Python 3.12 "
        "(pip --dry-run), then run the rest here, into .cache/device-run/",
    )
    return parser


def add_parser(subparsers) -> None:
    """`device-run` on `python -m kernel_lib`'s subcommands."""
    parser = subparsers.add_parser(
        "device-run",
        help="a GPU host without a package index: wheels, preflight, time-boxed quick plan, archive",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    arguments(parser).set_defaults(func=cmd_device_run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kernel_lib.device_run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return cmd_device_run(arguments(parser).parse_args(argv))
