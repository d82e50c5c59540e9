"""One SkyPilot task per platform, from one template: the platform's accelerator, its set-up and
`make report PLATFORM=... REPEAT=...`, whose report is copied into a bucket mounted at /results.

Plain data (dicts and YAML text): nothing here imports SkyPilot, so `--dry-run` works without it.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import yaml

from kernel_lib.config import short_repr
from kernel_lib.moe.ep_bench import NODE_RANK_ENV, NODES_ENV, RENDEZVOUS_ENV, RENDEZVOUS_PORT
from kernel_lib.params import ROOT, ParameterError, load_plan
from kernel_lib.plugins.loading import is_path, resolved

RESULTS = "/results"  # where the bucket is mounted on the VM
BUCKET_SCHEMES = ("gs://", "s3://")
# A bucket URL goes into shell lines that SkyPilot builds without quoting it (its mount and sync
# commands): a scheme above, a bucket name (GCS and S3: lowercase letters, digits, '.', '_', '-'),
# a path of letters, digits, '.', '_', '-' and '/', and nothing a shell reads specially.
BUCKET_URL = re.compile(
    "(?:" + "|".join(map(re.escape, BUCKET_SCHEMES)) + r")[a-z0-9](?:[a-z0-9._-]{0,220}[a-z0-9])?"
    r"(?:/[A-Za-z0-9._/-]*)?"
)
JOB_PREFIX = "kernel-workbook-"  # managed job name: JOB_PREFIX + platform
# A platform name goes into a job name, the VM's environment and make's command line (whose
# recipes put $(PLATFORM) into shell lines unquoted): nothing a shell or make reads specially.
PLATFORM_NAME = re.compile(r"[A-Za-z0-9._-]+")


@dataclass(frozen=True)
class CloudTarget:
    """What a platform asks SkyPilot for."""

    accelerator: str | None  # SkyPilot's accelerator name and count; None: a CPU VM
    cloud: str | None = None  # pinned where the platform is one cloud's offer; None: cheapest
    setup: str = "setup"  # the make target that builds the platform's environment
    accelerator_args: dict | None = None
    torch_index: str | None = None  # pip index of the torch build (ROCm: not PyPI's CUDA build)
    disk_gb: int = 100  # the CUDA build of torch and the Inductor cache need tens of GB
    num_nodes: int = 1  # more: node 0 runs the report, every node's GPUs its expert parallelism


# The accelerators of parameters/<platform>.yaml, by SkyPilot's names. A platform not listed here
# nor in MANUAL runs on a CPU VM (cpu, ci, xla-cpu).
TARGETS = {
    "gcp-l4": CloudTarget("L4:1", cloud="gcp"),  # g2-standard-4
    "aws-a10g": CloudTarget("A10G:1", cloud="aws"),  # g5.xlarge
    "h100": CloudTarget("H100:1"),  # GCP a3-highgpu-1g, or another cloud's 1-GPU H100 VM
    "h200": CloudTarget("H200:1"),  # clouds that rent one H200 (GCP and AWS rent 8 per VM)
    # an example of several nodes: the moe notebook's expert parallelism over 2 x 8 GPUs
    "h100-2x8": CloudTarget("H100:8", num_nodes=2),
    # RunPod, or a Kubernetes cluster that has them; torch from PyTorch's ROCm index
    "amd-mi300x": CloudTarget("MI300X:1", torch_index="https://download.pytorch.org/whl/rocm6.4"),
    "gcp-tpu-v5e": CloudTarget(
        "tpu-v5litepod-8",
        cloud="gcp",
        setup="xla-setup",
        accelerator_args={"runtime_version": "v2-alpha-tpuv5-lite"},
    ),
}
CPU_VM = CloudTarget(None)
# Platforms no SkyPilot catalog offers: the reason, and what to do instead.
MANUAL = {
    "intel-max1550": "no SkyPilot catalog offers the Intel Max 1550: run it by hand on a host "
    "that has one and copy its report into the bucket (README 'Run on every cloud platform')",
}

# The README's set-up: make and the venv module where the image lacks them, torch from its own
# index where PyPI's build is not the platform's (ROCm), then `make setup` (`make xla-setup` on TPU).
SETUP = """\
set -e
if ! command -v make >/dev/null || ! python3 -c 'import ensurepip' 2>/dev/null; then
  SUDO=$(command -v sudo || true)  # containers (RunPod, Kubernetes) run as root without sudo
  $SUDO apt-get update -q && $SUDO apt-get install -y -q make python3-venv
fi
if [ -n "$TORCH_INDEX_URL" ]; then
  python3 -m venv .venv
  .venv/bin/pip install -q "$(grep -o '^torch==[0-9.]*' requirements.txt)" --index-url "$TORCH_INDEX_URL"
fi
make {setup} PLATFORM="$PLATFORM"
"""
# The report is copied into the bucket even when a notebook failed (its report says which);
# the job's exit status is make's. REPLACE: the checkout's committed report of this platform (in
# git, made on another machine or with other runs) gives way to the job's.
RUN = """\
make report PLATFORM="$PLATFORM" REPEAT="$REPEAT" ONLY="$ONLY" PLUGINS="$PLUGINS" REPLACE=1
status=$?
if [ -d "outputs/$PLATFORM" ]; then
  mkdir -p "$RESULTS/$PLATFORM" && cp -r "outputs/$PLATFORM/." "$RESULTS/$PLATFORM/"
