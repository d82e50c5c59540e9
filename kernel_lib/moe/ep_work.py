"""The expert-parallel section's work on one rank (kernel_lib.moe.ep_run runs it under torchrun):
one case and mode split over the W ranks, its three timed paths and their checks.

Legend: T tokens, D model, E experts, W world size, L = E/W local experts.
Every rank builds the same seeded case (the throughput shape's `cases.make_case`, or a preset's
`bench_presets.preset_case`), takes its chunk of the tokens (`torch.tensor_split`: sizes differ by
one at most), their routing, and its L experts (`parallel.shard_experts`):
  expert_parallel  `parallel.expert_parallel_dispatch` of each rank's chunk, every rank at once
  single_rank      the same dispatch (EP_STRATEGY) of all T tokens over all E experts, rank 0 alone
                   with every core (the other ranks wait)
  all_to_all_raw   the transport alone: `dist.all_to_all_single` of the rows the layer sends, same
                   splits, out and back (no split exchange, no host sync)
Forward: the output y; forward + backward: dL/dx and the expert weights' gradients of
L = <y, grad_out>. The fp64 loop over experts is each rank's reference for its chunk
(`cases.reference`, `reference_grads`); a check gathers outputs and references to rank 0 once,
never in a timed call (the weight gradients: each rank's shard against the sum of every chunk's).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import re
import time
from collections import defaultdict
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor

from kernel_lib.checks import Check, Tolerance, check_output, exact
from kernel_lib.moe.bench import case_of
from kernel_lib.moe.bench_presets import preset_case, preset_record_shape
from kernel_lib.moe.cases import MoECase, reference, reference_grads
from kernel_lib.moe.config import MoEBenchConfig
from kernel_lib.moe.dispatch import sort_by_expert
from kernel_lib.moe.parallel import expert_parallel_dispatch, shard_experts
from kernel_lib.moe.presets import preset
from kernel_lib.moe.routing import Routing, from_topk
from kernel_lib.moe.strategies import dispatch_fn, unavailable
from kernel_lib.moe.tolerances import tolerance
from kernel_lib.platform import DeviceFacts
from kernel_lib.profiling.phases import phase

EP, SINGLE, RAW = "expert_parallel", "single_rank", "all_to_all_raw"
NAMES = (EP, SINGLE, RAW)
EP_STRATEGY = "sorted_grouped"  # the local experts' dispatch, and the single rank's
# the phases expert_parallel_dispatch marks, in order (kernel_lib.profiling.phases.PHASES)
PHASE_ORDER = ("sort/gather", "all-to-all out", "local experts", "all-to-all back", "combine")
ROUND_TRIP = "the rows sent, back from their round trip"


def phase_implementation(name: str) -> str:
    """The implementation name of phase `name`'s record (no '/', which a record id splits on)."""
    return f"{EP}." + re.sub(r"[^\w-]+", "_", name)


@dataclass(frozen=True)
class EPCase:
    """A case of the section: its record name and shape (W added per run), and its preset."""

    case: str
    shape: dict
    preset: str | None = None

    def build(self, cfg: MoEBenchConfig, facts: DeviceFacts) -> MoECase:
        """The seeded case on `facts.device` (the same on every rank)."""
        if self.preset is None:
            return case_of(cfg, facts, cfg.shapes[0])
        return preset_case(cfg, facts, preset(self.preset).scaled(cfg.preset_scale))


def ep_cases(cfg: MoEBenchConfig) -> list[EPCase]:
    """The throughput shape (the first moe_tokens, moe_hidden, moe_ffn at moe_experts,
    moe_top_k), then each of moe_ep_presets at moe_preset_tokens and moe_preset_scale."""
    out = [EPCase(EP, cfg.shapes[0].as_dict())]
    for name in cfg.ep_presets:
        model = preset(name).scaled(cfg.preset_scale)
        out.append(EPCase(f"{EP}_preset_{name}", preset_record_shape(cfg, model), name))
    return out


def modes(cfg: MoEBenchConfig) -> tuple[bool, ...]:
    """backward False (forward), then True (forward + backward) where moe_backward."""
    return (False, True) if cfg.backward else (False,)


