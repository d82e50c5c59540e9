"""`python -m kernel_lib sensitivity`: how small a slowdown `compare` detects on this machine.

A small, fast benchmark (relu and add of 2^18 fp32 values, interleaved, `measure.check_then_time`) runs as
separate processes, since the statistical unit of `compare` is the run. Per trial: side A and side
A' (the same code: an A/A pair, the noise floor), and one side B per slowdown level, where the
test-only knob `measure.TEST_SLOWDOWN_ENV` makes `relu` take 1 + level times as long (its records
are flagged as test figures). The runs of a trial are interleaved (A, A', B... in an order that
turns every run), so drift of the machine lands on every side alike. Then `compare` is asked, for
each trial and each n of runs a side (the first n runs), A vs A' and A vs each B; the tally counts
its verdicts: how often the slowed `relu` is called `slower`, and how often anything untouched
(both records of A vs A', `add` of A vs B) gets a verdict word.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd

from kernel_lib.compare import DEFAULT_FACTOR, compare_folders
from kernel_lib.measure import TEST_SLOWDOWN_ENV
from kernel_lib.records import PLATFORM_ENV, RUN_ID_ENV
from kernel_lib.results.folders import RUN_PREFIX
from kernel_lib.results.writes import output_folder, write_text

NAME = "sensitivity"  # the benchmark's topic and results file
SLOWED = "relu"  # the implementation the knob slows
UNTOUCHED = "add"
LEVELS = (0.05, 0.10, 0.20)
RUNS_A_SIDE = (3, 5)
TRIALS = 10
SIZE = 2**18
VERDICTS = ("slower", "faster", "unconfirmed", "same")
TIMEOUT_S = 300


def benchmark(*, min_time_s: float = 0.05):
    """The benchmark one run executes: relu and add of SIZE fp32 values, each checked against
    float64, timed interleaved over 6 rounds (records of topic NAME). On one thread: a call of
    tens of microseconds split over threads waits for the slowest, which on a shared machine is
    whichever was descheduled."""
    import torch

    torch.set_num_threads(1)

    from kernel_lib import checks  # the child's start-up
    from kernel_lib.measure import Candidate, Case, compare  # the child's start-up
    from kernel_lib.platform import device_facts  # the child's start-up

    x = torch.randn(SIZE, generator=torch.Generator().manual_seed(0))
    exact = checks.Tolerance(0.0, "one IEEE op, bit-exact", "max_abs_error")
    relu_ref = checks.against(
        lambda: x.double().clamp(min=0).float(), reference="fp64 clamp", tolerance=exact
    )
    add_ref = checks.against(
        lambda: (x.double() + x.double()).float(), reference="fp64 add", tolerance=exact
    )
    candidates = [
        Candidate(SLOWED, lambda: torch.relu(x), relu_ref),
        Candidate(UNTOUCHED, lambda: torch.add(x, x), add_ref),
    ]
    case = Case(NAME, "elementwise", {"n": SIZE}, dtype="float32")
    return compare(case, candidates, facts=device_facts("cpu"), rounds=6, min_time_s=min_time_s)


def run_once(folder: Path, slowdown: float) -> None:
    """One run in a fresh process: its records into `folder` (RuntimeError if it fails)."""
    env = {
        **os.environ,
        PLATFORM_ENV: NAME,
        RUN_ID_ENV: f"{NAME}-{folder.parent.name}-{folder.name}",
    }
    env.pop(TEST_SLOWDOWN_ENV, None)
    if slowdown:
        env[TEST_SLOWDOWN_ENV] = f"{SLOWED}={slowdown}"
    proc = subprocess.run(
        [sys.executable, "-m", "kernel_lib.sensitivity", "--one-run", str(folder)],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]
        raise RuntimeError(f"run {folder} exited {proc.returncode}: {tail}")


def side_name(level: float | None) -> str:
    """'A', "A'" is 'A2', and 'B05' for a 5 % slowdown."""
    return "A" if level is None else f"B{round(level * 100):02d}"


def sides(levels) -> list[tuple[str, float]]:
    return [("A", 0.0), ("A2", 0.0), *[(side_name(lv), lv) for lv in levels]]


def collect(out: Path, *, trials: int, runs: int, levels=LEVELS, log=print) -> None:
    """Every run of every trial: out/trial-<t>/<side>/run-<k>/, interleaved within a trial."""
    order = sides(levels)
    for t in range(1, trials + 1):
        for k in range(1, runs + 1):
            shift = (k - 1) % len(order)  # each side takes every place in the order in turn
            for name, level in order[shift:] + order[:shift]:
                run_once(out / f"trial-{t}" / name / f"{RUN_PREFIX}{k}", level)
        log(f"trial {t}/{trials} done")


def _runs(out: Path, trial: int, side: str, n: int) -> list[Path]:
    return [out / f"trial-{trial}" / side / f"{RUN_PREFIX}{k}" for k in range(1, n + 1)]


def verdicts(
    a: list[Path], b: list[Path], factor: float = DEFAULT_FACTOR
) -> dict[str, tuple[str, float]]:
    """implementation -> (compare's verdict, its ratio) for B against A."""
    table = compare_folders(a, b, factor=factor).table
    return {
        key.split("/")[2]: (verdict, ratio)
        for key, verdict, ratio in zip(table["key"], table["verdict"], table["ratio"])
    }


def tally(
    out: Path,
    *,
    trials: int,
    runs_a_side=RUNS_A_SIDE,
    levels=LEVELS,
    factor: float = DEFAULT_FACTOR,
) -> pd.DataFrame:
    """One row per comparison and runs a side: how many trials gave each verdict, for the slowed
    record (`relu` of A vs B) and for the untouched ones (A vs A', `add` of A vs B), and the
    median and range over the trials of compare's ratio (B/A: the slowdown really measured)."""
    rows = []
    for n in runs_a_side:
        for name, level in sides(levels)[1:]:
            seen: dict[str, Counter] = {SLOWED: Counter(), UNTOUCHED: Counter()}
            ratios: dict[str, list[float]] = {SLOWED: [], UNTOUCHED: []}
            for t in range(1, trials + 1):
                got = verdicts(_runs(out, t, "A", n), _runs(out, t, name, n), factor)
                for impl, (verdict, ratio) in got.items():
                    seen[impl][verdict] += 1
                    ratios[impl].append(ratio)
            label = "A vs A'" if level == 0 else f"A vs +{level:.0%}"
            for impl, counts in seen.items():
                rows.append(
                    {
                        "comparison": label,
                        "record": impl + (" (slowed)" if level and impl == SLOWED else ""),
                        "runs_a_side": n,
                        "factor": factor,
                        "trials": trials,
                        **{v: counts[v] for v in VERDICTS},
                        "ratio_median": round(statistics.median(ratios[impl]), 3),
                        "ratio_range": f"{min(ratios[impl]):.3f}-{max(ratios[impl]):.3f}",
                    }
                )
    return pd.DataFrame(rows)


def smallest_detected(table: pd.DataFrame, *, at_least: float = 0.9) -> dict[int, str]:
    """runs a side -> the smallest slowdown called `slower` in >= at_least of its trials."""
    slowed = table[table["record"].str.endswith("(slowed)")]
    out = {}
    for n, rows in slowed.groupby("runs_a_side"):
        hit = rows[rows["slower"] >= at_least * rows["trials"]]
        out[int(n)] = hit["comparison"].iloc[0].removeprefix("A vs ") if len(hit) else "none"
    return out


def _machine() -> str:
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    return f"load average {load} on {os.cpu_count()} cores"


def cli(argv: list[str]) -> int:
    """The `sensitivity` command (also `--one-run FOLDER`, the process of one run)."""
    parser = argparse.ArgumentParser(prog="python -m kernel_lib sensitivity", description=__doc__)
    parser.add_argument(
        "--out",
        default=".cache/sensitivity",
        help="folder of the trial runs: new, empty, or one this command filled",
    )
    parser.add_argument("--trials", type=int, default=TRIALS)
    parser.add_argument("--runs", type=int, default=max(RUNS_A_SIDE), help="runs a side")
    parser.add_argument("--factor", type=float, default=DEFAULT_FACTOR, help="compare's factor")
    parser.add_argument("--tally-only", action="store_true", help="count verdicts of kept runs")
    parser.add_argument("--one-run", metavar="FOLDER", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one_run:
        from kernel_lib.records import save_records  # the child's start-up

        save_records(benchmark(), NAME, args.one_run)
        return 0
    if args.trials < 1 or args.runs < 1:
        parser.error("--trials and --runs must be >= 1")
    # new, empty or one this command filled (its trial-1/): never a user's folder or a file
    out = output_folder(Path(args.out), "--out", mark="trial-1")
    runs_a_side = tuple(n for n in RUNS_A_SIDE if n <= args.runs) or (args.runs,)
    if not args.tally_only:
        print(f"start: {_machine()}", flush=True)
        collect(out, trials=args.trials, runs=args.runs, log=lambda m: print(m, flush=True))
        print(f"end: {_machine()}", flush=True)
    table = tally(out, trials=args.trials, runs_a_side=runs_a_side, factor=args.factor)
    print(table.to_string(index=False))
    for n, level in smallest_detected(table).items():
        print(f"smallest slowdown called slower in >= 90 % of trials, {n} runs a side: {level}")
    write_text(
        out / f"tally-factor-{args.factor:g}.json",
        json.dumps(table.to_dict("records"), indent=1) + "\n",
    )
    return 0


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
