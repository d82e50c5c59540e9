"""The runs of `ab`: the plan run by the two sides' checkouts in turn, each run a fresh process.

Round k runs A then B when k is odd, B then A when it is even (A B, B A, A B, ...), so a steady
drift of the machine over the rounds lands on both sides alike. A run is `python -m kernel_lib run`
started in its side's checkout with that checkout first on PYTHONPATH: the runner and every
notebook kernel import that side's kernel_lib, whichever checkout the venv's .pth names (the runner
puts its own checkout first as well, but an old revision's runner may not). A run is done when its
folder holds its run.json (the runner swaps a report in only once it has finished), so a resumed
`ab` runs only the others.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from kernel_lib.compare import ab_layout
from kernel_lib.measure import TEST_SLOWDOWN_ENV
from kernel_lib.params import ParameterError
from kernel_lib.results.folders import RUN_FILE, RUN_PREFIX
from kernel_lib.results.store import STORE_ENV

STOP_S = 30  # after Ctrl-C, how long a run may take to clean up before it is killed
REFUSED = 2  # `run`'s exit code for bad input
INTERRUPTED = 130


@dataclass(frozen=True)
class Side:
    name: str  # A or B
    revision: str  # as the user named it
    commit: str
    checkout: Path
    env: dict  # the variables its runs start with


def environment(checkout: Path, repo: Path, slowdown: str | None) -> dict:
    """os.environ for the runs of `checkout`: it first on PYTHONPATH (without `repo`, the checkout
    `ab` runs from), the test-only slowdown knob set to `slowdown` or unset, the results store
    unset (`ab` adds each side's runs itself, as one report)."""
    env = {k: v for k, v in os.environ.items() if k not in (TEST_SLOWDOWN_ENV, STORE_ENV)}
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    others = [p for p in paths if Path(p).resolve() not in (repo, checkout)]
    env["PYTHONPATH"] = os.pathsep.join([str(checkout), *others])
    if slowdown:
        env[TEST_SLOWDOWN_ENV] = slowdown
    return env


def schedule(runs: int) -> list[tuple[str, int]]:
    """(side, its run number) in the order they run."""
    return [
        (s, k)
        for k in range(1, runs + 1)
        for s in (ab_layout.SIDES if k % 2 else ab_layout.SIDES[::-1])
    ]


def folder(out: Path, side: str, k: int) -> Path:
    return out / side / f"{RUN_PREFIX}{k}"


def done(out: Path, side: str, k: int) -> bool:
    return (folder(out, side, k) / RUN_FILE).exists()


def run_once(side: Side, into: Path, arguments: list[str]) -> tuple[int, str]:
    """One `python -m kernel_lib run` of `side`'s checkout into `into`: its exit code and last
    line of output. Its output is shown indented. On Ctrl-C (which the run gets too, from the
    terminal) it has STOP_S to clean up, then it is killed, and KeyboardInterrupt goes on."""
    command = [sys.executable, "-m", "kernel_lib", "run", *arguments]
    command += ["--out", str(into), "--no-progress"]
    proc = subprocess.Popen(
        command,
        cwd=side.checkout,
        env=side.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    last = ""
    try:
        for line in proc.stdout:
            sys.stderr.write(f"    {line}")
            last = line.strip() or last
        return proc.wait(), last
    except KeyboardInterrupt:
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:  # the Ctrl-C was ours alone (a kill -INT): pass it on
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=STOP_S)
            except subprocess.TimeoutExpired:
                proc.kill()
        raise


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def time_left(seconds: dict[str, list[float]], todo: Counter) -> str:
    """The time the runs still `todo` take, from the mean time of each side's runs so far."""
    measured = [s for times in seconds.values() for s in times]
    if not measured:
        return "time left: known after the first run"
    left = sum(n * statistics.mean(seconds.get(s) or measured) for s, n in todo.items())
    return f"about {_duration(left)} left"


def run_all(out: Path, sides: dict[str, Side], runs: int, arguments: list[str]) -> list[str]:
    """Every run not done yet, in schedule order; the runs that failed ('A run 3 exited 1').
    ParameterError when a side's `run` refuses the plan (nothing more runs); KeyboardInterrupt
    saying what is kept and how to go on."""
    order = [(s, k) for s, k in schedule(runs) if not done(out, s, k)]
    seconds: dict[str, list[float]] = {s: [] for s in ab_layout.SIDES}
    failed = []
    try:
        for index, (name, k) in enumerate(order):
            side = sides[name]
            todo = Counter(s for s, _ in order[index:])
            print(
                f"ab: run {index + 1} of {len(order)}: side {name} ({side.revision}, "
                f"{side.commit[:12]}), its run {k} of {runs}; {time_left(seconds, todo)}",
                file=sys.stderr,
                flush=True,
            )
            started = time.monotonic()
            code, last = run_once(side, folder(out, name, k), arguments)
            seconds[name].append(time.monotonic() - started)
            if code == REFUSED:
                raise ParameterError(f"side {name} ({side.revision}) refused the plan: {last}")
            if code == INTERRUPTED:
                raise KeyboardInterrupt
            if code != 0:
                failed.append(f"{name} run {k} exited {code}")
    except KeyboardInterrupt:
        kept = sum(done(out, s, k) for s, k in schedule(runs))
        raise KeyboardInterrupt(
            f"{kept} of {2 * runs} runs are kept in {out}; the same command with --resume "
            "continues"
        ) from None
    return failed
