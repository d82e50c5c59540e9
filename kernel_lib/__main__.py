"""`python -m kernel_lib {run,report,platforms,bench,check,compare,ab,sensitivity,export,params,
cloud,device-run,history,regressions,profile}`: the functions the Makefile calls, the tools that compare
and export reports, the cloud fan-out (kernel_lib.cloud), the recipe for a GPU host without a
package index (kernel_lib.device_run) and the results store of every run (kernel_lib.results.store).

Exit codes: 0 everything ran (ok or skipped), 1 a notebook or benchmark failed or the disk did
(one line: `error: ...`), 2 bad input (nothing ran), 130 interrupted (Ctrl-C).
`compare`: 0 nothing slower or lost, 1 something slower or lost, 2 bad input; `ab` likewise (1
also when a run failed), 130 interrupted. SIGTERM stops a command as Ctrl-C does (130).
"""

from __future__ import annotations

import sys

try:  # a Ctrl-C while importing (torch: seconds) is the usual one line, not a traceback
    import argparse
    import importlib
    import json
    import os
    import subprocess
    from pathlib import Path

    from kernel_lib import OUTPUTS, allocator
    from kernel_lib.interrupts import terminate_as_interrupt
    from kernel_lib.params import (
        OTHER_DEVICE,
        ParameterError,
        list_platforms,
        load_plan,
        notebook_defaults,
        parse_override,
    )  # fmt: skip
    from kernel_lib.platform import detect_platform, device_facts
    from kernel_lib.profiling.pending import notebook_params, profile_mode
    from kernel_lib.results.folders import RUN_FILE
except KeyboardInterrupt:
    if __name__ != "__main__":
        raise
    print("interrupted", file=sys.stderr)
    sys.exit(130)

# topic -> (module with `run_suite(params)`, notebook whose parameters it takes; None: the platform's backend_*)
TOPICS = {
    "device": ("kernel_lib.backends.suite", None),
    "moe": ("kernel_lib.moe.suite", "moe"),
    "fp8": ("kernel_lib.fp8.suite", "fp8"),
    "attention": ("kernel_lib.attention.suite", "flex_attention"),
}


def _platform(name: str | None) -> str:
    if name:
        return name
    try:
        return detect_platform()
    except ValueError as err:  # no parameter file matches this device
        raise ParameterError(str(err)) from None


MAX_REPEAT = 50  # runs of the whole plan: more is a typo, not a measurement


def _repeat(value: str) -> int:
    """--repeat N: an integer from 1 to MAX_REPEAT (a ParameterError, exit 2, otherwise)."""
    try:
        repeat = int(value)
    except ValueError:
        repeat = 0
    if not 1 <= repeat <= MAX_REPEAT or str(value).strip() != str(repeat):
        raise ParameterError(f"--repeat must be an integer from 1 to {MAX_REPEAT}, not {value!r}")
    return repeat


def cmd_run(args) -> int:
    from kernel_lib.run.execute import FAILED_STATUSES  # CLI start-up
    from kernel_lib.run.runner import refuse_reference, run_repeated  # CLI start-up

    repeat = _repeat(args.repeat)
    overrides = dict(parse_override(p) for p in notebook_params(args.param))
    only = (
        [n.strip() for n in args.only.split(",") if n.strip()] if args.only is not None else None
    )
    platform = _platform(args.platform)
    out = Path(args.out) if args.out else OUTPUTS / platform
    refuse_reference(out, platform, args.param, args.nbval_reference)
    plan = load_plan(
        platform, overrides=overrides, only=only, here=True, other_device=args.other_device
    )
    results = run_repeated(
        plan,
        out,
        repeat,
        progress=not args.no_progress,
        replace=args.replace or args.nbval_reference,
    )
    print(f"report: {out / 'index.html'}")
    for r in results:
        run = f" [{r.run_id.split('-', 2)[-1]}]" if repeat > 1 else ""  # ...-<pid>-run-<i>
        print(f"  {r.notebook}{run}: {r.status}{': ' + r.detail if r.detail else ''}")
    return 1 if any(r.status in FAILED_STATUSES for r in results) else 0


