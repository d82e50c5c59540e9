"""Routers: token -> (expert, weight) assignments, in one flat structure every dispatch consumes.

Legend: T tokens, D model width, E experts, K top-k, A assignments (T*K for token-choice routers).
Token-choice: Shazeer et al. 2017 (top-k), Fedus et al. 2021 (switch), Roller et al. 2021 (hash);
expert-choice: Zhou et al. 2022, https://arxiv.org/abs/2202.09368.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

SCORES = ("softmax", "sigmoid")


class Routing(NamedTuple):
    """Assignments of tokens to experts; dropped ones are already removed.

    token_idx, expert_idx: (A,) int64. weight: (A,) fp32 gate weights. counts: (E,) int64 kept
    assignments per expert. dropped: (E,) int64 assignments each expert refused (capacity).
    logits: (T, E) fp32 router logits (for losses and metrics), None for routers without a gate.
    top_k: K for token-choice routers, whose assignments fill a (T, K) grid; slot: (A,) int64 row
    of each assignment in that grid flattened token-major (t*K + k). Capacity drops leave empty
    slots. Both None for expert choice.
    """

    token_idx: Tensor
    expert_idx: Tensor
    weight: Tensor
    counts: Tensor
    dropped: Tensor
    num_tokens: int
    num_experts: int
    logits: Tensor | None
    top_k: int | None = None
    slot: Tensor | None = None


def check_top_k(top_k: int, num_experts: int) -> None:
    """Raise ValueError unless 1 <= top_k <= num_experts."""
    if num_experts < 1:
        raise ValueError(f"num_experts={num_experts} must be >= 1")
    if not 1 <= top_k <= num_experts:
        raise ValueError(f"top_k={top_k} must be in [1, num_experts={num_experts}]")


def from_topk(
    expert_ids: Tensor, weights: Tensor, num_experts: int, logits: Tensor | None
) -> Routing:
    """Flatten (T, K) expert ids and weights into a Routing (token-major assignment order)."""
    num_tokens, k = expert_ids.shape
    token_idx = torch.arange(num_tokens, device=expert_ids.device).repeat_interleave(k)
    expert_idx = expert_ids.reshape(-1).long()
    counts = torch.bincount(expert_idx, minlength=num_experts)
    return Routing(
        token_idx,
        expert_idx,
        weights.reshape(-1).float(),
        counts,
        torch.zeros_like(counts),
        num_tokens,
        num_experts,
        logits,
        k,
        torch.arange(num_tokens * k, device=expert_ids.device),
    )


def _scores(logits: Tensor, score: str) -> Tensor:
    if score not in SCORES:
        raise ValueError(f"score={score!r} must be one of {SCORES}")
    return logits.softmax(-1) if score == "softmax" else logits.sigmoid()


def route_topk(
    logits: Tensor, *, top_k: int, score: str = "softmax", renormalize: bool = True
) -> Routing:
    """Top-k token choice from router logits (T, E): scores, top-k, optional renormalisation.

    Scores are computed in fp32 whatever the logits' dtype.
    """
    check_top_k(top_k, logits.shape[-1])
    logits = logits.float()
    weights, expert_ids = _scores(logits, score).topk(top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(-1, keepdim=True).clamp_min(1e-20)
    return from_topk(expert_ids, weights, logits.shape[-1], logits)


def route_group_limited(
    logits: Tensor,
    *,
    top_k: int,
    num_groups: int = 1,
    top_groups: int = 1,
    score: str = "sigmoid",
    bias: Tensor | None = None,
    renormalize: bool = True,
    scale: float = 1.0,
) -> Routing:
    """Group-limited top-k with a selection bias (DeepSeek-V3, arXiv:2412.19437 sec. 2.1.2).

    logits: (T, E), scored in fp32 (fp64 stays fp64). Experts form `num_groups` contiguous
    groups of E/G; a group's score is the sum of its two best biased scores (one when E/G = 1);
    each token keeps its `top_groups` best groups and picks its top-k experts inside them by
    score + bias. bias: (E,) shifts the choice only (aux-loss-free balancing); the weights are
    the unbiased scores, renormalised over the K chosen when `renormalize`, times `scale`.
    num_groups=1 with no bias is route_topk (then times `scale`).
    """
    num_tokens, num_experts = logits.shape
    check_top_k(top_k, num_experts)
    if num_groups < 1 or num_experts % num_groups:
        raise ValueError(f"num_groups={num_groups} must divide num_experts={num_experts}")
    if not 1 <= top_groups <= num_groups:
        raise ValueError(f"top_groups={top_groups} must be in [1, num_groups={num_groups}]")
    per_group = num_experts // num_groups
    if top_k > top_groups * per_group:
        raise ValueError(
            f"top_k={top_k} must be <= top_groups x experts per group = {top_groups * per_group}"
        )
    if bias is not None and bias.shape != (num_experts,):
        raise ValueError(f"bias shape {tuple(bias.shape)} must be ({num_experts},)")
    if logits.dtype != torch.float64:
        logits = logits.float()
    scores = _scores(logits, score)
    choice = scores if bias is None else scores + bias.to(scores)
    if num_groups > 1:
        grouped = choice.view(num_tokens, num_groups, per_group)
        group_score = grouped.topk(min(2, per_group), dim=-1).values.sum(-1)  # (T, G)
        keep = group_score.topk(top_groups, dim=-1).indices
        outside = torch.ones_like(group_score, dtype=torch.bool).scatter_(1, keep, False)
        # -inf as DeepSeek-V3's inference code; HF transformers fills 0.0, which differs only
        # where a kept group's biased scores are all below 0
        choice = grouped.masked_fill(outside[..., None], -math.inf).view_as(scores)
    expert_ids = choice.topk(top_k, dim=-1).indices
    weights = scores.gather(1, expert_ids)
    if renormalize:
        weights = weights / weights.sum(-1, keepdim=True).clamp_min(1e-20)
    return from_topk(expert_ids, weights * scale, num_experts, logits)


def route_hash(token_ids: Tensor, *, num_experts: int, top_k: int = 1) -> Routing:
    """Hash routing: a fixed multiplicative hash of each token id picks K distinct experts.

    Deterministic per token id and independent of any learned weight; weights are 1/K.
    """
    check_top_k(top_k, num_experts)
    h = (token_ids.long() * 2654435761) % (2**32)  # Knuth's multiplicative hash
    first = (h >> 7) % num_experts
    expert_ids = (first[:, None] + torch.arange(top_k, device=token_ids.device)) % num_experts
    weights = torch.full(expert_ids.shape, 1.0 / top_k, device=token_ids.device)
    return from_topk(expert_ids, weights, num_experts, None)


def route_expert_choice(logits: Tensor, *, capacity: int) -> Routing:
    """Expert choice: each expert takes its `capacity` highest-scoring tokens (softmax over E).

    A token may be taken by several experts or by none; no expert ever overflows.
    """
    num_tokens, num_experts = logits.shape
    if capacity < 0:
        raise ValueError(f"capacity={capacity} must be >= 0")
    capacity = min(capacity, num_tokens)
    scores = logits.float().softmax(-1)
    weight, token_idx = scores.t().topk(capacity, dim=-1)  # (E, C)
    expert_idx = torch.arange(num_experts, device=logits.device).repeat_interleave(capacity)
    counts = torch.full((num_experts,), capacity, dtype=torch.long, device=logits.device)
    return Routing(
        token_idx.reshape(-1),
        expert_idx,
        weight.reshape(-1),
        counts,
        torch.zeros_like(counts),
        num_tokens,
        num_experts,
        logits.float(),
    )


class TopKRouter(nn.Module):
    """Linear gate (no bias) + top-k; Gaussian logit noise of `noise_std` in training only."""

    def __init__(
        self,
        hidden: int,
        num_experts: int,
        *,
        top_k: int,
        score: str = "softmax",
        renormalize: bool = True,
        noise_std: float = 0.0,
    ):
        super().__init__()
        check_top_k(top_k, num_experts)
        self.gate = nn.Linear(hidden, num_experts, bias=False)
        self.top_k, self.score, self.renormalize, self.noise_std = (
            top_k,
            score,
            renormalize,
            noise_std,
        )

    def logits(self, x: Tensor) -> Tensor:
        logits = self.gate(x).float()
        if self.training and self.noise_std > 0:
            logits = logits + torch.randn_like(logits) * self.noise_std
        return logits

    def forward(self, x: Tensor, token_ids: Tensor | None = None) -> Routing:
        return route_topk(
            self.logits(x), top_k=self.top_k, score=self.score, renormalize=self.renormalize
        )


class SwitchRouter(TopKRouter):
    """Switch Transformer top-1: multiplicative input jitter U(1-eps, 1+eps) in training only."""

    def __init__(self, hidden: int, num_experts: int, *, jitter: float = 0.0):
        super().__init__(hidden, num_experts, top_k=1, renormalize=False)
        self.jitter = jitter

    def logits(self, x: Tensor) -> Tensor:
        if self.training and self.jitter > 0:
            x = x * torch.empty_like(x).uniform_(1 - self.jitter, 1 + self.jitter)
        return self.gate(x).float()


class LearnedRouter(TopKRouter):
    """An MLP gate (D -> H -> E, GELU) instead of a single linear layer."""

    def __init__(
        self, hidden: int, num_experts: int, *, top_k: int, router_hidden: int = 64, **kw
    ):
        super().__init__(hidden, num_experts, top_k=top_k, **kw)
        self.gate = nn.Sequential(
            nn.Linear(hidden, router_hidden), nn.GELU(), nn.Linear(router_hidden, num_experts)
        )


class HashRouter(nn.Module):
    """Hash routing on token ids (vocabulary ids, or positions when none are given)."""

    def __init__(self, num_experts: int, *, top_k: int = 1):
        super().__init__()
        check_top_k(top_k, num_experts)
        self.num_experts, self.top_k = num_experts, top_k

    def forward(self, x: Tensor, token_ids: Tensor | None = None) -> Routing:
        if token_ids is None:
            token_ids = torch.arange(x.shape[0], device=x.device)
        if token_ids.shape != x.shape[:1]:
            raise ValueError(f"token_ids shape {tuple(token_ids.shape)} must be ({x.shape[0]},)")
        return route_hash(token_ids, num_experts=self.num_experts, top_k=self.top_k)


class ExpertChoiceRouter(TopKRouter):
    """Experts pick tokens: capacity = ceil(T * K * capacity_factor / E) tokens per expert."""

    def __init__(self, hidden: int, num_experts: int, *, top_k: int, capacity_factor: float = 1.0):
        super().__init__(hidden, num_experts, top_k=top_k)
        self.capacity_factor = capacity_factor

    def forward(self, x: Tensor, token_ids: Tensor | None = None) -> Routing:
        num_experts = self.gate.out_features
        capacity = math.ceil(x.shape[0] * self.top_k * self.capacity_factor / num_experts)
        return route_expert_choice(self.logits(x), capacity=capacity)


class DynamicCapacityRouter(TopKRouter):
    """Top-k whose capacity factor follows the batch's imbalance, clamped to [min_cf, max_cf].

    The layer reads `capacity_factor_for(routing)`: max load over mean load, so a balanced batch
    drops nothing and a skewed one drops only the excess beyond max_cf.
    """

    def __init__(
        self,
        hidden: int,
        num_experts: int,
        *,
        top_k: int,
        min_cf: float = 1.0,
        max_cf: float = 2.0,
        **kw,
    ):
        super().__init__(hidden, num_experts, top_k=top_k, **kw)
        self.min_cf, self.max_cf = min_cf, max_cf

    def capacity_factor_for(self, routing: Routing) -> float:
        counts = routing.counts.float()
        ratio = (counts.max() / counts.mean().clamp_min(1e-20)).item() if counts.numel() else 1.0
        return float(min(max(ratio, self.min_cf), self.max_cf))


def routing_entropy(probs: Tensor) -> Tensor:
    """Mean per-token entropy of router probabilities (T, E), in nats."""
    return -(probs * probs.clamp_min(1e-20).log()).sum(-1).mean()


def gate_probs(routing: Routing) -> Tensor | None:
    """Softmax probabilities (T, E) of the router logits, or None for gateless routers."""
    return None if routing.logits is None else F.softmax(routing.logits, -1)
