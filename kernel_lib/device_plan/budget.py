"""Child processes held to wall-clock limits, and each notebook's share of the time left.

At its limit a child gets SIGINT (the runner then stops its notebook and leaves the report as it
was: the notebooks run before keep their records), and after GRACE_S it and every process it
started get SIGKILL (a notebook kernel runs in its own session, out of the child's group).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import psutil

GRACE_S = 15.0  # SIGINT -> SIGKILL: the runner's kernel shutdown takes up to ~5 s
# A notebook's weight in the split of the time left; the first ones are the most wanted.
WEIGHTS = {"fp8": 3, "flex_attention": 4, "moe": 3}
DEFAULT_WEIGHT = 2  # the backend notebooks and any other


@dataclass(frozen=True)
class Outcome:
    returncode: int
    seconds: float
    stopped: bool  # it ran past its limit and was stopped
    lines: list[str] = field(default_factory=list)  # its stdout and stderr


def share(notebook: str, remaining: Sequence[str], seconds_left: float) -> float:
    """`notebook`'s part of `seconds_left` by WEIGHTS among `remaining` (it and the notebooks
    after it): time a notebook does not use goes to those after it."""
    weight = lambda name: WEIGHTS.get(name, DEFAULT_WEIGHT)
    return seconds_left * weight(notebook) / sum(weight(name) for name in remaining)


def _stop(process: subprocess.Popen, grace_s: float) -> None:
    """SIGINT to `process`; after `grace_s`, SIGKILL to it and what it had started."""
    try:
        tree = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        tree = []
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
    for child in tree:  # psutil checks the pid still names the same process
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    process.wait()


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
    has run `limit_s` seconds. Ctrl-C here stops it the same way, then goes on up."""
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
    )
    lines = []

    def pump():
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            echo(lines[-1])

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    stopped = False
    try:
        process.wait(timeout=max(limit_s, 0.0))
    except subprocess.TimeoutExpired:
        stopped = True
        _stop(process, grace_s)
    except KeyboardInterrupt:
        _stop(process, grace_s)
        raise
    reader.join(timeout=5.0)  # a kernel killed with its parent may hold the pipe a moment longer
    return Outcome(process.returncode, time.monotonic() - started, stopped, lines)
