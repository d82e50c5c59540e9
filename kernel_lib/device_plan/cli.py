"""`python -m kernel_lib device-plan`, or `python -m kernel_lib.device_plan` on a host without
papermill yet: a GPU report within one short command on a host whose image holds PyTorch and no
package index. It installs the carried wheels (once), runs the preflight, then each notebook of
the platform's quick plan within its share of the budget (budget.py), and archives the report to
copy back; one line per step with the time spent and the time left.

Exit codes: 0 every notebook ok or skipped; 1 a notebook failed, was stopped or not started, the
install failed, or (--dry-run) the wheels would not install on the host; 2 bad input; 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
import tarfile
import time
from pathlib import Path

import yaml

from kernel_lib.device_plan import wheels
from kernel_lib.device_plan.budget import GRACE_S, Outcome, run_bounded, share
from kernel_lib.params import ParameterError, check_platform  # papermill only when used

ROOT = wheels.ROOT
PARAMETERS = ROOT / "parameters"
NOTEBOOKS = ROOT / "notebooks"
OUTPUTS = ROOT / "outputs"
REHEARSALS = ROOT / ".cache" / "device-plan"  # --dry-run's report folders, never outputs/
DEFAULT_BUDGET_S = 540.0  # one 9-minute command under a 10-minute limit
SETUP_S = 120.0  # at most, each: the pip install, the kernel registration, the platform detection
PREFLIGHT_S = 60.0
RESERVE_S = GRACE_S + 10.0  # kept back from the notebooks: stopping one, then the archive
MIN_NOTEBOOK_S = 30.0  # a notebook given less is not started
LOG_NAME = "device-plan.log"  # this command's output, beside the report in the archive
DETECT = "from kernel_lib.platform import detect_platform; print(detect_platform())"
DONE = ("ok", "skipped")  # the runner's statuses of a notebook that ran to its end


class PlanError(ParameterError):
    """Bad input: one line, exit 2, nothing run."""


class Progress:
    """The budget's clock, and every line this command prints (for the archive's log)."""

    def __init__(self, budget_s: float):
        self.budget_s, self.started, self.log = budget_s, time.monotonic(), []

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)

    def echo(self, text: str) -> None:
        print(text, flush=True)
        self.log.append(text)

    def step(self, text: str) -> None:
        elapsed = time.monotonic() - self.started
        self.echo(f"[{elapsed:4.0f} s | {self.left():4.0f} s left] {text}")

    def child(self, line: str) -> None:
        self.echo(f"    {line}")


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
    `-quick` plan where there is one."""
    outcome = _run(progress, [sys.executable, "-c", DETECT], SETUP_S, env, quiet=True)
    if outcome.returncode or not outcome.lines:
        raise PlanError(f"no platform detected ({(outcome.lines or ['no output'])[-1]})")
    detected = outcome.lines[-1].strip()
    quick = f"{detected}-quick"
    platform = quick if (PARAMETERS / f"{quick}.yaml").exists() else detected
    progress.step(f"platform: {detected} -> parameters/{platform}.yaml")
    return platform


def plan_notebooks(platform: str, only: str | None) -> list[str]:
    """The notebooks of parameters/<platform>.yaml in its order (the runner checks the rest of
    the file), or the `only` ones among them."""
    path = PARAMETERS / f"{check_platform(platform)}.yaml"
    settings = (yaml.safe_load(path.read_text()) or {}).get("workbook") or {}
    notebooks = settings.get("notebooks")
    if not isinstance(notebooks, list) or not notebooks:
        raise PlanError(f"parameters/{platform}.yaml: needs `workbook: {{notebooks: [...]}}`")
    if only is None:
        return notebooks
    chosen = [n.strip() for n in only.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in notebooks]
    if unknown or not chosen:
        raise PlanError(f"--only {only!r}: choose from {platform}'s notebooks {notebooks}")
    return [n for n in notebooks if n in chosen]


def declared(notebook: str) -> set[str]:
    """The names the notebook's `parameters` cell sets (read here: papermill, whose reader the
    runner uses, may not be installed yet)."""
    cells = json.loads((NOTEBOOKS / f"{notebook}.ipynb").read_text())["cells"]
    tagged = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    source = "".join(line for cell in tagged for line in cell["source"])
    return set(re.findall(r"^(\w+)\s*[:=]", source, re.MULTILINE))


def params_by_notebook(notebooks: list[str], params: list[str]) -> dict[str, list[str]]:
    """notebook -> the `-p NAME=VALUE` it declares (each notebook runs alone, and the runner
    refuses a name its notebooks lack); PlanError for a name none of them declares."""
    names = {notebook: declared(notebook) for notebook in notebooks}
    for param in params:
        name = param.partition("=")[0].strip()
        if not any(name in known for known in names.values()):
            raise PlanError(f"-p {param!r}: not a parameter of {', '.join(notebooks)}")
    return {
        notebook: [p for p in params if p.partition("=")[0].strip() in names[notebook]]
        for notebook in notebooks
    }


def _status(notebook: str, outcome: Outcome, limit_s: float) -> str:
    """The runner's closing line for `notebook` ('ok', 'failed: cell 14: ...'), or why none."""
    if outcome.stopped:
        return f"stopped at its share of {limit_s:.0f} s (its records are lost, not the others')"
    said = [line.strip() for line in outcome.lines if line.strip().startswith(f"{notebook}: ")]
    return said[-1].split(": ", 1)[1] if said else f"exit {outcome.returncode}"


