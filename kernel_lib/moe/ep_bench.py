"""The MoE notebook's expert-parallel section (`SUITE.run("expert_parallel", ctx)`): per world
size W of moe_ep_world_sizes, one torchrun run of kernel_lib.moe.ep_run over W ranks, its
rendezvous on a port of its own (`--standalone`: two runs never collide), whose records rank 0
writes into a folder under the results folder and this process reads back
(results.files.read_results).

What each run measures (ep_work, ep_run): per case (the throughput shape, each of moe_ep_presets)
and mode, the expert-parallel layer, the same dispatch on one rank with every core (the
baseline: ratio_vs_baseline = single rank / expert parallel) and the bare all-to-all of the
layer's rows, `all_to_all_raw`, in one interleaved compare on rank 0; a record per phase of the
layer's forward (rank 0's timers, median over the timed calls; in forward + backward the rest of
the layer's time is its backward); metrics.bytes_sent_per_token (the token rows that leave their
rank, out and back, per token) and, on the layer's record, metrics.all_to_all_fraction_of_transport
= the raw all-to-all (out and back, the same splits) / the layer's `all-to-all out` + `all-to-all
back` (which also exchange the split sizes), each per call on the rank that took least: the last
to arrive waits for no other rank's experts, so its time is the transport's.

W = 0 is every device: every GPU (of every node: NODES_ENV), or every core of a CPU host; a GPU
host with one device gets `skipped` records naming the command that runs it with more. A run
whose rank raises, dies or outlasts moe_ep_timeout_s has `failed` records with the rank's error
line (a killed rank: torchrun's account of it), and no process of it survives: torchrun starts in
a session of its own and each rank in one of torchrun's, whose pid the rank writes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from kernel_lib import ROOT
from kernel_lib import records as rec
from kernel_lib.config import short
from kernel_lib.interrupts import deferred
from kernel_lib.moe.bench import TOPIC
from kernel_lib.moe.config import MoEBenchConfig
from kernel_lib.moe.ep_run import RESULTS, SPEC
from kernel_lib.moe.ep_work import NAMES, ep_cases, modes
from kernel_lib.moe.presets import preset
from kernel_lib.platform import DeviceFacts, threads_each
from kernel_lib.records import RESULTS_SUFFIX, Record, resolve_results_dir, run_context
from kernel_lib.results.files import read_results

# A run over several nodes (kernel_lib.cloud.tasks, ep_nodes): how many, this one's rank, and
# torchrun's rendezvous on node 0 (HOST:PORT); unset, one node.
NODES_ENV = "KERNEL_WORKBOOK_EP_NODES"
NODE_RANK_ENV = "KERNEL_WORKBOOK_EP_NODE_RANK"
RENDEZVOUS_ENV = "KERNEL_WORKBOOK_EP_RENDEZVOUS"
JOIN_TIMEOUT_S = 3600  # another node waits this long for node 0's next run (its notebook runs)
# torchrun's default port, on node 0 of a cluster running one run at a time (a single node's run
# takes a free port of its own)
RENDEZVOUS_PORT = 29500
GRACE_S = 5.0  # torchrun's time to stop its ranks after SIGTERM, before every one gets SIGKILL
LOG = "torchrun.log"
TUPLES = ("flags", "samples_ms", "round_medians_ms")  # Record fields JSON holds as lists
_FAILURE = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank[^\n]*\n\s*exitcode\s*:\s*(-?\d+)")


def nodes(env=os.environ) -> int:
    return int(env.get(NODES_ENV) or 1)


def torchrun_command(per_node: int, run_dir: Path, env=os.environ) -> list[str]:
    """torchrun of `per_node` ranks of ep_run on this node: its own rendezvous (`--standalone`),
    or node 0's over several nodes (NODES_ENV, NODE_RANK_ENV, RENDEZVOUS_ENV)."""
    if nodes(env) > 1:
        where = [
            "--nnodes", str(nodes(env)), "--node-rank", env.get(NODE_RANK_ENV, "0"),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", env[RENDEZVOUS_ENV],
            "--rdzv-conf", f"join_timeout={JOIN_TIMEOUT_S}",
        ]  # fmt: skip
    else:
        where = ["--standalone", "--nnodes", "1"]
    return [
        sys.executable, "-m", "torch.distributed.run", *where, "--nproc-per-node", str(per_node),
        "--max-restarts", "0", "-m", "kernel_lib.moe.ep_run", str(run_dir),
    ]  # fmt: skip


def world_size(requested: int, facts: DeviceFacts) -> tuple[int, str | None]:
    """(W, why it cannot run here, or None): 0 is every core of a CPU host, every GPU of them
    all on GPUs (a run over several nodes takes every GPU of every node)."""
    if facts.backend == "cpu":
        return requested or len(os.sched_getaffinity(0)), None
    if facts.backend not in ("nvidia", "amd"):
        why = "expert parallelism runs over CPUs (gloo) or CUDA/ROCm GPUs (NCCL)"
        return requested, f"{why}, not {facts.backend}"
    devices = torch.cuda.device_count() * nodes()
    world = requested or devices
    if devices < 2:
        platform = run_context()[1]
        return world, (
            "one device: expert parallelism needs two or more; on a host with 8 GPUs: "
            f"python -m kernel_lib run --platform {platform} -p moe_ep_world_sizes=[8]"
        )
    if world > devices or (nodes() > 1 and world != devices):
        return world, (
            f"W={world} on {devices} GPUs ({nodes()} node(s)): a run over several nodes takes "
            "them all (moe_ep_world_sizes=[0])"
            if nodes() > 1
            else f"W={world} needs {world} GPUs, this host has {devices}"
        )
    return world, None


