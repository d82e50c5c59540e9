"""Router losses: Switch and GShard load balancing, an entropy regulariser, router z-loss.

Legend: T tokens, E experts, K top-k. All take fp32 router logits (T, E) and return a scalar.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from kernel_lib.moe.routing import Routing


def _assignment_fraction(routing: Routing) -> Tensor:
    """f_e: share of all routed assignments (before capacity drops) that chose expert e."""
    routed = (routing.counts + routing.dropped).float()
    return routed / routed.sum().clamp_min(1)


def switch_aux_loss(routing: Routing) -> Tensor:
    """Switch Transformer (Fedus et al. 2021, eq. 4): E * sum_e f_e * P_e.

    f_e: fraction of assignments routed to e (top-k generalises the paper's top-1); P_e: mean
    softmax probability of e over tokens. Equals 1 for perfectly uniform routing.
    """
    probs = routing.logits.softmax(-1)
    return routing.num_experts * (_assignment_fraction(routing) * probs.mean(0)).sum()


def gshard_aux_loss(routing: Routing) -> Tensor:
    """GShard (Lepikhin et al. 2020, eq. 4 / Algorithm 1): (1/E) * sum_e (c_e / S) * m_e.

    c_e: tokens whose *first* choice (argmax of the gate) is e; S: tokens; m_e: mean gate
    probability of e. Uniform routing gives 1/E^2.
    """
    probs = routing.logits.softmax(-1)
    first = torch.bincount(probs.argmax(-1), minlength=routing.num_experts).float()
    return (first / max(routing.num_tokens, 1) * probs.mean(0)).sum() / routing.num_experts


def entropy_balance_loss(routing: Routing) -> Tensor:
    """1 - H(mean_t p_t) / log E: how far the average routing distribution is from uniform (0)."""
    mean_probs = routing.logits.softmax(-1).mean(0)
    entropy = -(mean_probs * mean_probs.clamp_min(1e-20).log()).sum()
    return 1 - entropy / math.log(routing.num_experts) if routing.num_experts > 1 else entropy * 0


def router_z_loss(routing: Routing) -> Tensor:
    """ST-MoE (Zoph et al. 2022, eq. 5): mean over tokens of logsumexp(logits)^2."""
    return torch.logsumexp(routing.logits, -1).square().mean()


AUX_LOSSES = {
    "switch": switch_aux_loss,
    "gshard": gshard_aux_loss,
    "entropy": entropy_balance_loss,
}
