"""The expert-parallel section's torchrun entry point: `python -m torch.distributed.run ... -m
kernel_lib.moe.ep_run RUN_DIR` (kernel_lib.moe.ep_bench builds the command and reads back what
rank 0 leaves in RUN_DIR).

Each rank takes its share of the host's cores as torch threads (at least one) and joins the group:
gloo on CPUs, NCCL on GPUs (LOCAL_RANK's GPU). Rank 0 reads RUN_DIR/spec.json (the notebook's MoE
config, whether to declare the headline) and broadcasts it, so the ranks of another node need no
file. Every rank builds the same works (ep_work.RankWork: each case of `ep_cases`, each mode) and
rank 0 drives: one interleaved `check_then_time` per work of its three paths, each call of which
first broadcasts a command (what to run, which work: `Channel`) that the other ranks serve in a
loop (`serve`), so every rank makes the same collective calls whatever repetitions
check_then_time chooses; the single rank's calls broadcast it too. A path of rank 0 that raises
ends the run (`Broken`), the ranks never out of step. Every rank times the layer's phases
(PhaseClock); after each compare rank 0 gathers them (LAPS) for the metrics and a record per
phase. Then the headline, the profiled pass (the others still serving), STOP, and the records
saved in RUN_DIR (`records.save_records`).

Every rank writes its pid to RUN_DIR/rank<r>.pid when it starts and its error line to
rank<r>.error when it raises. A spec {"release": true} only writes RUN_DIR/released on every
rank (ep_nodes: the other nodes of a multi-node run stop joining). TEST ONLY: TEST_KILL_ENV
"RANK:N" makes rank RANK kill itself with SIGKILL at its N-th command.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from kernel_lib import records as rec
from kernel_lib.checks import error_line
from kernel_lib.measure import MIN_ROUNDS, Candidate, Case, check_then_time
from kernel_lib.moe.bench import TOPIC, WARMUP
from kernel_lib.moe.candidates import BACKWARD_FLOPS, unsupported
from kernel_lib.moe.config import MoEBenchConfig
from kernel_lib.moe.ep_work import (
    EP,
    EP_STRATEGY,
    NAMES,
    PHASE_ORDER,
    RAW,
    SINGLE,
    PhaseClock,
    RankWork,
    all_cores,
    ep_cases,
    gathered,
    modes,
    phase_implementation,
)  # fmt: skip
from kernel_lib.platform import device_facts, threads_each
from kernel_lib.profiling.capture import profiled
from kernel_lib.profiling.pending import share

SPEC, RESULTS, RELEASED = "spec.json", "expert_parallel", "released"
HEADLINE = "moe.expert_parallel_vs_single"
TEST_KILL_ENV = "KERNEL_WORKBOOK_TEST_EP_KILL"
STOP, RUN_EP, RUN_SINGLE, RUN_RAW, CHECK_EP, CHECK_RAW, LAPS = range(7)
PHASE_METHOD = "perf_counter around the phase on rank 0 (CUDA events on a GPU), every timed call"
A2A = ("all-to-all out", "all-to-all back")
# Every call costs every rank, and the single rank's forward + backward ~0.65 s at the CPU
# notebook's shape: the fewest rounds whose order statistics give a 95 % interval.
EP_ROUNDS = MIN_ROUNDS


class Broken(BaseException):
    """A path of rank 0 raised (its error line): the ranks may be out of step, so the run ends.
    A BaseException, which check_then_time lets through: it goes on past an Exception."""


class Channel:
    """Rank 0's commands to the other ranks: (command, work index), two int64s broadcast."""

    def __init__(self, device: torch.device, rank: int):
        self.buffer = torch.zeros(2, dtype=torch.int64, device=device)
        self.count = 0
        target, _, calls = os.environ.get(TEST_KILL_ENV, "").partition(":")
        self.kill_at = int(calls) if target and int(target) == rank else None

    def order(self, command: int, index: int = 0) -> None:
        self.buffer.copy_(torch.tensor((command, index)))
        self._broadcast()

    def receive(self) -> tuple[int, int]:
        self._broadcast()
        command, index = self.buffer.tolist()
        return command, index

    def _broadcast(self) -> None:
        self.count += 1
        if self.count == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        dist.broadcast(self.buffer, 0)


