"""The nodes of a multi-node expert-parallel run (a cloud task of several nodes,
kernel_lib.cloud.tasks): node 0 runs the report, whose moe notebook starts each expert-parallel
run (ep_bench) with torchrun's rendezvous on node 0; `python -m kernel_lib.moe.ep_nodes join` on
every other node joins each of those runs with all its GPUs, until node 0's `python -m
kernel_lib.moe.ep_nodes release` (after its report) ends them, or until no run of node 0 came
within ep_bench.JOIN_TIMEOUT_S. The nodes, this node's rank and the rendezvous come from
ep_bench's NODES_ENV, NODE_RANK_ENV and RENDEZVOUS_ENV.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from kernel_lib import ROOT
from kernel_lib.moe.ep_bench import torchrun_command
from kernel_lib.moe.ep_run import RELEASED, SPEC


def _torchrun(run_dir: Path) -> int:
    command = torchrun_command(torch.cuda.device_count(), run_dir)
    return subprocess.run(command, stdin=subprocess.DEVNULL, cwd=ROOT).returncode


def join() -> int:
    """Join node 0's runs one after another: 0 once released; a run in which no rank started
    (no rendezvous with node 0) ends it with torchrun's exit code."""
    while True:
        with tempfile.TemporaryDirectory(prefix="expert_parallel-") as folder:
            run_dir = Path(folder)
            code = _torchrun(run_dir)
            if (run_dir / RELEASED).exists():
                return 0
            if not any(run_dir.glob("rank*.pid")):
                return code or 1


def release() -> int:
    """Node 0: one last run whose spec only releases the other nodes."""
    with tempfile.TemporaryDirectory(prefix="expert_parallel-") as folder:
        run_dir = Path(folder)
        (run_dir / SPEC).write_text(json.dumps({"release": True}))
        return _torchrun(run_dir)


def main(argv: list[str] | None = None) -> int:
    actions = {"join": join, "release": release}
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in actions:
        print("usage: python -m kernel_lib.moe.ep_nodes join|release", file=sys.stderr)
        return 2
    return actions[args[0]]()


if __name__ == "__main__":
    sys.exit(main())