def token_chunk(routing: Routing, start: int, stop: int) -> Routing:
    """The routing of tokens [start, stop) of a dropless token-choice routing (K assignments per
    token, token-major), its tokens numbered from 0."""
    k = routing.top_k
    if k is None or routing.expert_idx.numel() != routing.num_tokens * k:
        raise ValueError("token_chunk takes a dropless token-choice routing")
    ids = routing.expert_idx.view(-1, k)[start:stop]
    logits = None if routing.logits is None else routing.logits[start:stop]
    return from_topk(ids, routing.weight.view(-1, k)[start:stop], routing.num_experts, logits)


def rows_between(routing: Routing, world: int) -> Tensor:
    """(W, W) token rows chunk s sends to rank d (the owner of experts d*L .. d*L + L - 1)."""
    bounds = _bounds(routing.num_tokens, world)
    return torch.stack(
        [token_chunk(routing, a, b).counts.view(world, -1).sum(1).cpu() for a, b in bounds]
    )


@contextlib.contextmanager
def all_cores():
    """torch threads = every core this process may use, for the block (the single rank's)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class PhaseClock:
    """Each phase's milliseconds per call on this rank, from explicit timers around it
    (perf_counter; CUDA events on a GPU, read once the calls are done), each phase also marked
    for a profiler (`phase`). A `marker` of expert_parallel_dispatch."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.laps = defaultdict(list)

    def reset(self) -> None:
        self.laps.clear()

    @contextlib.contextmanager
    def __call__(self, name: str):
        with phase(name):
            if self.cuda:
                start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                start.record()
                yield
                end.record()
                self.laps[name].append((start, end))
            else:
                began = time.perf_counter()
                yield
                self.laps[name].append((time.perf_counter() - began) * 1e3)

    def samples(self) -> dict[str, list[float]]:
        """Each phase's milliseconds, one per call since the last reset."""
        if self.cuda:
            torch.cuda.synchronize()
            return {n: [a.elapsed_time(b) for a, b in laps] for n, laps in self.laps.items()}
        return {n: list(laps) for n, laps in self.laps.items()}


def _cpu(value):
    if isinstance(value, Tensor):
        return value.detach().cpu()
    if isinstance(value, tuple):
        return tuple(_cpu(v) for v in value)
    return value


def gathered(part) -> list | None:
    """`part` of every rank (its tensors on the CPU), in rank order, on rank 0; None elsewhere."""
    parts = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(_cpu(part), parts, dst=0)
    return parts


