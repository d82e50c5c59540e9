"""`python -m kernel_lib {run,platforms,bench,check}`: the functions the Makefile calls.

Exit codes: 0 everything ran (ok or skipped), 1 a notebook or benchmark failed, 2 bad input (nothing ran).
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

from kernel_lib.params import (
    ROOT,
    ParameterError,
    list_platforms,
    load_plan,
    notebook_defaults,
    parse_override,
)  # fmt: skip
from kernel_lib.platform import detect_platform, device_facts

OUTPUTS = ROOT / "outputs"
# topic -> (module with `suite(params)`, notebook whose parameters it takes; None: the platform's backend_*)
TOPICS = {
    "device": ("kernel_lib.backends.bench", None),
    "moe": ("kernel_lib.moe.bench", "moe"),
    "fp8": ("kernel_lib.fp8.bench", "fp8"),
    "attention": ("kernel_lib.attention.bench", "flex_attention"),
}


def _platform(name: str | None) -> str:
    if name:
        return name
    try:
        return detect_platform()
    except ValueError as err:  # no parameter file matches this device
        raise ParameterError(str(err)) from None


def cmd_run(args) -> int:
    from kernel_lib.runner import FAILED_STATUSES, run_plan

    overrides = dict(parse_override(p) for p in args.param)
    only = (
        [n.strip() for n in args.only.split(",") if n.strip()] if args.only is not None else None
    )
    plan = load_plan(_platform(args.platform), overrides=overrides, only=only)
    out = Path(args.out) if args.out else OUTPUTS / plan.platform
    results = run_plan(plan, out, progress=not args.no_progress)
    print(f"report: {out / 'index.html'}")
    for r in results:
        print(f"  {r.notebook}: {r.status}{': ' + r.detail if r.detail else ''}")
    return 1 if any(r.status in FAILED_STATUSES for r in results) else 0


def cmd_platforms(args) -> int:
    for name in list_platforms():
        plan = load_plan(name)
        print(
            f"{name:15s} {', '.join(plan.notebooks)}"
            + (f"  ({plan.description})" if plan.description else "")
        )
    facts = device_facts()
    try:
        detected = detect_platform(facts)
    except ValueError as err:
        detected = f"none ({err})"
    print(f"\nthis machine: {facts.backend} {facts.name!r} -> platform {detected}")
    return 0


def cmd_bench(args) -> int:
    from kernel_lib.records import stamp, summary_table, to_dicts

    module_name, notebook = TOPICS[args.topic]
    plan = load_plan(
        _platform(args.platform), overrides=dict(parse_override(p) for p in args.param)
    )
    if notebook is None:
        notebook = next((nb for nb in plan.notebooks if nb.startswith("backend_")), None)
    if notebook not in plan.notebooks:
        raise ParameterError(f"platform {plan.platform!r} does not run the {args.topic} notebook")
    params = {**notebook_defaults(notebook), **plan.parameters_for(notebook)}
    records = importlib.import_module(module_name).suite(params, progress=not args.json)
    records = stamp(records, platform=plan.platform)
    if args.json:
        json.dump(to_dicts(records), sys.stdout, indent=1)
        print()
    else:
        print(summary_table(records).to_string())
    return 1 if any(r.status in ("failed", "wrong") for r in records) else 0


def cmd_check(args) -> int:
    """Re-execute a report's notebooks (a copy, so the report is untouched) and compare the
    outputs of cells tagged nbval-check-output."""
    platform = _platform(args.platform)
    source = OUTPUTS / platform
    notebooks = sorted(source.glob("*.ipynb"))
    if not notebooks:
        raise ParameterError(
            f"no executed notebooks in {source.relative_to(ROOT)}: run the report first"
        )
    work = ROOT / ".cache" / "nbval" / platform
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for nb in notebooks:
        shutil.copy2(nb, work / nb.name)
    command = [
        sys.executable,
        "-m",
        "pytest",
        "--nbval-lax",
        "--nbval-current-env",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        str(work),
        str(work),
    ]
    return subprocess.run(command, cwd=work).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kernel_lib",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="execute a platform's notebooks into outputs/<platform>/")
    run.add_argument("--platform", help="parameters/<platform>.yaml (default: detected)")
    run.add_argument("--only", help="comma-separated notebook names")
    run.add_argument("--out", help="report folder (default: outputs/<platform>)")
    run.add_argument(
        "-p",
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a parameter (value read as YAML); repeatable",
    )
    run.add_argument("--no-progress", action="store_true", help="no per-cell progress bar")
    run.set_defaults(func=cmd_run)

    platforms = sub.add_parser(
        "platforms", help="list parameter files and what this machine detects as"
    )
    platforms.set_defaults(func=cmd_platforms)

    bench = sub.add_parser("bench", help="run one topic's benchmark suite without notebooks")
    bench.add_argument("topic", choices=sorted(TOPICS))
    bench.add_argument("--platform", help="parameters/<platform>.yaml (default: detected)")
    bench.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE")
    bench.add_argument("--json", action="store_true", help="print the records as a JSON list")
    bench.set_defaults(func=cmd_bench)

    check = sub.add_parser(
        "check", help="re-execute outputs/<platform>/ and compare tagged outputs"
    )
    check.add_argument("--platform", help="report folder under outputs/ (default: detected)")
    check.set_defaults(func=cmd_check)

    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ParameterError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
