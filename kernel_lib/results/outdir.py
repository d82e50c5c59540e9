"""A report folder held for one run: the runner replaces only what it made.

`owned(out)`: `out` must be new, empty, or one of the runner's reports (never a file, someone's
folder or the checkout); one run at a time per folder (`.lock-<name>` beside it); leftovers of
killed runs cleaned (a finished run among them kept). `staged(out)`: the new report is built in a
sibling `.staging-<name>-<pid>` folder and swapped in at the end (two renames that a Ctrl-C or
SIGTERM waits for), so an interrupted or failed run leaves the previous report untouched, and a
finished run that cannot be swapped in is kept as `<out>.unswapped-<time>`. `install(report,
out)`: a finished report copied over `out` the same way (`cloud collect`). The rules for every
other file a command writes: kernel_lib.results.writes.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import shutil
import sys
from pathlib import Path

from kernel_lib.interrupts import deferred
from kernel_lib.params import ParameterError
from kernel_lib.results.files import refuse_special
from kernel_lib.results.folders import RUN_FILE, repeat_of
from kernel_lib.results.writes import copy_tree, is_report, refuse_checkout

KEPT = "unswapped"  # `<out>.unswapped-<time>`: a run that did not replace <out> (finished, or
# the device run's, killed before its swap)
# Set (the device run, one run per notebook): the runner leaves the results store and the gallery,
# which it refreshes from every report of outputs/ after each run, to whoever set it.
GALLERY_LATER_ENV = "KERNEL_WORKBOOK_GALLERY_LATER"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return True


def check_out(out_dir: Path) -> None:
    """ParameterError unless `out_dir` is the runner's to replace: new, empty, or a report."""
    refuse_checkout(out_dir, "--out")
    if out_dir.exists() and not out_dir.is_dir():
        why = "is a file"
    elif out_dir.is_dir() and any(out_dir.iterdir()) and not is_report(out_dir):
        why = f"holds files that are not a report (no {RUN_FILE} of a run): choose a new folder"
    else:
        return
    raise ParameterError(f"--out {out_dir} {why}")


@contextlib.contextmanager
def locked(out_dir: Path):
    """Hold `.lock-<name>` beside `out_dir` for the block (flock: the lock ends with the process,
    even a killed one); ParameterError naming the holder when another run has it."""
    path = out_dir.parent / f".lock-{out_dir.name}"
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode(errors="replace").strip() or "another run"
            os.close(fd)
            raise ParameterError(
                f"--out {out_dir} is being written by {holder}: wait for it or choose another --out"
            ) from None
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)  # its holder finished and removed it between our open and flock: again
    try:
        started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        os.write(fd, f"run pid {os.getpid()} (started {started})".encode())
        yield
    finally:
        path.unlink(missing_ok=True)
        os.close(fd)


def _keep(staging: Path, out_dir: Path) -> Path:
    """Move a finished run that did not replace `out_dir` to a name no run cleans up (where that
    fails too, it stays in `staging`, which a later run keeps as well); return where it is."""
    kept = out_dir.with_name(f"{out_dir.name}.{KEPT}-{dt.datetime.now():%Y%m%dT%H%M%S}")
    try:
        staging.rename(kept)
    except OSError:
        return staging
    return kept


def clean_after_killed_runs(out_dir: Path, *, keep_unfinished: bool = False) -> list[Path]:
    """Under the lock, what runs killed (SIGKILL, power loss) left: a report caught mid-swap
    (renamed away, the new one not in place) comes back, a finished run (its staging holds a
    run.json) is kept (`_keep`), unfinished staging folders go (`keep_unfinished`: are kept
    too, with what their notebooks saved: the device run's). Returns the staging folders kept."""
    kept = []
    for path in out_dir.parent.glob(f".*-{out_dir.name}-*"):
        kind, _, pid = path.name[1:].rpartition(f"-{out_dir.name}-")
        if kind not in ("staging", "previous") or not pid.isdigit() or _pid_alive(int(pid)):
            continue
        if kind == "previous" and not out_dir.exists():
            path.rename(out_dir)
        elif kind == "staging" and (path / RUN_FILE).exists():
            kept.append(_keep(path, out_dir))
            print(f"a finished run that was not swapped in is in {kept[-1]}", file=sys.stderr)
        elif kind == "staging" and keep_unfinished:
            kept.append(_keep(path, out_dir))
        else:
            shutil.rmtree(path, ignore_errors=True)
    return kept


