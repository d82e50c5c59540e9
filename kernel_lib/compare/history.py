"""`python -m kernel_lib history` and `regressions`: the results store on the command line
(docs/history.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from kernel_lib import OUTPUTS
from kernel_lib.compare import ab_layout, regressions
from kernel_lib.compare.noise import read_noise_floor
from kernel_lib.params import ParameterError
from kernel_lib.results import rebuild, store
from kernel_lib.results.folders import run_folders

RUN_TABLE = (
    "run_id", "date", "platform", "device", "git", "torch", "lock", "notebooks", "headlines",
)  # fmt: skip
TREND_TABLE = (
    "date", "run_id", "platform", "device", "git", "torch", "lock", "measure", "value", "low",
    "high", "status", "record_id",
)  # fmt: skip


def _headlines(recs: list[dict]) -> str:
    parts = []
    for rec in recs:
        if rec["status"] != "ok":
            parts.append(f"{rec['headline']} {rec['status']}")
            continue
        measure, value = store.headline_value(rec)
        unit = {"ratio_vs_baseline": "x", "fraction_of_peak": " of peak", "median_ms": " ms"}
        parts.append(f"{rec['headline']} {value:.3g}{unit.get(measure, '')}" if measure else "")
    return "; ".join(p for p in parts if p)


def history_table(path: Path, platform: str | None, key: str | None) -> pd.DataFrame:
    """The runs (with their headline figures), or with `key` that headline's trend."""
    runs = store.runs(path, platform)
    by_id = {r["run_id"]: r for r in runs}
    recs = [r for r in store.records(path, list(by_id), key) if r["headline"]]
    if key is None:
        per_run: dict[str, list[dict]] = {}
        for rec in recs:
            per_run.setdefault(rec["run_id"], []).append(rec)
        rows = [
            {**r, "date": r["started_utc"], "headlines": _headlines(per_run.get(r["run_id"], []))}
            for r in runs
        ]
        return pd.DataFrame(rows, columns=RUN_TABLE)
    if runs and not recs:
        raise ParameterError(f"--key {key}: no run in {path} has this headline")
    rows = []
    for rec in sorted(recs, key=lambda x: (by_id[x["run_id"]]["started_utc"] or "", x["run_id"])):
        run = by_id[rec["run_id"]]
        measure, value = store.headline_value(rec)
        ratio = measure == "ratio_vs_baseline"
        rows.append(
            {
                **run,
                **rec,
                "date": run["started_utc"],
                "measure": measure,
                "value": value,
                "low": rec["ratio_low"] if ratio else None,
                "high": rec["ratio_high"] if ratio else None,
            }
        )
    return pd.DataFrame(rows, columns=TREND_TABLE)


def added_runs(folder: Path) -> list[tuple[dict, list[dict]]]:
    """The runs `history --add FOLDER` adds (store.report_runs): a report folder's, or those of
    an `ab` run (its OUT, .cache/ab/<run>, or one side, <run>/A) as `ab` adds them: one report a
    side, `ab:<run>/<side>`, a side slowed by --slow-b left out (a test's, not a measurement)."""
    folder = Path(folder)
    one_side = folder.name in ab_layout.SIDES and (folder.parent / ab_layout.STATE).is_file()
    out, sides = (folder.parent, [folder.name]) if one_side else (folder, ab_layout.SIDES)
    if not (out / ab_layout.STATE).is_file():
        return store.report_runs(folder)
    try:
        slowed = json.loads((out / ab_layout.STATE).read_text()).get("slow_b")
    except (OSError, ValueError, AttributeError):
        raise ParameterError(
            f"{out / ab_layout.STATE}: damaged (not the ab.json `ab` writes)"
        ) from None
    kept = [s for s in sides if run_folders(out / s) and not (s == "B" and slowed)]
    if not kept:
        why = f"B was slowed by --slow-b {slowed}" if slowed and "B" in sides else "no run"
        raise ParameterError(f"{folder}: an ab run with no side to add ({why})")
    return [run for s in kept for run in store.report_runs(out / s, f"ab:{out.name}/{s}")]


def cmd_history(args) -> int:
    path = store.store_path(args.store)
    if args.rebuild:
        done = rebuild.rebuild(args.outputs, path)
        kept = f"; {done.kept} run(s) not found there kept" if done.kept else ""
        before = f"; the store before: {done.backup}" if done.backup else ""
        print(f"{path}: rebuilt from {args.outputs}: {len(done.added)} run(s){kept}{before}")
        return 0
    if args.add:
        runs = [added_runs(folder) for folder in args.add]  # every folder read first
        for folder, found in zip(args.add, runs):
            print(f"{path}: added {len(store.add_runs(found, path))} run(s) of {folder}")
        return 0
    table = history_table(path, args.platform, args.key)
    if args.csv:
        table.to_csv(sys.stdout, index=False)
    elif table.empty:
        print(f"{path}: no run{f' of {args.platform}' if args.platform else ''}")
    else:
        print(table.to_string(index=False, na_rep=""))
    return 0


def cmd_regressions(args) -> int:
    floor = read_noise_floor(args.noise_floor) if args.noise_floor else None
    lines, code = regressions.regressions(
        store.store_path(args.store), args.platform, factor=args.factor, noise_floor=floor
    )
    print("\n".join(lines))
    return code


def _subcommand(subparsers, name: str, summary: str, module, func) -> argparse.ArgumentParser:
    """A subcommand with --store and --platform, its module's docstring as its --help."""
    parser = subparsers.add_parser(
        name,
        help=summary,
        description=module.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--store",
        help=f"the results store (default: ${store.STORE_ENV}, else outputs/{store.STORE_NAME})",
    )
    parser.add_argument("--platform", help="only this platform's runs")
    parser.set_defaults(func=func)
    return parser


def add_parsers(subparsers) -> None:
    """`history` and `regressions` on `python -m kernel_lib`'s subcommands."""
    history = _subcommand(
        subparsers,
        "history",
        "every run kept in the results store; a headline's trend (--key)",
        store,
        cmd_history,
    )
    history.add_argument("--key", help="a headline key: its value in each run")
    history.add_argument("--csv", action="store_true", help="CSV on stdout (for pandas)")
    history.add_argument(
        "--rebuild",
        action="store_true",
        help="add every report folder under --outputs again (the store's other runs kept, the "
        "store before kept beside it as <name>.<time>.bak)",
    )
    history.add_argument(
        "--outputs", type=Path, default=OUTPUTS, help="where --rebuild reads reports"
    )
    history.add_argument(
        "--add",
        nargs="+",
        metavar="FOLDER",
        type=Path,
        help="add these report folders' runs (one imported from elsewhere, a colleague's)",
    )
    check = _subcommand(
        subparsers,
        "regressions",
        "the latest run against the earlier ones (exit 1: a confirmed slowdown)",
        regressions,
        cmd_regressions,
    )
    check.add_argument("--factor", type=float, help="the factor (default: compare's rule)")
    check.add_argument(
        "--noise-floor",
        help="an A/A's noise-floor.json (sets the factor; default: the one `ab` kept for the "
        "platform, .cache/ab/noise-floor-<platform>.json, when measured on its device)",
    )
