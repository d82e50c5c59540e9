"""Child processes held to wall-clock limits, the budget's clock (`Progress`), and each notebook's
share of the time left (`plan_lines`: with its sections, for --plan-only).

At its limit a child gets SIGINT (the runner then stops its notebook, keeps the sections it
finished as a `stopped` notebook and writes the report), and after GRACE_S it and every process it
started get SIGKILL (a notebook kernel runs in its own session, out of the child's group): the
tree is frozen (SIGSTOP) level by level before the kill, so nothing it starts meanwhile escapes,
and `_stop` returns once every one of them is gone. Every child starts with SIGINT at its default,
whatever this process inherited (a host's `cmd &` ignores it).
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

GRACE_S = 30.0  # SIGINT -> SIGKILL: the runner stops its kernel (~5 s), then writes the report
GONE_S = 10.0  # at most, after SIGKILL, for the processes to be gone
# A notebook's weight in the split of the time left; the first ones are the most wanted.
WEIGHTS = {"fp8": 4, "flex_attention": 4, "moe": 3}
DEFAULT_WEIGHT = 2  # the backend notebooks (out of the quick plans) and any other
# notebook -> the module of its suite (`SUITE`); the backend notebooks': backends.suite `SUITES`
SUITE_MODULES = {
    "fp8": "kernel_lib.fp8.suite",
    "flex_attention": "kernel_lib.attention.suite",
    "moe": "kernel_lib.moe.suite",
}


@dataclass(frozen=True)
class Outcome:
    returncode: int
    seconds: float
    stopped: bool  # it ran past its limit and was stopped
    lines: list[str] = field(default_factory=list)  # its stdout and stderr


class Progress:
    """The budget's clock, every line this command prints (for the archive's log), and the
    staging folders that runners killed before their swap left, kept for the archive."""

    def __init__(self, budget_s: float):
        self.budget_s, self.started, self.log = budget_s, time.monotonic(), []
        self.kept: list[Path] = []

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


def share(notebook: str, remaining: Sequence[str], seconds_left: float) -> float:
    """`notebook`'s part of `seconds_left` by WEIGHTS among `remaining` (it and the notebooks
    after it): time a notebook does not use goes to those after it."""
    weight = lambda name: WEIGHTS.get(name, DEFAULT_WEIGHT)
    return seconds_left * weight(notebook) / sum(weight(name) for name in remaining)


def sections(notebook: str) -> tuple:
    """The sections `notebook` runs, in its order (its suite's: kernel_lib.suite.Section)."""
    # imported here: a topic's suite imports its kernels, which only --plan-only needs
    if notebook.startswith("backend_"):
        suites = importlib.import_module("kernel_lib.backends.suite").SUITES
        return suites[notebook.removeprefix("backend_")].sections
    return importlib.import_module(SUITE_MODULES[notebook]).SUITE.sections


def plan_lines(notebooks: Sequence[str], seconds: float, min_s: float) -> list[str]:
    """--plan-only: each notebook's share of `seconds` when each one before it uses all of its
    own (one that finishes early leaves its time to the later ones; under `min_s` it is not
    started), then its sections in order. Which of them fit is not known before they run (no
    section declares its time): a stop keeps those it finished."""
    lines = []
    for index, notebook in enumerate(notebooks):
        limit = share(notebook, notebooks[index:], seconds)
        seconds -= limit
        note = "" if limit >= min_s else f" (under {min_s:.0f} s: not started)"
        lines.append(f"{notebook}: {limit:.0f} s{note}")
        found = sections(notebook)
        lines.append(
            f"  its {len(found)} sections, in order (which fit in {limit:.0f} s is known only as "
            "they run; a stop keeps those it finished):"
        )
        lines += [f"  {i}. {s.name}: {s.summary}" for i, s in enumerate(found, 1)]
    return lines


def _sigint_default() -> None:
    """In a child, before its exec: SIGINT at its default (an ignored one stays ignored across
    exec, and a runner that ignores it is never stopped, only killed: its report lost)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _tree(pid: int, known: list) -> list:
    """The process `pid` and every descendant, each suspended (SIGSTOP: it starts nothing more)
    before its children are listed, with `known` (found earlier: one whose parent has gone is no
    longer below `pid`)."""
    import psutil  # here: `--help` and the plan's checks run on an image without psutil

    try:
        queue = [psutil.Process(pid)]
    except psutil.NoSuchProcess:
        queue = []
    found = {p.pid: p for p in known}
    while queue:
        process = queue.pop()
        found.setdefault(process.pid, process)
        try:
            process.suspend()
            children = process.children()
        except psutil.NoSuchProcess:
            continue
        queue += [c for c in children if c.pid not in found]
    return list(found.values())


def _gone(processes: list, timeout_s: float) -> None:
    """Wait until each of `processes` has exited (a zombie has: its memory is freed)."""
    import psutil  # here: see _tree

    deadline = time.monotonic() + timeout_s
    for process in processes:
        while time.monotonic() < deadline:
            try:
                if process.status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.02)


def _stop(process: subprocess.Popen, grace_s: float) -> None:
    """SIGINT to `process`; after `grace_s` (or once it has exited, or at a Ctrl-C meanwhile,
    which goes on up afterwards), SIGKILL to what is left of it and of every process it started;
    returns once they are gone."""
    import psutil  # here: see _tree

    try:
        known = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        known = []
    process.send_signal(signal.SIGINT)
    interrupted = False
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    except KeyboardInterrupt:  # a second Ctrl-C (or SIGTERM): no more grace
        interrupted = True
    tree = _tree(process.pid, known) if process.poll() is None else known
    for member in tree:  # psutil checks the pid still names the same process
        try:
            member.kill()
        except psutil.NoSuchProcess:
            pass
    process.wait()
    _gone(tree, GONE_S)
    if interrupted:
        raise KeyboardInterrupt


def run_bounded(
    command: Sequence[str],
    limit_s: float,
    *,
    echo: Callable[[str], None] = print,
    env: dict | None = None,
    cwd: os.PathLike | None = None,
    grace_s: float = GRACE_S,
) -> Outcome:
    """Run `command` with its output passed line by line to `echo`, stopped (`_stop`) once it
    has run `limit_s` seconds. Ctrl-C here stops it the same way, then goes on up. What a child
    prints once it is being stopped (a kernel's traceback) is kept in the outcome, not echoed."""
    lines, stopping, stopped = [], threading.Event(), False

    def pump():
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if not stopping.is_set():
                echo(lines[-1])

    # Everything but the start is made first: a Ctrl-C or SIGTERM from the moment the child exists
    # lands in the try below, which stops it (Thread.start waits for the thread: under load the
    # signal arrived there and the child ran on)
    reader = threading.Thread(target=pump, daemon=True)
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        env=env,
        cwd=cwd,
        start_new_session=True,  # a terminal's Ctrl-C reaches us, and we decide what it stops
        # a handled SIGINT is at its default after exec anyway (no fork for it then)
        preexec_fn=_sigint_default if signal.getsignal(signal.SIGINT) == signal.SIG_IGN else None,
    )
    try:
        reader.start()
        process.wait(timeout=max(limit_s, 0.0))
    except subprocess.TimeoutExpired:
        stopped = True
        stopping.set()
        _stop(process, grace_s)
    except KeyboardInterrupt:
        stopping.set()
        _stop(process, grace_s)
        raise
    reader.join(timeout=5.0)  # a kernel killed with its parent may hold the pipe a moment longer
    return Outcome(process.returncode, time.monotonic() - started, stopped, lines)
