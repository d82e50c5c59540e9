"""Experts scheduled across cores: each worker thread owns whole experts and runs their GEMMs
single-threaded, so no GEMM is split over cores.

Legend: T tokens, D model, F ffn, E experts, A kept assignments, W workers (torch's intra-op
thread count). A GEMM of one expert's rows (hundreds to a few thousand) split over every core
runs well below the one large GEMM of the same FLOPs on some CPUs (oneDNN's AMX kernels on a
2-core Xeon: 8 x (1024 x 2048 @ 2048 x 512) took 16-17 ms against 10.3-11.1 ms for one
8192-row GEMM, and 10.8 ms as two threads of 4 single-threaded GEMMs each). Whether it pays is
the chooser's to measure on each machine (`variants.choose`), like every strategy.

Forward only: each expert's output is written into one preallocated (A, D) buffer (`out=`),
which autograd does not record.
"""

from __future__ import annotations

import heapq
import itertools
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import Tensor

from kernel_lib.moe.dispatch import (
    _check_ffn,
    _check_inputs,
    check_inference,
    combine_sorted,
    sort_by_expert,
)  # fmt: skip
from kernel_lib.moe.experts import FeedForwardExperts, activate
from kernel_lib.moe.routing import Routing

_POOLS: dict[int, ThreadPoolExecutor] = {}


def _pool(workers: int) -> ThreadPoolExecutor:
    """`workers` threads, each running its torch ops on one intra-op thread (OpenMP's thread
    count is per thread: the caller keeps its own)."""
    if workers not in _POOLS:
        _POOLS[workers] = ThreadPoolExecutor(
            workers,
            thread_name_prefix="moe-per-core",
            initializer=torch.set_num_threads,
            initargs=(1,),
        )
    return _POOLS[workers]


def assign(counts: list[int], workers: int) -> list[list[int]]:
    """Experts per worker, balanced by rows: largest expert first, each to the worker with the
    fewest rows so far (longest-processing-time first). Empty experts go to no worker; a worker
    may get none."""
    loads = [(0, w) for w in range(workers)]
    owned: list[list[int]] = [[] for _ in range(workers)]
    for e in sorted((e for e, n in enumerate(counts) if n), key=lambda e: -counts[e]):
        rows, w = heapq.heappop(loads)
        owned[w].append(e)
        heapq.heappush(loads, (rows + counts[e], w))
    return owned


def dispatch_per_core(x: Tensor, routing: Routing, experts: FeedForwardExperts) -> Tensor:
    """Sort by expert; W worker threads each gather their experts' rows and run both GEMMs and
    the activation on one core, into one (A, D) buffer; combine once (combine_sorted).

    x: (T, D) any float dtype; no autograd (check_inference). Reads the expert loads on the
    host (one sync), as the segment strategies do.
    """
    _check_inputs(x, routing)
    _check_ffn(experts)
    check_inference("per_core", x, experts)
    order, tokens, _, _ = sort_by_expert(routing)
    counts = routing.counts.tolist()
    starts = [0, *itertools.accumulate(counts)]
    y = x.new_empty(starts[-1], x.shape[1])

    def run(owned: list[int]) -> None:
        with torch.no_grad():  # grad mode is per thread: the caller's does not reach here
            for e in owned:
                rows = slice(starts[e], starts[e + 1])
                h = x.index_select(0, tokens[rows]) @ experts.w_in[e]
                torch.mm(
                    activate(h, experts.activation, inplace=True), experts.w_out[e], out=y[rows]
                )

    workers = torch.get_num_threads()
    list(_pool(workers).map(run, assign(counts, workers)))
    return combine_sorted(y, order, routing, x)