def _indivisible(cfg: MoEBenchConfig, world: int) -> str | None:
    """Why W (every device, resolved here) does not divide a case's experts, or None."""
    counts = {"moe_experts": cfg.experts}
    counts |= {f"moe_ep_presets {n}": preset(n).num_experts for n in cfg.ep_presets}
    for name, experts in counts.items():
        if experts % world:
            return f"{name}: {experts} experts are not divisible by W={world} (every device)"
    return None


def _all(cfg: MoEBenchConfig, facts: DeviceFacts, world: int, make, reason: str) -> list:
    """Every record the run would make (`make`: records.skipped or records.failed)."""
    return [
        make(
            TOPIC,
            c.case,
            name,
            reason,
            facts=facts,
            dtype=cfg.dtype,
            shape=c.shape | {"W": world},
            mode="forward_backward" if b else "forward",
        )  # fmt: skip
        for c in ep_cases(cfg)
        for b in modes(cfg)
        for name in NAMES
    ]


def _signal(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass


def _rank_groups(run_dir: Path) -> list[int]:
    """The process groups (sessions: torchrun starts each rank in one) of the ranks that wrote
    their pid and run still, by their command line naming `run_dir`: never a pid reused."""
    out = []
    for path in run_dir.glob("rank*.pid"):
        pid = path.read_text().strip()
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if str(run_dir).encode() in command:
            out.append(int(pid))
    return out


def _stop(proc: subprocess.Popen, run_dir: Path) -> None:
    """SIGTERM to torchrun's group (it stops its ranks), then SIGKILL to it and every rank."""
    if proc.poll() is None:
        _signal(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            pass
    _signal(proc.pid, signal.SIGKILL)
    for pgid in _rank_groups(run_dir):
        _signal(pgid, signal.SIGKILL)
    proc.wait()


def run_ranks(command: list[str], timeout_s: float, run_dir: Path, env=None) -> int | None:
    """`command`'s exit code (None: it ran past `timeout_s`), its output in RUN_DIR/LOG; started
    in a session of its own, which on return, timeout or interrupt is stopped whole (`_stop`)."""
    with open(run_dir / LOG, "wb") as log:
        proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
            env=env, start_new_session=True,
        )  # fmt: skip
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None
        finally:
            with deferred():
                _stop(proc, run_dir)


def _exit_text(code: int) -> str:
    if code < 0 and -code in signal.valid_signals():
        return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


def failure(code: int | None, run_dir: Path, timeout_s: float) -> str:
    """One line: each failed rank (the first failure torchrun observed first) with its error
    line, or how it ended; a timeout; else torchrun's exit code and its last line."""
    errors = {
        int(p.name[4:-6]): p.read_text().strip() for p in sorted(run_dir.glob("rank*.error"))
    }
    log = (run_dir / LOG).read_text(errors="replace") if (run_dir / LOG).exists() else ""
    root = log.find("Root Cause")
    ended: dict[int, int] = {}  # rank -> its exit code, the root cause first
    for rank, code_text in _FAILURE.findall(log[root:] if root >= 0 else "") + _FAILURE.findall(
        log
    ):
        ended.setdefault(int(rank), int(code_text))
    parts = []
    if code is None:
        parts.append(f"timed out after {timeout_s:g} s (moe_ep_timeout_s), every rank killed")
    parts += [f"rank {r}: {errors.pop(r, None) or _exit_text(c)}" for r, c in ended.items()]
    parts += [f"rank {r}: {line}" for r, line in errors.items()]
    if not parts:
        lines = [line for line in log.splitlines() if line.strip()]
        parts = [f"torchrun exit code {code}" + (f": {lines[-1]}" if lines else "")]
        parts = parts if code else ["torchrun ended, but rank 0 wrote no records"]
    return short("; ".join(parts), 400)


def _record(row: dict) -> Record:
    return Record(**{**row, **{k: tuple(row[k]) for k in TUPLES}})


def _run(cfg: MoEBenchConfig, facts: DeviceFacts, world: int, *, headline: bool) -> list:
    """One torchrun of W ranks in a folder under the results folder: rank 0's records, or
    every record `failed` with the one line that says why."""
    per_node = world // nodes() if facts.backend != "cpu" else world
    base = resolve_results_dir()
    base.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".expert_parallel-", dir=base) as folder:
        run_dir = Path(folder)
        spec = {"config": dataclasses.asdict(cfg), "headline": headline}
        (run_dir / SPEC).write_text(json.dumps(spec))
        env = {**os.environ, "OMP_NUM_THREADS": str(threads_each(per_node))}
        code = run_ranks(torchrun_command(per_node, run_dir), cfg.ep_timeout_s, run_dir, env)
        results = run_dir / f"{RESULTS}{RESULTS_SUFFIX}"
        if code == 0 and results.exists():
            return [_record(row) for row in read_results(results)]
        return _all(cfg, facts, world, rec.failed, failure(code, run_dir, cfg.ep_timeout_s))


def section_expert_parallel(cfg: MoEBenchConfig, facts: DeviceFacts) -> list[Record]:
    """Each world size of moe_ep_world_sizes (resolved, each once): its run's records, or all
    of them skipped with why it cannot run here. The first one's forward of the throughput
    shape is the headline `moe.expert_parallel_vs_single`."""
    out, ran = [], set()
    for index, requested in enumerate(cfg.ep_world_sizes):
        world, why = world_size(requested, facts)
        if world in ran:
            continue
        ran.add(world)
        why = why or _indivisible(cfg, world)
        if why:
            out += _all(cfg, facts, world, rec.skipped, why)
        else:
            out += _run(cfg, facts, world, headline=index == 0)
    return out