def cmd_report(args) -> int:
    from kernel_lib.report.gallery import build_gallery, check_gallery  # CLI start-up: matplotlib
    from kernel_lib.report.pages import rebuild_reports  # CLI start-up

    dirs = [Path(d) for d in args.dirs]
    for d in dirs:
        if not (d / RUN_FILE).exists():
            raise ParameterError(f"{d} is not a report folder (no {RUN_FILE})")
    if args.gallery:
        galleries = [Path(args.gallery)]
    elif not dirs:
        galleries = [OUTPUTS]
    else:  # the folders' own outputs/ tree, if they are in one
        galleries = list(dict.fromkeys(d.resolve().parent for d in dirs))
        galleries = [g for g in galleries if g.name == "outputs"]
    for gallery in galleries:  # before any report is rebuilt
        check_gallery(gallery, "--gallery" if args.gallery else "gallery:")
    # no DIR: the reports of the gallery's folder (--gallery DIR's, else outputs/)
    reports = rebuild_reports(dirs or None, outputs=galleries[0] if args.gallery else OUTPUTS)
    for report in reports:
        print(f"report: {report.index}")
    for gallery in galleries:  # each report read once: the gallery takes them as read
        print(f"gallery: {build_gallery(gallery, reports)}")
    return 0


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


def _bench_under_allocator(args, plan) -> int:
    """The same `bench` in a child process started as the runner starts each notebook kernel: the
    plan's allocator (its variables are read at process start) and this checkout's code, so
    `bench` and the notebooks time under one malloc."""
    from kernel_lib.run.environment import kernel_allocator, kernel_environment  # CLI start-up

    command = [
        sys.executable,
        "-m",
        "kernel_lib",
        "bench",
        args.topic,
        "--platform",
        plan.platform,
    ]
    command += [arg for p in args.param for arg in ("-p", p)] + (["--json"] if args.json else [])
    command += [arg for p in args.plugin for arg in ("--plugin", p)]
    command += [OTHER_DEVICE] if args.other_device else []
    with kernel_environment(kernel_allocator(plan)):
        return subprocess.run(command).returncode


def cmd_bench(args) -> int:
    from kernel_lib.records import stamp, summary_table, to_dicts  # CLI start-up

    module_name, notebook = TOPICS[args.topic]
    overrides = dict(parse_override(p) for p in notebook_params(args.param))
    if args.plugin:
        overrides["plugins"] = [*overrides.get("plugins", []), *args.plugin]
    plan = load_plan(
        _platform(args.platform),
        overrides=overrides,
        here=True,
        other_device=args.other_device,
    )
    if notebook is None:
        notebook = next((nb for nb in plan.notebooks if nb.startswith("backend_")), None)
    if notebook not in plan.notebooks:
        raise ParameterError(f"platform {plan.platform!r} does not run the {args.topic} notebook")
    if os.environ.get(allocator.ENV) != plan.allocator:
        return _bench_under_allocator(args, plan)
    params = {**notebook_defaults(notebook), **plan.parameters_for(notebook)}
    records = importlib.import_module(module_name).run_suite(params, progress=not args.json)
    records = stamp(records, platform=plan.platform)
    if args.json:
        json.dump(to_dicts(records), sys.stdout, indent=1)
        print()
    else:
        print(summary_table(records).to_string())
    return 1 if any(r.status in ("failed", "wrong") for r in records) else 0


def cmd_check(args) -> int:
    from kernel_lib.run.nbval import check  # CLI start-up

    profile_mode()  # the re-executed notebooks honour it
    return check(_platform(args.platform), args.only)


def cmd_ab(args) -> int:
    from kernel_lib.ab import ab  # CLI start-up: only what the command needs

    options = {k: getattr(args, k) for k in ("runs", "only", "factor", "out", "slow_b", "resume")}
    platform = _platform(args.platform)
    return ab(args.rev_a, args.rev_b, platform=platform, params=args.param, **options)


