"""What the host allocator does to a timing: the same small workload with fresh outputs (relu of
an M x N bf16 tensor, an M x K x N bf16 GEMM) timed in one fresh process per allocator
(kernel_lib.allocator), the processes interleaved by round, each allocator's ratio against glibc's
malloc as it comes (`system`) paired by round. An allocator whose library is not installed is
recorded `skipped` with the apt package that installs it.

Run as `python -m kernel_lib.backends.allocation REQUEST` it is one such process: it checks each
workload's first output, then times it, and prints the checks and timings as JSON.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import torch

from kernel_lib import ROOT, allocator, checks
from kernel_lib.backends import tolerances
from kernel_lib.backends.config import BackendBenchConfig
from kernel_lib.backends.roofline import gemm_check
from kernel_lib.backends.target import TOPIC, Target
from kernel_lib.checks import Check
from kernel_lib.measure import with_baseline
from kernel_lib.records import Record, failed, measured, wrong
from kernel_lib.timing import Timing, merge_rounds, time_fn

BASELINE = "system"
CASES = ("relu_fresh_output", "gemm_fresh_output")
TIMEOUT_S = 300


def work(m: int, k: int, n: int) -> dict[str, tuple[float | None, float]]:
    """case -> (FLOPs, bytes read + written) of one call (bf16: 2 bytes an element)."""
    return {
        "relu_fresh_output": (None, 2 * 2 * m * n),
        "gemm_fresh_output": (2 * m * k * n, 2 * (m * k + k * n + m * n)),
    }


def workloads(m: int, k: int, n: int, *, seed: int = 0) -> dict:
    """case -> (fn, check): each call allocates its output afresh (the point of the section)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, n, generator=gen).bfloat16()
    a = torch.randn(m, k, generator=gen).bfloat16()
    b = torch.randn(k, n, generator=gen).bfloat16()
    relu_ref = checks.exact(
        lambda: torch.where(x > 0, x, torch.zeros_like(x)), reference="where(x > 0, x, 0)"
    )
    return {
        "relu_fresh_output": (lambda: torch.relu(x), relu_ref),
        "gemm_fresh_output": (
            lambda: torch.mm(a, b),
            gemm_check(a, b, tolerances.GEMM["bfloat16"]),
        ),
    }


def _child(request: dict) -> dict:
    """In the fresh process: per case its check and, when it passed, its timing."""
    out = {"allocator": allocator.in_effect()}
    for case, (fn, check) in workloads(*request["shape"]).items():
        result = check(fn())
        out[case] = {"check": dataclasses.asdict(result)}
        if result.passed:
            timing = time_fn(fn, warmup=2, min_time_s=request["min_time_s"])
            out[case]["timing"] = dataclasses.asdict(timing)
    return out


def _run_child(name: str, request: dict) -> dict:
    """One process under allocator `name`; RuntimeError naming its last stderr line on failure."""
    proc = subprocess.run(
        [sys.executable, "-m", __name__, json.dumps(request)],
        env=allocator.environment(name),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]
        raise RuntimeError(f"allocator {name}: process exited {proc.returncode}: {tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _record(target: Target, case: str, name: str, rounds: list[dict], ident: dict) -> Record:
    """One allocator's record of `case` from its rounds: wrong if any round's check failed."""
    results = [r[case] for r in rounds]
    bad = next((Check(**r["check"]) for r in results if not r["check"]["passed"]), None)
    if bad is not None:
        return wrong(TOPIC, case, name, bad, facts=target.facts, **ident)
    timing = merge_rounds(
        [
            Timing(**{k: tuple(v) if isinstance(v, list) else v for k, v in r["timing"].items()})
            for r in results
        ],
        f"perf_counter, one process per allocator and round, interleaved over {len(results)} rounds",
    )
    flops, nbytes = work(*ident["shape"].values())[case]
    return measured(
        TOPIC,
        case,
        name,
        timing,
        facts=target.facts,
        flops=flops,
        bytes=nbytes,
        metrics={"allocator": rounds[0]["allocator"]},
        check=Check(**results[0]["check"]),
        **ident,
    )


def allocator_effect(target: Target, cfg: BackendBenchConfig) -> list[Record]:
    """Per case and allocator of cfg.allocators one record (skipped where its library is not
    installed, failed where its process failed, wrong where a check failed), each ok one with
    its ratio against `system` (> 1: faster than glibc's malloc as it comes)."""
    m, k, n = cfg.allocator_shape
    ident = {"dtype": "bfloat16", "shape": {"M": m, "K": k, "N": n}}
    if not target.present:
        return [target.absent(case, name, **ident) for case in CASES for name in cfg.allocators]
    out: dict[str, list[Record]] = {}
    rounds: dict[str, list[dict]] = {}
    for name in cfg.allocators:
        try:
            allocator.environment(name)
            rounds[name] = []
        except allocator.Missing as why:
            out[name] = [target.skip(case, name, str(why), **ident) for case in CASES]
    request = {"shape": [m, k, n], "min_time_s": cfg.min_time_s}
    order = list(rounds)
    for index in range(cfg.allocator_rounds):
        for name in order if index % 2 == 0 else order[::-1]:
            if name in out:  # its process failed in an earlier round
                continue
            try:
                rounds[name].append(_run_child(name, request))
            except (RuntimeError, subprocess.TimeoutExpired) as why:
                out[name] = [
                    failed(TOPIC, case, name, str(why), facts=target.facts, **ident)
                    for case in CASES
                ]
    for name, results in rounds.items():
        if name not in out:
            out[name] = [_record(target, case, name, results, ident) for case in CASES]
    by_case = [[out[name][i] for name in cfg.allocators] for i in range(len(CASES))]
    return [r for records in by_case for r in with_baseline(records, BASELINE)]


if __name__ == "__main__":
    print(json.dumps(_child(json.loads(sys.argv[1]))))