def serve(works: list[RankWork], channel: Channel, clock: PhaseClock) -> None:
    """A rank but 0: run what rank 0 commands, until STOP (its phases timed as rank 0's)."""
    while True:
        command, index = channel.receive()
        if command == STOP:
            return
        work = works[index]
        if command == RUN_EP:
            work.ep(clock)
        elif command == RUN_RAW:
            work.raw()
        elif command == CHECK_EP:
            clock.reset()
            work.check_ep()
        elif command == CHECK_RAW:
            work.check_raw()
        elif command == LAPS:
            gathered(clock.samples())


def _ordered(channel: Channel, command: int, index: int, fn):
    """`fn` after broadcasting (command, index); whatever it raises ends the run (Broken)."""

    def call(*args):
        try:
            channel.order(command, index)
            return fn(*args)
        except Exception as err:  # noqa: BLE001 - re-raised past check_then_time, run over
            raise Broken(error_line(err)) from err

    return call


def _candidates(work: RankWork, index: int, channel: Channel, clock: PhaseClock) -> list:
    """The work's three paths as rank 0's candidates (each skipped where the dispatch cannot
    run); the clock restarts after the layer's checked call, so it holds the timed calls."""
    if work.reason:
        return [unsupported(name, work.reason) for name in NAMES]
    flops = work.case.flops() * (BACKWARD_FLOPS if work.backward else 1)

    def single():
        with all_cores():
            return work.single()

    def check_ep(out):
        clock.reset()
        return work.check_ep(out)

    def ordered(command, fn):
        return _ordered(channel, command, index, fn)

    return [
        Candidate(
            EP, ordered(RUN_EP, lambda: work.ep(clock)), ordered(CHECK_EP, check_ep), flops=flops
        ),
        Candidate(SINGLE, ordered(RUN_SINGLE, single), work.check_single, flops=flops),
        Candidate(RAW, ordered(RUN_RAW, work.raw), ordered(CHECK_RAW, work.check_raw)),
    ]


def _fastest(laps: list[dict], name: str) -> list[float]:
    """Phase `name`'s time per call on the rank that took least: the last to arrive at an
    all-to-all waits for no one, so its time is the transport's, not the others' load."""
    return [min(call) for call in zip(*(rank.get(name, []) for rank in laps))]


def _phase_records(ep: rec.Record, laps: list[dict], facts) -> list[rec.Record]:
    """A record per phase of the layer: rank 0's median over the timed calls (and the fastest
    rank's, per call), the layer's check."""
    out = []
    for name in PHASE_ORDER:
        samples = laps[0].get(name)
        if not samples:
            continue
        median = statistics.median(samples)
        metrics = {"phase": name, "share_of_layer": median / ep.median_ms}
        metrics["fastest_rank_ms"] = statistics.median(_fastest(laps, name))
        record = rec.info(
            ep.topic, ep.case, phase_implementation(name), facts=facts, dtype=ep.dtype,
            shape=ep.shape, mode=ep.mode, median_ms=median, min_ms=min(samples),
            samples_ms=tuple(samples), reps=len(samples), method=PHASE_METHOD, check=ep.check,
            metrics=metrics,
        )  # fmt: skip
        share(record, ep)  # profiled (profile mode `all`) with the layer's own call
        out.append(record)
    return out