class RankWork:
    """One case and mode on this rank: its chunk of the tokens and routing, its L experts, the
    three paths (`ep`, `single` on rank 0, `raw`) and their checks (rank 0 gets the Check)."""

    def __init__(self, spec: EPCase, case: MoECase, *, backward: bool, rank: int, world: int):
        self.spec, self.case, self.backward, self.rank, self.world = (
            spec, case, backward, rank, world,
        )  # fmt: skip
        start, stop = _bounds(case.shape.tokens, world)[rank]
        self.x, self.grad_out = case.x[start:stop], case.grad_out[start:stop]
        self.routing = token_chunk(case.routing, start, stop)
        self.experts = shard_experts(case.feedforward, rank, world).requires_grad_(backward)
        self.rows = rows_between(case.routing, world)
        self.reason = unavailable(EP_STRATEGY, case.x, case.feedforward, backward=backward)
        self.dispatch = dispatch_fn(EP_STRATEGY)
        self.last = None  # this rank's latest output of `ep` or `raw`: what its check sends
        self._buffers = self._full_reference = self._trainable = None

    @property
    def tolerance(self) -> Tolerance:
        return tolerance("grads" if self.backward else "forward", self.case.dtype)

    def ep(self, marker=phase):
        """The expert-parallel layer on this rank's chunk (every rank calls it at once)."""
        if not self.backward:
            self.last = expert_parallel_dispatch(
                self.x, self.routing, self.experts, strategy=self.dispatch, marker=marker
            )
            return self.last
        x = self.x.detach().requires_grad_(True)
        with torch.enable_grad():
            y = expert_parallel_dispatch(
                x, self.routing, self.experts, strategy=self.dispatch, marker=marker
            )
            wrt = [x, self.experts.w_in, self.experts.w_out]
            self.last = torch.autograd.grad(y, wrt, self.grad_out)
        return self.last

    def single(self):
        """The same dispatch of every token over every expert, here alone (rank 0)."""
        case = self.case
        if not self.backward:
            return self.dispatch(case.x, case.routing, case.feedforward)
        if self._trainable is None:
            self._trainable = copy.deepcopy(case.feedforward).requires_grad_(True)
        x, experts = case.x.detach().requires_grad_(True), self._trainable
        with torch.enable_grad():
            y = self.dispatch(x, case.routing, experts)
            return torch.autograd.grad(y, [x, experts.w_in, experts.w_out], case.grad_out)

    def raw(self) -> Tensor:
        """The layer's rows out and back by two bare `dist.all_to_all_single` (every rank)."""
        if self._buffers is None:
            sent = self.x[sort_by_expert(self.routing)[1]]
            received = sent.new_empty(int(self.rows[:, self.rank].sum()), sent.shape[1])
            self._buffers = sent, received, torch.empty_like(sent)
        sent, received, back = self._buffers
        out, into = self.rows[self.rank].tolist(), self.rows[:, self.rank].tolist()
        dist.all_to_all_single(received, sent, into, out)
        dist.all_to_all_single(back, received, out, into)
        self.last = back
        return back

    def _joined(self, parts, *, shards: bool):
        """Every rank's part as one: outputs and dL/dx concatenated in token order; the weight
        gradients concatenated by expert (`shards`: each rank's L experts) or summed (each
        chunk's share of all E)."""
        if not self.backward:
            return torch.cat(parts)
        dx = torch.cat([p[0] for p in parts])
        if shards:
            return dx, *(torch.cat([p[i] for p in parts]) for i in (1, 2))
        return dx, *(sum(p[i] for p in parts) for i in (1, 2))

    def _reference(self):
        chunk = dataclasses.replace(
            self.case, x=self.x, routing=self.routing, grad_out=self.grad_out
        )
        return reference_grads(chunk, wrt_x=True) if self.backward else reference(chunk)

    def check_ep(self, out=None) -> Check | None:
        """Every rank's `ep` output (rank 0: `out`) against its chunk's fp64 reference, joined on
        rank 0 (which keeps the joined reference for `check_single`); None elsewhere."""
        parts = gathered((self.last if out is None else out, self._reference()))
        if parts is None:
            return None
        outs, refs = zip(*parts)
        self._full_reference = self._joined(refs, shards=False)
        return self._check(self._joined(outs, shards=True), self._full_reference)

    def check_single(self, out) -> Check:
        """Rank 0's `single` output against the reference `check_ep` joined (its candidate's
        check runs first), which is then let go."""
        ref, self._full_reference = self._full_reference, None
        return self._check(out, ref)

    def _check(self, out, ref) -> Check:
        what = "fp64 loop over experts"
        if not self.backward:
            return check_output(out, ref, reference=what, tolerance=self.tolerance)
        tol = self.tolerance
        checks = [  # dL/dx apart: the weight gradients' larger scale would hide its error
            check_output(out[0], ref[0], reference=f"{what}, autograd: dL/dx", tolerance=tol),
            check_output(
                out[1:], ref[1:], reference=f"{what}, autograd: weight gradients", tolerance=tol
            ),
        ]
        return next((c for c in checks if not c.passed), max(checks, key=lambda c: c.rel_error))

    def check_raw(self, out=None) -> Check | None:
        """Every rank's rows back from `raw` against those it sent, bit for bit, on rank 0."""
        parts = gathered((self.last if out is None else out, self._buffers[0]))
        if parts is None:
            return None
        outs, sent = zip(*parts)
        return exact(torch.cat(sent), reference=ROUND_TRIP)(torch.cat(outs))

    def cross_bytes_per_token(self) -> float:
        """Bytes of token rows that leave their rank, out and back, per token of the case."""
        rows = int(self.rows.sum() - self.rows.diagonal().sum())
        tokens = max(self.case.shape.tokens, 1)
        return 2 * rows * self.case.x.shape[1] * self.case.x.element_size() / tokens


def _bounds(tokens: int, world: int) -> list[tuple[int, int]]:
    """Each rank's token range [start, stop) of `tokens` split as torch.tensor_split does."""
    sizes = [len(c) for c in torch.arange(tokens).tensor_split(world)]
    starts = [sum(sizes[:r]) for r in range(world)]
    return [(s, s + n) for s, n in zip(starts, sizes)]