def run_notebooks(
    progress: Progress, platform: str, notebooks: list[str], out: Path, params: list, env: dict
) -> dict[str, str]:
    """Each notebook as its own `kernel_lib run --only` into `out` (each run keeps the others'
    results), within its share of the time left; notebook -> status."""
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
        outcome = _run(progress, command, limit, env)
        statuses[notebook] = _status(notebook, outcome, limit)
        progress.step(f"{notebook}: {statuses[notebook]} ({outcome.seconds:.0f} s)")
        if outcome.returncode == 2 and not outcome.stopped:  # bad input: every run would refuse
            raise PlanError(f"{notebook}: the runner refused the plan (its message is above)")
    return statuses


def write_archive(report: Path, path: Path, log: list[str]) -> Path:
    """`report` as `<name>/...` in the tar.gz `path`, with `log` as `<name>/device-plan.log`;
    written whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.partial")
    data = ("\n".join(log) + "\n").encode()
    member = f"{report.name}/{LOG_NAME}"
    with tarfile.open(partial, "w:gz") as tar:
        tar.add(report, arcname=report.name, filter=lambda m: None if m.name == member else m)
        info = tarfile.TarInfo(member)
        info.size, info.mtime = len(data), int(time.time())
        tar.addfile(info, io.BytesIO(data))
    partial.replace(path)
    return path


def _display(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def cmd_device_plan(args) -> int:
    try:
        return _device_plan(args)
    except ParameterError as err:  # a PlanError, or a platform that is not a parameter file
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # the step running was stopped (budget.run_bounded)
        print("interrupted", file=sys.stderr)
        return 130


def _device_plan(args) -> int:
    if not args.budget_s > 0:
        raise PlanError(f"--budget-s {args.budget_s} must be > 0")
    source = Path(args.wheels).resolve() if args.wheels else ROOT / ".whl" / "device"
    target = Path(args.target).resolve() if args.target else ROOT / ".cache" / "device-site"
    if not any(source.glob("*.whl")):
        raise PlanError(f"--wheels {_display(source)}: no wheels there (make device-wheels)")
    if args.platform:  # a bad name, --only or -p before anything runs
        params_by_notebook(plan_notebooks(args.platform, args.only), args.param)
    out = Path(args.out).resolve() if args.out else None
    if out in (OUTPUTS / "reference", ROOT):
        raise PlanError(
            f"--out {args.out}: the nbval reference set and the checkout stay as they are"
        )
    progress = Progress(args.budget_s)
    env = {
        **os.environ,
        **wheels.environment(target, os.environ, on_path=not args.dry_run),
        "PYTHONUNBUFFERED": "1",  # children's lines as they come
        "TORCHINDUCTOR_CACHE_DIR": os.environ.get(
            "TORCHINDUCTOR_CACHE_DIR", str(ROOT / ".cache" / "inductor")
        ),
    }
    wheels_ok = install(progress, source, target, dry_run=args.dry_run, env=env)
    if not wheels_ok and not args.dry_run:
        return 1
    kernel_command = wheels.kernel_command(target, sys.executable)
    kernel = _run(progress, kernel_command, SETUP_S, env, quiet=True)
    progress.step(
        f"kernel: {wheels.KERNEL_NAME} in {_display(target)}/share/jupyter/kernels: "
        + ("ok" if not kernel.returncode else _failed(kernel) or f"exit {kernel.returncode}")
    )
    platform = args.platform or quick_platform(progress, env)
    notebooks = plan_notebooks(platform, args.only)
    preflight = _run(
        progress, [sys.executable, "-m", f"{__package__}.preflight"], PREFLIGHT_S, env
    )
    failed = sum(" error: " in line for line in preflight.lines)
    crashed = f"exit {preflight.returncode}" if preflight.returncode and not failed else ""
    progress.step(f"preflight: {_failed(preflight) or crashed or f'{failed} items failed'}")
    out = out or (REHEARSALS if args.dry_run else OUTPUTS) / platform
    statuses = run_notebooks(progress, platform, notebooks, out, args.param, env)
    if (out / "run.json").exists():
        archive = Path(args.archive) if args.archive else None
        archive = archive or Path(os.environ.get("OUT") or out.parent) / f"{out.name}.tar.gz"
        progress.step(f"archive: {_display(archive.resolve())}")
        write_archive(out, archive, progress.log)
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
        help="report folder (default: outputs/<platform>; --dry-run: .cache/device-plan/<platform>)",
    )
    parser.add_argument(
        "--archive",
        help="the tar.gz to write (default: $OUT/<name>.tar.gz, else beside the report)",
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=DEFAULT_BUDGET_S,
        help="seconds for everything, install to archive (default: %(default)s)",
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
        "--dry-run",
        action="store_true",
        help="install nothing: check that the wheels resolve offline for the host's Python 3.12 "
        "(pip --dry-run), then run the rest here, into .cache/device-plan/",
    )
    return parser


def add_parser(subparsers) -> None:
    """`device-plan` on `python -m kernel_lib`'s subcommands."""
    parser = subparsers.add_parser(
        "device-plan",
        help="a GPU host without a package index: wheels, preflight, time-boxed quick plan, archive",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    arguments(parser).set_defaults(func=cmd_device_plan)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kernel_lib.device_plan",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return cmd_device_plan(arguments(parser).parse_args(argv))
