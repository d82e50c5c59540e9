"""The `compare` command line: A... -- B... and options; its --help ends with the rules
(`verdict`'s docstring)."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

from kernel_lib.compare import verdict
from kernel_lib.compare.comparison import compare_runs
from kernel_lib.compare.noise import read_noise_floor
from kernel_lib.compare.render import to_html, to_json, to_text
from kernel_lib.compare.runs import CompareError, Run, load_side
from kernel_lib.compare.verdict import DEFAULT_FACTOR, RESOLVED_RUNS
from kernel_lib.params import ParameterError
from kernel_lib.results.writes import output_file, write_text

MAX_FACTOR = 10.0  # a change past 10x needs no statistics to be seen: a larger factor is a typo


def check_factor(value: str | float | None) -> float | None:
    """--factor (of `compare` and `ab`) as a number > 1 and at most MAX_FACTOR (None: chosen when
    compared); CompareError (one line) otherwise."""
    if value is None:
        return None
    try:
        factor = float(value)
    except ValueError:
        factor = math.nan
    if not 1 < factor <= MAX_FACTOR:
        raise CompareError(
            f"--factor must be a number > 1 and at most {MAX_FACTOR:g}, not {str(value)!r}"
        )
    return factor


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit code 2, raised instead of printing usage
        raise CompareError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m kernel_lib compare",
        usage="%(prog)s A... -- B... [--factor F] [--noise-floor FILE] [--json] [--html FILE] "
        "[--all]",
        description="Compare report folders A (before) with report folders B (after). A side may "
        "also name runs of the results store (docs/history.md): cpu@latest, cpu@previous (the "
        "platform's latest report, the one before it) or a run id.",
        epilog=verdict.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("folders", nargs="*", help="report folders of this side")
    parser.add_argument(
        "--factor",
        help=f"> 1, at most {MAX_FACTOR:g}; default: from --noise-floor when it was measured on "
        f"this platform and device at >= {RESOLVED_RUNS} runs a side, else {DEFAULT_FACTOR}",
    )
    parser.add_argument(
        "--noise-floor",
        metavar="FILE",
        help="an A/A's noise-floor.json (of `ab REV REV`): shown, and sets the default factor",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--html", metavar="FILE", help="also write an HTML page (never into a report folder)"
    )
    parser.add_argument("--all", action="store_true", help="table every record, not the changes")
    return parser


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Split `argv` at the first `--` into side A and side B (options may stand on either side);
    raises CompareError on bad input."""
    if "--" not in argv:
        if {"-h", "--help"} & set(argv):
            _parser().print_help()
            raise SystemExit(0)
        raise CompareError("compare needs `--` between the A and B folders: compare A... -- B...")
    cut = argv.index("--")
    parser = _parser()
    left = parser.parse_intermixed_args(argv[:cut])
    right = parser.parse_intermixed_args(argv[cut + 1 :])
    if not left.folders or not right.folders:
        raise CompareError("compare needs report folders on both sides of `--`")
    merged = argparse.Namespace(a=left.folders, b=right.folders)
    for name in ("factor", "html", "noise_floor"):
        value = getattr(right, name) if getattr(right, name) is not None else getattr(left, name)
        setattr(merged, name, value)
    merged.factor = check_factor(merged.factor)
    merged.json = left.json or right.json
    merged.all = left.all or right.all
    return merged


def _identity(run: Run) -> str:
    """One run, however a side names it (a folder, or the results store's name for it): its
    folder and run id (the store keeps the folder it read a run from)."""
    return f"run {run.run_id or '?'} of {Path(run.folder).resolve()}"


def refuse_self(a: list[Run], b: list[Run]) -> None:
    """CompareError when a run is on both sides (a folder, and the store's name for it): it
    would be compared with itself."""
    shared = {_identity(run) for run in a} & {_identity(run) for run in b}
    if shared:
        raise CompareError(
            f"A and B both hold {min(shared)}: a run compared with itself (two runs of one "
            "revision, an A/A, is `python -m kernel_lib ab REV REV`)"
        )


def cli(argv: list[str]) -> int:
    """The `compare` command: print the comparison, return its exit code (2: bad input)."""
    try:
        args = parse_args(argv)
        html = output_file(args.html, "--html") if args.html else None  # before anything runs
        if html is None and args.html:
            raise CompareError("--html -: name a file (the table is already on standard output)")
        if {Path(f).resolve() for f in args.a} == {Path(f).resolve() for f in args.b}:
            raise CompareError(
                "A and B are the same report folders: every ratio would be 1 (two runs of one "
                "revision, an A/A, is `python -m kernel_lib ab REV REV`)"
            )
        floor = read_noise_floor(args.noise_floor) if args.noise_floor else None
        a, b = load_side(args.a), load_side(args.b)
        refuse_self(a, b)
        comparison = compare_runs(a, b, factor=args.factor, noise_floor=floor)
    except ParameterError as err:  # a CompareError, or a damaged report file
        print(f"error: {err}", file=sys.stderr)
        return 2
    if html is not None:
        try:
            write_text(html, to_html(comparison))
        except OSError as err:
            print(f"error: --html {args.html}: {err.strerror or err}", file=sys.stderr)
            return max(comparison.exit_code, 1)
    try:
        if args.json:
            json.dump(to_json(comparison), sys.stdout, indent=1)
            print()
        else:
            sys.stdout.write(to_text(comparison, show_all=args.all))
            if html is not None:
                print(f"html: {args.html}")
        sys.stdout.flush()
    except BrokenPipeError:  # `compare ... | head` stopped reading: the verdict stands
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return comparison.exit_code