fi
exit $status
"""


# A task of several nodes (SkyPilot runs `run` on each): node 0 runs the report, and each
# expert-parallel run of its moe notebook spans every node through torchrun's rendezvous on node 0
# (kernel_lib/moe/ep_bench.py); the other nodes join those runs until node 0 releases them
# (kernel_lib/moe/ep_nodes.py), once its report is done, failed or not.
NODES = f"""\
export {NODES_ENV}="$SKYPILOT_NUM_NODES" {NODE_RANK_ENV}="$SKYPILOT_NODE_RANK"
export {RENDEZVOUS_ENV}="$(echo "$SKYPILOT_NODE_IPS" | head -n1):{RENDEZVOUS_PORT}"
if [ "$SKYPILOT_NODE_RANK" != 0 ]; then
  exec .venv/bin/python -m kernel_lib.moe.ep_nodes join
fi
trap '.venv/bin/python -m kernel_lib.moe.ep_nodes release' EXIT
"""


def target(platform: str) -> CloudTarget:
    """The resources `platform` asks for; ParameterError for an unknown or manual-only one."""
    if not PLATFORM_NAME.fullmatch(platform):
        raise ParameterError(
            f"platform {short_repr(platform)}: a cloud platform's name is letters, digits, "
            "'.', '_' and '-' only (rename its parameter file)"
        )
    if platform in MANUAL:
        raise ParameterError(f"platform {platform!r}: {MANUAL[platform]}")
    load_plan(platform)  # an unknown platform, or a bad parameter file, fails here
    return TARGETS.get(platform, CPU_VM)


def check_bucket(bucket: str, option: str = "--bucket") -> str:
    """`bucket` without a trailing '/', when it is a bucket URL (`BUCKET_URL`); ParameterError
    naming `option` (the parameter that gave it) otherwise."""
    if not BUCKET_URL.fullmatch(bucket):
        raise ParameterError(
            f"{option} {short_repr(bucket)} must be a bucket URL "
            f"{' or '.join(s + 'BUCKET[/PATH]' for s in BUCKET_SCHEMES)}: a bucket name of "
            "lowercase letters, digits, '.', '_' and '-', a path of letters, digits, '.', '_', "
            "'-' and '/'"
        )
    return bucket.rstrip("/")


def carried(plugins: list[str]) -> list[str]:
    """`cloud launch --plugin`s as the job's checkout holds them: a .py path inside this checkout
    (the job's workdir) relative to it, a module name as it is; ParameterError naming a path
    that is not there or lies outside the checkout (imported on the VM, not here)."""
    out = []
    for spec in resolved(plugins):
        if is_path(spec):
            path = Path(spec)
            if not path.is_file() or not path.is_relative_to(ROOT):
                raise ParameterError(
                    f"--plugin {short_repr(spec)}: a .py file inside this checkout (the job's "
                    "workdir), or a module name"
                )
            spec = path.relative_to(ROOT).as_posix()
        out.append(spec)
    return out


def task_config(
    platform: str,
    *,
    bucket: str | None = None,
    repeat: int = 1,
    spot: bool = False,
    only: list[str] | None = None,
    plugins: list[str] = (),
) -> dict:
    """The SkyPilot task (as its YAML mapping) that runs `platform`'s report and copies it into
    `bucket` (gs:// or s3://; None: no mount, for --dry-run and local runs), timing `plugins`
    (`carried`) beside ours."""
    spec = target(platform)
    if only:
        load_plan(platform, only=only)  # names a notebook the platform does not run: fails here
    resources = {"disk_size": spec.disk_gb, "use_spot": spot}
    if spec.accelerator:
        resources["accelerators"] = spec.accelerator
    else:
        resources["cpus"] = "8+"
    if spec.cloud:
        resources["infra"] = spec.cloud
    if spec.accelerator_args:
        resources["accelerator_args"] = spec.accelerator_args
    config = {
        "name": JOB_PREFIX + platform,
        "resources": resources,
        **({"num_nodes": spec.num_nodes} if spec.num_nodes > 1 else {}),
        "workdir": str(ROOT),
        "envs": {
            "PLATFORM": platform,
            "REPEAT": str(repeat),
            "ONLY": ",".join(only or []),
            "PLUGINS": " ".join(carried(list(plugins))),
            "RESULTS": RESULTS,
            "TORCH_INDEX_URL": spec.torch_index or "",
        },
        "setup": SETUP.format(setup=shlex.quote(spec.setup)),
        "run": (NODES if spec.num_nodes > 1 else "") + RUN,
    }
    if bucket:
        config["file_mounts"] = {RESULTS: {"source": check_bucket(bucket), "mode": "MOUNT"}}
    return config


def _literal_blocks(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(str, _literal_blocks)


def task_yaml(config: dict) -> str:
    """The task as SkyPilot YAML (scripts as literal blocks, keys in the order built)."""
    return yaml.dump(config, Dumper=_Dumper, sort_keys=False, width=99)