def _finish(records, work: RankWork, laps: list[dict], facts, *, headline: bool) -> list:
    """Metrics (tokens/s, bytes sent per token, the all-to-all's fraction of the raw transport),
    the headline where `headline` (the forward of the throughput shape), the phase records."""
    by = {r.implementation: r for r in records}
    calls = [sum(c) for c in zip(*(_fastest(laps, name) for name in A2A))] if laps else []
    all_to_all = statistics.median(calls) if calls else 0.0
    common = {
        "bytes_sent_per_token": work.cross_bytes_per_token(),
        "threads_per_rank": torch.get_num_threads(),
        "backend": dist.get_backend(),
        "local_strategy": EP_STRATEGY,
    }
    out = []
    for r in records:
        if r.status == "ok":
            metrics = {**r.metrics, **common}
            if r.implementation != RAW:
                metrics["tokens_per_s"] = work.case.shape.tokens / r.median_ms * 1e3
            if r.implementation == EP and by[RAW].status == "ok" and all_to_all:
                metrics["all_to_all_ms"] = all_to_all
                metrics["all_to_all_fraction_of_transport"] = by[RAW].median_ms / all_to_all
            r = dataclasses.replace(r, metrics=metrics)
            if r.implementation == EP and headline and r.ratio_vs_baseline is not None:
                r = rec.as_headline(r, HEADLINE)
        out.append(r)
    ep = next(r for r in out if r.implementation == EP)
    return out + (_phase_records(ep, laps, facts) if ep.status == "ok" else [])


def _laps(channel: Channel, clock: PhaseClock) -> list[dict]:
    """Every rank's phase times of the layer's timed calls, on rank 0."""
    try:
        channel.order(LAPS)
        return gathered(clock.samples())
    except Exception as err:  # noqa: BLE001 - the ranks may be out of step: the run is over
        raise Broken(error_line(err)) from err


def drive(works: list[RankWork], channel: Channel, cfg: MoEBenchConfig, spec: dict, facts):
    """Rank 0: every work checked then timed, its records finished; the profiled pass; STOP."""
    clock, records = PhaseClock(torch.device(facts.device)), []
    for index, work in enumerate(works):
        mode = "forward_backward" if work.backward else "forward"
        what = Case(TOPIC, work.spec.case, work.spec.shape | {"W": work.world}, cfg.dtype, mode)
        timed = check_then_time(
            what,
            _candidates(work, index, channel, clock),
            facts=facts,
            baseline=SINGLE,
            min_time_s=cfg.min_time_s,
            rounds=EP_ROUNDS,
            warmup=WARMUP,
        )
        laps = _laps(channel, clock) if work.reason is None else []
        first = spec["headline"] and work.spec.preset is None and not work.backward
        records += _finish(timed, work, laps, facts, headline=first)
    records = profiled(records)
    channel.order(STOP)
    return records


def _rank(run_dir: Path, rank: int) -> None:
    torch.set_num_threads(threads_each(int(os.environ["LOCAL_WORLD_SIZE"])))
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", device_id=device if cuda else None)
    spec = [json.loads((run_dir / SPEC).read_text()) if rank == 0 else None]
    dist.broadcast_object_list(spec, src=0)
    spec = spec[0]
    if spec.get("release"):
        (run_dir / RELEASED).touch()
        dist.destroy_process_group()
        return
    cfg = MoEBenchConfig(**spec["config"])
    facts = dataclasses.replace(device_facts(), device=str(device))
    world, works = dist.get_world_size(), []
    for ep_case in ep_cases(cfg):
        case = ep_case.build(cfg, facts)
        works += [RankWork(ep_case, case, backward=b, rank=rank, world=world) for b in modes(cfg)]
    channel = Channel(device, rank)
    if rank == 0:
        rec.save_records(drive(works, channel, cfg, spec, facts), RESULTS, run_dir)
    else:
        serve(works, channel, PhaseClock(device))
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    """One rank: its pid, its work, its error line where it raises."""
    run_dir = Path((sys.argv[1:] if argv is None else argv)[0])
    rank = int(os.environ["RANK"])
    (run_dir / f"rank{rank}.pid").write_text(str(os.getpid()))
    try:
        _rank(run_dir, rank)
    except BaseException as err:
        line = str(err) if isinstance(err, Broken) else error_line(err)
        (run_dir / f"rank{rank}.error").write_text(line)
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
