"""Load metrics of one routing: tokens per expert, coefficient of variation, entropy, drop rate.

Legend: E experts, A assignments.
"""

from __future__ import annotations

import math

from kernel_lib.moe.routing import Routing, gate_probs, routing_entropy


def load_metrics(routing: Routing) -> dict:
    """Plain-Python figures of a routing (one host sync; call outside timed regions).

    tokens_per_expert: kept assignments per expert. cv: std/mean of that load (population std).
    load_entropy: entropy of the load distribution over log(E) (1 = perfectly balanced).
    router_entropy: mean per-token entropy of the router softmax (nats; None without a gate).
    dropped_per_expert, drop_rate: assignments refused by capacity, over all routed assignments.
    """
    counts = routing.counts.double()
    total = counts.sum().item()
    dropped = routing.dropped.sum().item()
    mean = counts.mean().item() if counts.numel() else 0.0
    share = counts / total if total else counts
    entropy = -(share * share.clamp_min(1e-300).log()).sum().item()
    probs = gate_probs(routing)
    return {
        "tokens_per_expert": [int(c) for c in routing.counts.tolist()],
        "dropped_per_expert": [int(c) for c in routing.dropped.tolist()],
        "cv": counts.std(unbiased=False).item() / mean if mean else 0.0,
        "load_entropy": entropy / math.log(routing.num_experts)
        if routing.num_experts > 1
        else 1.0,
        "router_entropy": None
        if probs is None or not len(probs)
        else routing_entropy(probs).item(),
        "drop_rate": dropped / (total + dropped) if total + dropped else 0.0,
    }
