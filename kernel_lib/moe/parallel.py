"""Expert parallelism: each rank owns E/W experts; tokens travel to their expert's rank by
all-to-all and come back the same way (GShard, Lepikhin et al. 2020, sec. 3.2).

Legend: T local tokens, D model, E experts, W world size, L = E/W local experts, R rows received.
The router is replicated; only the experts are sharded. The token all-to-alls are the
differentiable functional collectives, so gradients flow back to the sending rank. Phases
(kernel_lib.profiling.phases): `route` in the layer; `sort/gather`, `all-to-all out`, `local
experts`, `all-to-all back` and `combine` in `expert_parallel_dispatch`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed._functional_collectives import all_to_all_single_autograd, wait_tensor

from kernel_lib.moe.dispatch import combine_sorted, dispatch_sorted_grouped, sort_by_expert
from kernel_lib.moe.experts import FeedForwardExperts
from kernel_lib.moe.layers import MoELayer
from kernel_lib.moe.routing import Routing
from kernel_lib.profiling.phases import phase


def shard_experts(experts: FeedForwardExperts, rank: int, world_size: int) -> FeedForwardExperts:
    """The L = E/W experts rank `rank` owns (a contiguous block), as their own module."""
    if experts.num_experts % world_size:
        raise ValueError(
            f"num_experts={experts.num_experts} must be divisible by world_size={world_size}"
        )
    local = experts.num_experts // world_size
    shard = FeedForwardExperts(local, experts.hidden, experts.ffn, activation=experts.activation)
    with torch.no_grad():
        shard.w_in.copy_(experts.w_in[rank * local : (rank + 1) * local])
        shard.w_out.copy_(experts.w_out[rank * local : (rank + 1) * local])
    return shard.to(experts.w_in)  # its device and dtype


def _local_routing(expert_of_row: Tensor, num_local: int) -> Routing:
    """Each received row is its own 'token' with weight 1 on its local expert."""
    rows = expert_of_row.numel()
    counts = torch.bincount(expert_of_row, minlength=num_local)
    return Routing(
        torch.arange(rows, device=counts.device),
        expert_of_row,
        torch.ones(rows, device=counts.device),
        counts,
        torch.zeros_like(counts),
        rows,
        num_local,
        None,
        1,
        torch.arange(rows, device=counts.device),
    )


def expert_parallel_dispatch(
    x: Tensor,
    routing: Routing,
    local_experts: FeedForwardExperts,
    *,
    group=None,
    strategy: Callable = dispatch_sorted_grouped,
    marker: Callable[[str], AbstractContextManager] = phase,
) -> Tensor:
    """y (T, D) for this rank's tokens x (T, D) routed over all E experts, computed by the ranks
    that own them. Two host syncs (the split sizes); `strategy` runs the local experts; `marker`
    opens each phase (a timer's, kernel_lib.moe.ep_work.PhaseClock, or profiling's `phase`).
    Each all-to-all is waited for inside its phase."""
    world = dist.get_world_size(group)
    num_local = local_experts.num_experts
    if routing.num_experts != num_local * world:
        raise ValueError(
            f"routing.num_experts={routing.num_experts} != world_size={world}"
            f" x {num_local} local experts"
        )
    with marker("sort/gather"):
        order, tokens, _, _ = sort_by_expert(routing)
        sent = x[tokens]
    with marker("all-to-all out"):
        per_rank_expert = routing.counts.view(world, num_local)
        recv_counts = torch.empty_like(per_rank_expert)
        dist.all_to_all_single(recv_counts, per_rank_expert, group=group)  # (W sources, L)
        send_splits = per_rank_expert.sum(1).tolist()
        recv_splits = recv_counts.sum(1).tolist()
        group = group or dist.group.WORLD
        received = wait_tensor(all_to_all_single_autograd(sent, recv_splits, send_splits, group))
    with marker("local experts"):
        expert_of_row = torch.repeat_interleave(
            torch.arange(num_local, device=x.device).repeat(world), recv_counts.reshape(-1)
        )
        y_received = strategy(received, _local_routing(expert_of_row, num_local), local_experts)
    with marker("all-to-all back"):
        y_sorted = all_to_all_single_autograd(y_received, send_splits, recv_splits, group)
        y_sorted = wait_tensor(y_sorted)
    with marker("combine"):
        return combine_sorted(y_sorted, order, routing, x)


class ExpertParallelMoE(nn.Module):
    """A dropless MoELayer whose experts are split over the ranks of `group`."""

    def __init__(self, layer: MoELayer, *, group=None):
        super().__init__()
        if layer.cfg.capacity_factor is not None:
            raise NotImplementedError(
                "capacity_factor: expert parallelism is built for dropless layers only"
            )
        if not isinstance(layer.experts, FeedForwardExperts) or len(layer.shared):
            raise NotImplementedError(
                "expert parallelism runs FeedForwardExperts without shared experts"
            )
        self.group = group
        self.router = layer.router
        self.experts = shard_experts(
            layer.experts, dist.get_rank(group), dist.get_world_size(group)
        )

    def forward(self, x: Tensor, *, strategy: Callable = dispatch_sorted_grouped) -> Tensor:
        with phase("route"):
            routing = self.router(x)
        return expert_parallel_dispatch(
            x, routing, self.experts, group=self.group, strategy=strategy
        )
