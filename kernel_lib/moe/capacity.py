"""Capacity-factor mode: each expert keeps at most C assignments, chosen by router priority.

Legend: T tokens, E experts, A assignments. Overflow is decided by gate weight (highest kept),
ties by token order, never at random; dropped assignments contribute nothing, so the block's
residual carries those tokens through unchanged (Switch Transformer, Fedus et al. 2021, sec. 2.2).
"""

from __future__ import annotations

import math

import torch

from kernel_lib.moe.routing import Routing


def expert_capacity(
    num_assignments: int, num_experts: int, *, capacity_factor: float, min_capacity: int = 0
) -> int:
    """C = max(ceil(capacity_factor * A / E), min_capacity); A counts all top-k assignments."""
    if capacity_factor <= 0:
        raise ValueError(f"capacity_factor={capacity_factor} must be > 0")
    if min_capacity < 0:
        raise ValueError(f"min_capacity={min_capacity} must be >= 0")
    return max(math.ceil(capacity_factor * num_assignments / num_experts), min_capacity)


def rank_within_expert(routing: Routing) -> torch.Tensor:
    """(A,) position of each assignment in its expert's queue, highest weight first."""
    num_a = routing.expert_idx.numel()
    # Sort by weight descending (stable: earlier tokens win ties), then stably by expert.
    by_weight = torch.sort(routing.weight, descending=True, stable=True).indices
    order = by_weight[torch.sort(routing.expert_idx[by_weight], stable=True).indices]
    starts = torch.cumsum(routing.counts, 0) - routing.counts
    rank = torch.empty(num_a, dtype=torch.long, device=routing.weight.device)
    rank[order] = torch.arange(num_a, device=rank.device) - starts[routing.expert_idx[order]]
    return rank


def apply_capacity(routing: Routing, capacity: int) -> Routing:
    """Drop each expert's lowest-priority assignments beyond `capacity`; count drops per expert."""
    if capacity < 0:
        raise ValueError(f"capacity={capacity} must be >= 0")
    keep = rank_within_expert(routing) < capacity
    kept_counts = torch.clamp(routing.counts, max=capacity)
    return routing._replace(
        token_idx=routing.token_idx[keep],
        expert_idx=routing.expert_idx[keep],
        weight=routing.weight[keep],
        counts=kept_counts,
        dropped=routing.dropped + routing.counts - kept_counts,
        slot=None if routing.slot is None else routing.slot[keep],
    )