def cmd_export(args) -> int:
    from kernel_lib.export import cli  # CLI start-up

    return cli(args)


def cmd_params(args) -> int:
    """Each notebook's parameters: type and default as it declares them, range and meaning from
    its config class (docs/parameters.md holds `params --markdown`)."""
    from kernel_lib.params import parameters_doc  # CLI start-up

    print(parameters_doc(args.notebooks, markdown=args.markdown))
    return 0


ERROR_CHARS = 300  # a printed error line is cut here (a long path list, a parser's message)


def _line(message) -> str:
    """`message` as one line of at most ERROR_CHARS characters."""
    text = " ".join(str(message).split())
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 1] + "…"


def _disk_error(err: OSError) -> str:
    """'PATH: reason' for an OSError that names its path, else its message."""
    paths = [str(p) for p in (err.filename, err.filename2) if p is not None]
    return f"{' -> '.join(paths)}: {err.strerror}" if paths and err.strerror else str(err)


OTHER_DEVICE_HELP = (
    "run a platform file written for another device on this machine (a dry run of its sizes, "
    "still checked against this device's memory; its records are stamped with its platform)"
)


def _parser() -> argparse.ArgumentParser:
    """The commands' parser (`compare` and `sensitivity` parse their own arguments)."""
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
    run.add_argument(
        "--repeat",
        default="1",
        metavar="N",
        help="run every notebook N times, each in a fresh kernel: OUT/run-1/ ... OUT/run-N/ "
        "and, in OUT/, the median over the runs and its spread (default 1: OUT/ as one run; "
        f"at most {MAX_REPEAT})",
    )
    run.add_argument(
        "--replace",
        action="store_true",
        help="replace the report in OUT whole (none of its notebooks carried into the new one), "
        "although it is another platform's or device's, or holds runs this one would drop (more "
        "runs than --repeat, or one run under --repeat N)",
    )
    run.add_argument(OTHER_DEVICE, action="store_true", help=OTHER_DEVICE_HELP)
    run.add_argument(
        "--nbval-reference",
        action="store_true",
        help="`make reference`: write the nbval reference set (outputs/reference), which "
        "nothing else writes",
    )
    run.set_defaults(func=cmd_run)

    report = sub.add_parser(
        "report",
        help="rebuild reports and the gallery from saved records (no notebook is run)",
    )
    report.add_argument(
        "dirs",
        nargs="*",
        metavar="DIR",
        help="report folders (default: every one under outputs/, or under --gallery DIR)",
    )
    report.add_argument(
        "--gallery",
        metavar="DIR",
        help="write DIR/index.html listing the report folders in DIR (default: outputs/, when "
        "the folders are under it); an index.html that is not a gallery is never replaced",
    )
    report.set_defaults(func=cmd_report)

    platforms = sub.add_parser(
        "platforms", help="list parameter files and what this machine detects as"
    )
    platforms.set_defaults(func=cmd_platforms)

    bench = sub.add_parser("bench", help="run one topic's benchmark suite without notebooks")
    bench.add_argument("topic", choices=sorted(TOPICS))
    bench.add_argument("--platform", help="parameters/<platform>.yaml (default: detected)")
    bench.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE")
    bench.add_argument("--json", action="store_true", help="print the records as a JSON list")
    bench.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="a module name or .py path whose @kernel functions are timed beside ours "
        "(docs/plugins.md); repeatable",
    )
    bench.add_argument(OTHER_DEVICE, action="store_true", help=OTHER_DEVICE_HELP)
    bench.set_defaults(func=cmd_bench)

    check = sub.add_parser(
        "check", help="re-execute outputs/<platform>/ and compare tagged outputs"
    )
    check.add_argument("--platform", help="report folder under outputs/ (default: detected)")
    check.add_argument("--only", help="comma-separated notebooks of the report (default: all)")
    check.set_defaults(func=cmd_check)

    # `compare A... -- B...` splits its own arguments at `--` (kernel_lib.compare.parse_args)
    sub.add_parser(
        "compare",
        help="compare report folders A... -- B... (see `compare --help`)",
        add_help=False,
    )
    ab = sub.add_parser(
        "ab",
        help="compare two git revisions, their runs interleaved (docs/revisions.md)",
        description="Run the plan --runs times for each revision, in turn (A B, B A, ...), each "
        "in its own git worktree, then compare them. Exit codes as `compare` (1 also when a run "
        "failed), 130 on Ctrl-C: the finished runs are kept and --resume continues.",
    )
    ab.add_argument("rev_a", metavar="REV_A", help="a git revision (before)")
    ab.add_argument("rev_b", metavar="REV_B", help="a git revision, or WORKTREE: the working tree")
    ab.add_argument("--runs", default="5", metavar="N", help="runs a side (default 5)")
    ab.add_argument("--platform", help="parameters/<platform>.yaml (default: detected)")
    ab.add_argument("--only", help="comma-separated notebook names")
    ab.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE")
    ab.add_argument(
        "--factor",
        metavar="F",
        help="compare's factor (default: from the noise floor at hand, else 1.1: compare --help)",
    )
    ab.add_argument("--out", help="folder of the runs (default .cache/ab/<A>-<B>-<platform>...)")
    ab.add_argument("--resume", action="store_true", help="continue the interrupted run in --out")
    ab.add_argument(
        "--slow-b",
        action="append",
        default=[],
        metavar="IMPL=FRACTION",
        help="TEST ONLY: side B's timed calls of implementation IMPL take 1 + FRACTION as long "
        "(repeatable: one per implementation)",
    )
    ab.set_defaults(func=cmd_ab)
    sub.add_parser(
        "sensitivity",
        help="how small a slowdown compare detects here: A/A and injected slowdowns (test only)",
        add_help=False,
    )
    export = sub.add_parser("export", help="write a report's timings for a benchmark dashboard")
    export.add_argument("--format", required=True, choices=["pytorch-v3", "bmf"])
    export.add_argument("dir", help="report folder")
    export.add_argument(
        "--out", help="file to write, never a report's own (default, or `-`: standard output)"
    )
    export.set_defaults(func=cmd_export)

    params = sub.add_parser("params", help="each notebook's parameters, ranges and meaning")
    params.add_argument("notebooks", nargs="*", help="notebook names (default: all)")
    params.add_argument("--markdown", action="store_true", help="markdown tables (docs/)")
    params.set_defaults(func=cmd_params)

    from kernel_lib.cloud.cli import add_parser as add_cloud_parser  # CLI start-up
    from kernel_lib.compare.history import add_parsers as add_history_parsers  # CLI start-up
    from kernel_lib.device_run.cli import add_parser as add_device_plan_parser  # CLI start-up
    from kernel_lib.profiling.command import add_parser as add_profile_parser  # CLI start-up

    add_cloud_parser(sub)
    add_device_plan_parser(sub)
    add_history_parsers(sub)
    add_profile_parser(sub)
    return parser


def _command(argv: list[str]) -> int:
    """The command `argv` names, run: its exit code."""
    if argv[:1] == ["compare"]:
        from kernel_lib.compare import cli as compare_cli  # CLI start-up

        return compare_cli(argv[1:])
    if argv[:1] == ["sensitivity"]:
        from kernel_lib.sensitivity import cli as sensitivity_cli  # CLI start-up

        profile_mode()  # its benchmark runs honour it
        return sensitivity_cli(argv[1:])
    args = _parser().parse_args(argv)
    return args.func(args)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        with terminate_as_interrupt():  # SIGTERM: Ctrl-C's stop, one line, exit 130
            return _command(argv)
    except ParameterError as err:
        print(f"error: {_line(err)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `... | head` stopped reading: nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as err:  # a read-only or full disk, a folder that cannot be replaced
        print(f"error: {_line(_disk_error(err))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as err:  # its message, if any, says what was left unchanged
        print(_line(f"interrupted{': ' if str(err) else ''}{err}"), file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