@contextlib.contextmanager
def owned(out_dir: Path):
    """`out_dir` held for one run: checked (`check_out`), locked, rid of killed runs' leftovers."""
    check_out(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with locked(out_dir):
        clean_after_killed_runs(out_dir)
        yield


def _staging(out_dir: Path) -> Path:
    """The staging folder of this process for `out_dir`, emptied."""
    staging = out_dir.parent / f".staging-{out_dir.name}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    return staging


def _stage(out_dir: Path, repeat: int = 1, *, fresh: bool = False) -> tuple[Path, dict]:
    """A fresh staging folder and the run.json of the report it continues ({} if none): a copy of
    the last report when it has the same layout (one run, or `run-*/` folders) and the run is not
    `fresh` (`run --replace`: nothing of it carried), whose results are kept until a notebook's
    new ones replace them. Not its run.json: staging holds one only once its own run has
    finished. A failed copy leaves nothing."""
    staging = _staging(out_dir)
    previous = {}
    same_layout = (out_dir / RUN_FILE).exists() and (repeat_of(out_dir) > 1) == (repeat > 1)
    try:
        if same_layout and not fresh:
            previous = json.loads((out_dir / RUN_FILE).read_text())
            shutil.copytree(out_dir, staging)
            (staging / RUN_FILE).unlink()
        else:
            staging.mkdir(parents=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return staging, previous


def _swap_in(staging: Path, out_dir: Path) -> None:
    """Replace the old report with the finished one; the old one is deleted only once replaced.
    A Ctrl-C or SIGTERM between the two renames is acted on after the second (`deferred`), its
    KeyboardInterrupt saying the new report is in place. When the swap fails the old report
    stays, the finished run is kept (`_keep`) and an OSError says where it is."""
    previous = out_dir.parent / f".previous-{out_dir.name}-{os.getpid()}"
    swapped = False
    try:
        with deferred():
            try:
                if out_dir.exists():
                    out_dir.rename(previous)
                staging.rename(out_dir)
                swapped = True
            except OSError as err:
                if previous.exists() and not out_dir.exists():
                    with contextlib.suppress(OSError):  # else the next run puts it back
                        previous.rename(out_dir)
                raise OSError(
                    f"the finished run is in {_keep(staging, out_dir)}: it could not replace "
                    f"{out_dir} ({err.strerror or err})"
                ) from err
    except KeyboardInterrupt:
        if not swapped:
            raise
        raise KeyboardInterrupt(f"{out_dir} holds the new report whole") from None
    finally:
        if swapped:
            shutil.rmtree(previous, ignore_errors=True)


@contextlib.contextmanager
def staged(out_dir: Path, repeat: int = 1, *, fresh: bool = False):
    """A new report of `out_dir` staged (`_stage`: yields the folder and the previous run.json),
    swapped in when the block ends; when it raises, staging goes and `out_dir` is unchanged."""
    staging, previous = _stage(out_dir, repeat, fresh=fresh)
    try:
        yield staging, previous
    except BaseException as err:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(err, KeyboardInterrupt):
            unchanged = f"the previous report in {out_dir} is unchanged"
            raise KeyboardInterrupt(
                unchanged if out_dir.exists() else f"nothing was written to {out_dir}"
            ) from None
        raise
    _swap_in(staging, out_dir)


def install(report: Path, out_dir: Path) -> None:
    """Copy the finished report `report` over `out_dir` (`owned`: new, empty or a report), staged
    and swapped in: the old report is deleted only once the copy is complete and in place. A
    report holding a link, a FIFO or a device is refused (ParameterError naming it), never copied
    through it."""
    refuse_special(report)
    out_dir = Path(out_dir).resolve()
    with owned(out_dir):
        staging = _staging(out_dir)
        copy_tree(report, staging)
        _swap_in(staging, out_dir)
