"""`python -m kernel_lib cloud {launch,status,collect,down}`: the workbook on every platform's cloud
VM through SkyPilot managed jobs, and their reports back into outputs/. Exit codes as the other
commands: 0 done, 1 a platform failed to launch, 2 bad input or SkyPilot not set up (nothing ran)."""

from __future__ import annotations

import argparse
from pathlib import Path

from kernel_lib import OUTPUTS
from kernel_lib.cloud import jobs, tasks
from kernel_lib.params import ParameterError


def _names(value: str | None) -> list[str] | None:
    return [n.strip() for n in value.split(",") if n.strip()] if value else None


def _resources(config: dict) -> str:
    """One line: what the task asks SkyPilot for."""
    res = config["resources"]
    what = res.get("accelerators") or f"a CPU VM with {res['cpus']} vCPUs"
    if config.get("num_nodes", 1) > 1:
        what = f"{config['num_nodes']} nodes of {what}"
    where = res.get("infra", "the cheapest enabled cloud")
    mount = config.get("file_mounts", {}).get(tasks.RESULTS, {}).get("source", "no bucket")
    return (
        f"{what} on {where}, {res['disk_size']} GB disk, "
        f"{'spot' if res['use_spot'] else 'on-demand'}, SkyPilot's default image for it "
        f"(GPU drivers / TPU runtime); reports -> {mount}"
    )


def cmd_launch(args) -> int:
    platforms = _names(args.platforms)
    if not platforms:
        raise ParameterError("--platforms needs at least one platform name")
    if args.repeat < 1:
        raise ParameterError(f"--repeat must be an integer >= 1, not {args.repeat}")
    if not args.bucket and not args.dry_run:
        raise ParameterError(
            "--bucket gs://... or s3://... is required: a managed job's VM is deleted when it "
            "ends, and the bucket is where its report stays"
        )
    configs = {
        p: tasks.task_config(
            p,
            bucket=args.bucket,
            repeat=args.repeat,
            spot=args.spot,
            only=_names(args.only),
            plugins=args.plugin,
        )
        for p in platforms
    }
    if args.dry_run:
        for index, (platform, config) in enumerate(configs.items()):
            if index:
                print("---")  # one YAML document per platform
            print(f"# {platform}: {_resources(config)}")
            print(tasks.task_yaml(config))
        return 0
    outcomes = jobs.launch(configs)
    for platform, outcome in outcomes.items():
        print(f"{platform}: {outcome}")
    print("then: python -m kernel_lib cloud status; cloud collect " + args.bucket)
    return 1 if any(o.startswith("failed") for o in outcomes.values()) else 0


def _print_jobs(lines: dict[str, str], none: str) -> int:
    """One line per platform's job, or `none` when there is none."""
    for platform, line in lines.items():
        print(f"{platform}: {line}")
    if not lines:
        print(none)
    return 0


def cmd_status(args) -> int:
    return _print_jobs(jobs.status(_names(args.platforms)), "no kernel-workbook managed jobs")


def cmd_collect(args) -> int:
    from kernel_lib.cloud.collect import collect  # SkyPilot: optional

    indexes, gallery = collect(args.source, Path(args.out), _names(args.platforms))
    for index in indexes:
        print(f"report: {index}")
    print(f"gallery: {gallery}")
    return 0


def cmd_down(args) -> int:
    lines = jobs.down(_names(args.platforms))
    return _print_jobs(lines, "no unfinished kernel-workbook managed jobs")


def add_parser(sub: argparse._SubParsersAction) -> None:
    """The `cloud` subcommand and its actions, on `python -m kernel_lib`'s subparsers."""
    cloud = sub.add_parser(
        "cloud", help="run platforms on cloud VMs (SkyPilot): launch, status, collect, down"
    )
    actions = cloud.add_subparsers(dest="action", required=True)
    platforms_help = "comma-separated platform names (parameters/<platform>.yaml)"

    launch = actions.add_parser("launch", help="one SkyPilot managed job per platform")
    launch.add_argument("--platforms", required=True, help=platforms_help)
    launch.add_argument(
        "--bucket",
        help="gs://BUCKET[/PATH] or s3://BUCKET[/PATH] (existing) that each job copies its "
        "outputs/<platform>/ into (required unless --dry-run)",
    )
    launch.add_argument("--repeat", type=int, default=1, metavar="N", help="as `run --repeat`")
    launch.add_argument("--only", help="comma-separated notebook names, as `run --only`")
    launch.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="a .py file in this checkout or a module name, timed beside ours (docs/plugins.md); "
        "repeatable",
    )
    launch.add_argument(
        "--spot",
        action="store_true",
        help="spot/preemptible VMs: cheaper; a preempted job is restarted by SkyPilot",
    )
    launch.add_argument(
        "--dry-run",
        action="store_true",
        help="print each task (YAML) and the resources it asks for; no network, no SkyPilot",
    )
    launch.set_defaults(func=cmd_launch)

    status = actions.add_parser("status", help="the state of each platform's latest job")
    status.add_argument("--platforms", help=platforms_help + " (default: all)")
    status.set_defaults(func=cmd_status)

    collect = actions.add_parser(
        "collect",
        help="copy finished reports into outputs/<platform>/ (replacing only reports, each "
        "swapped in once complete) and rebuild the gallery",
    )
    collect.add_argument("source", help="the --bucket URL given to launch, or a local folder")
    collect.add_argument("--out", default=str(OUTPUTS), help="default: outputs/")
    collect.add_argument("--platforms", help=platforms_help + " (default: all found)")
    collect.set_defaults(func=cmd_collect)

    down = actions.add_parser("down", help="cancel the unfinished jobs")
    down.add_argument("--platforms", help=platforms_help + " (default: all)")
    down.set_defaults(func=cmd_down)
